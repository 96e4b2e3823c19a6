"""Reading chosen byte ranges of a remote file: split into READs, reassembled by offset (pure).

``ReadPlan`` plans a whole file from offset 0; a random-access read wants
only some ranges (``RemoteFile.pread``, ``read_ranges``, the read-ahead). A
``RangeRead`` is one such range: the driver asks ``next_range()``, sends the
READ and reports what came back. A reply shorter than asked is not the end
(filexfer-02 §6.4 lets the server return less): the rest is asked again at
``offset + received``, as asyncssh and OpenSSH do. An EOF ends the range
there: its result is short, as ``os.pread``'s is at the end of a file.

``spans`` merges a list of wanted ranges (overlapping, out of order) into
the few disjoint spans that cover them, so every byte moves once, and
``cut`` hands each wanted range its bytes back out of them.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from .readplan import Range


class RangeRead:
    """The READs of ``[offset, offset + length)``, and the bytes they brought.

    Args:
        offset: first byte wanted.
        length: bytes wanted (0 is done at once).
        block: longest READ to send.
    """

    def __init__(self, offset: int, length: int, block: int) -> None:
        if offset < 0 or length < 0:
            raise ValueError("offset and length must not be negative")
        if block <= 0:
            raise ValueError("block must be positive")
        self.offset = offset
        self.end = offset + length
        self.block = block
        self.frontier = offset  # the next byte never asked for
        self.holes: list[Range] = []  # the rest of short reads, asked again first
        self.outstanding = 0
        self.eof_at: int | None = None  # the lowest offset the server said EOF at
        self.short_reads = 0
        self.received = 0
        self._pieces: dict[int, bytes] = {}

    def __repr__(self) -> str:
        return (
            f"<RangeRead [{self.offset}, {self.end}) frontier={self.frontier} "
            f"holes={len(self.holes)} outstanding={self.outstanding} eof_at={self.eof_at}>"
        )

    @property
    def stop(self) -> int:
        """Where the range ends: its end, or the server's EOF before it."""
        return self.end if self.eof_at is None else min(self.end, self.eof_at)

    @property
    def wants(self) -> bool:
        """A READ is still to be sent (``next_range`` would give one)."""
        stop = self.stop
        return any(hole.offset < stop for hole in self.holes) or self.frontier < stop

    @property
    def done(self) -> bool:
        """Every byte below ``stop`` arrived and no READ is outstanding."""
        return self.outstanding == 0 and not self.wants

    def next_range(self) -> Range | None:
        """The next READ to send, or None when none is (holes first, then the frontier)."""
        stop = self.stop
        while self.holes:
            hole = self.holes.pop(0)
            if hole.offset < stop:
                return self._issue(Range(hole.offset, min(hole.end, stop) - hole.offset))
        if self.frontier >= stop:
            return None
        rng = Range(self.frontier, min(self.block, stop - self.frontier))
        self.frontier = rng.end
        return self._issue(rng)

    def _issue(self, rng: Range) -> Range:
        self.outstanding += 1
        return rng

    def put_back(self, rng: Range) -> None:
        """``rng`` was not sent after all: it is the first asked next."""
        self.outstanding -= 1
        self.holes.insert(0, rng)

    def on_data(self, rng: Range, data: bytes) -> None:
        """``data`` (1 to ``rng.length`` bytes, checked by ``classify_read``) arrived."""
        count = len(data)
        if not 0 < count <= rng.length:
            raise ValueError(f"reply of {count} bytes for a request of {rng.length}")
        self.outstanding -= 1
        self.received += count
        self._pieces[rng.offset] = data
        if count < rng.length:
            self.short_reads += 1
            self.holes.insert(0, Range(rng.offset + count, rng.length - count))

    def on_eof(self, rng: Range) -> None:
        """The server said EOF for ``rng``: the file ends at or before its offset."""
        self.outstanding -= 1
        if self.eof_at is None or rng.offset < self.eof_at:
            self.eof_at = rng.offset

    def on_lost(self, rng: Range) -> None:
        """``rng`` was never answered (the read failed): nothing more is owed for it."""
        self.outstanding -= 1

    def result(self) -> bytes:
        """The bytes of ``[offset, stop)`` in order (once ``done``)."""
        if not self.done:
            raise RuntimeError("range not read yet")
        stop = self.stop
        out: list[bytes] = []
        at = self.offset
        for offset in sorted(self._pieces):
            piece = self._pieces[offset]
            if offset != at:
                # Pieces tile the range exactly below ``stop``: a gap or an
                # overlap means a bug here, never a server's doing.
                if offset >= stop:
                    break
                raise RuntimeError(f"piece at {offset}, expected {at}")
            take = min(len(piece), stop - at)
            out.append(piece if take == len(piece) else piece[:take])
            at += take
            if at >= stop:
                break
        self._pieces.clear()
        return b"".join(out)


def spans(ranges: Sequence[tuple[int, int]]) -> list[Range]:
    """The disjoint spans, in order, that cover every ``(offset, length)`` of ``ranges``.

    Ranges that overlap or touch are merged; empty ones are dropped.

    Raises:
        ValueError: a negative offset or length.
    """
    wanted: list[Range] = []
    for offset, length in ranges:
        if offset < 0 or length < 0:
            raise ValueError(f"bad range ({offset}, {length}): negative")
        if length:
            wanted.append(Range(offset, length))
    merged: list[Range] = []
    for rng in sorted(wanted, key=lambda r: r.offset):
        if merged and rng.offset <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Range(last.offset, max(last.end, rng.end) - last.offset)
        else:
            merged.append(rng)
    return merged


def cut(ranges: Sequence[tuple[int, int]], covered: Sequence[tuple[Range, bytes]]) -> list[bytes]:
    """Each wanted ``(offset, length)``'s bytes, out of the spans read (``spans``'s, with
    what each returned: shorter than the span at the end of the file)."""
    starts = [span.offset for span, _ in covered]
    out: list[bytes] = []
    for offset, length in ranges:
        piece = b""
        index = bisect_right(starts, offset) - 1
        if length and index >= 0:
            span, data = covered[index]
            start = offset - span.offset
            piece = data[start : start + length]  # short, or empty, past the file's end
        out.append(piece)
    return out
