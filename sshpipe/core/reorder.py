"""Deliver out-of-order pieces in offset order (pure).

Used by ``stream()``: replies arrive in any order, the reader wants bytes in
order. Pieces never overlap (the read planner hands out disjoint ranges), so a
dict keyed by offset is enough; what it holds is charged to the flight budget,
so it never holds more than the bytes in flight.
"""

from __future__ import annotations


class ReorderBuffer:
    def __init__(self, start: int = 0) -> None:
        self.delivered = start  # every byte below this was handed out
        self.buffered = 0
        self._pieces: dict[int, bytes] = {}

    def __repr__(self) -> str:
        return (
            f"<ReorderBuffer delivered={self.delivered} pieces={len(self._pieces)} "
            f"buffered={self.buffered}>"
        )

    def add(self, offset: int, data: bytes) -> None:
        if offset < self.delivered or offset in self._pieces:
            raise ValueError(f"piece at {offset} overlaps what was already received")
        if data:
            self._pieces[offset] = data
            self.buffered += len(data)

    def pop_ready(self, limit: int | None = None) -> list[bytes]:
        """The pieces that continue the delivered prefix, in order, never past ``limit``."""
        ready: list[bytes] = []
        while (piece := self._pieces.get(self.delivered)) is not None:
            if limit is not None and self.delivered >= limit:
                break
            del self._pieces[self.delivered]
            self.buffered -= len(piece)
            if limit is not None and self.delivered + len(piece) > limit:
                piece = piece[: limit - self.delivered]
            self.delivered += len(piece)
            ready.append(piece)
        return ready

    def discard(self) -> int:
        """Drop whatever is left (bytes past a shrunken EOF); returns how many."""
        dropped, self.buffered = self.buffered, 0
        self._pieces.clear()
        return dropped
