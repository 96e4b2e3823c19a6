"""How much may be in flight: the request and byte budget of one transfer (pure).

Bytes are charged before they are in memory and stay charged until they have
left it: a READ's from when it is sent, a WRITE's from before its payload is
read from the disk (``reserve``), each until it is written to disk, delivered
to the reader, or acknowledged by the server. So peak memory is bounded by
``max_bytes`` plus one block, and by the shared cap when there is one.
"""

from __future__ import annotations

from collections.abc import Callable


class SharedBytes:
    """Bytes several transfers may hold in flight together (a client's, a tree's big files).

    Every byte any of them holds is charged here, so together they stay within
    ``max_bytes``; only when nothing at all is charged may one block larger
    than the whole cap go, so an oversize block still makes progress. A
    transfer with nothing charged is given a block when one fits, in the
    order they asked: one refused waits in line, and as bytes come free the
    first in line is *granted* its block (charged to it before it is told,
    by its budget's ``on_room``), so 200 transfers at once wait their turn
    rather than each holding a block past the cap (200 puts of 4 MiB grew
    the client by 413 MiB against 64 when each could).

    Its owner may say how many transfers draw on it (``members``: the pool
    counts its leases, from before their file is open); those with something
    charged leave a block of room for each member with nothing charged (and
    each in line), so a transfer starting beside busy ones gets its first
    block within a round trip rather than after theirs.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("budget caps must be positive")
        self.max_bytes = max_bytes
        self.bytes = 0
        self.members = 0  # transfers that may draw on it (its owner counts them)
        self.busy = 0  # budgets drawing on it with something charged
        # Budgets with nothing charged, refused, waiting for a block: the
        # length each asked for, first asked first (dicts keep their order).
        self._line: dict[FlightBudget, int] = {}
        self._granting = False

    def __repr__(self) -> str:
        line = f" waiting={len(self._line)}" if self._line else ""
        return (
            f"<SharedBytes {self.bytes}/{self.max_bytes} members={self.members} "
            f"busy={self.busy}{line}>"
        )

    @property
    def waiting(self) -> int:
        """Budgets in line for their first block."""
        return len(self._line)

    def blocks(self, budget: FlightBudget, length: int) -> int:
        """Requests of ``length`` bytes ``budget`` may add now (0: none).

        A budget with nothing charged refused here is put in line: its grant
        comes in turn, through its ``on_room``.
        """
        length = max(1, length)
        free = self.max_bytes - self.bytes
        if budget.bytes > 0:
            idle = max(self.members - self.busy, len(self._line))
            return (free - idle * length) // length
        if budget in self._line:
            return 0  # its grant comes in turn
        if self._line or (free < length and self.bytes > 0):
            self._line[budget] = length
            return 0
        others = max(0, self.members - self.busy - 1)  # it is one of the idle members
        return max(1, (free - others * length) // length)

    def charge(self, count: int, busy: int = 0) -> None:
        """``count`` bytes more charged (fewer, if negative); ``busy`` budgets more busy."""
        self.bytes += count
        self.busy += busy
        if count < 0:
            self._grant()

    def leave(self, budget: FlightBudget) -> None:
        """``budget`` is out of line: it asks for nothing more, or it went past the line."""
        if self._line.pop(budget, None) is not None:
            self._grant()

    def _grant(self) -> None:
        """Blocks to those in line, in turn, while they fit."""
        if self._granting:
            return  # a grant's ``on_room`` freed bytes: the loop below looks again
        self._granting = True
        try:
            while self._line:
                budget, length = next(iter(self._line.items()))
                if self.bytes > 0 and self.max_bytes - self.bytes < length:
                    return
                del self._line[budget]
                budget.reserve(length)  # charged before it is told: nobody takes it meanwhile
                if budget.on_room is not None:
                    budget.on_room()
        finally:
            self._granting = False


class FlightBudget:
    """Counts requests and payload bytes in flight against two caps.

    Args:
        max_requests: most requests outstanding at once (``sftp -R``).
        max_bytes: most payload bytes charged at once (in flight or buffered).
        shared: a cap this transfer shares with others (``SharedBytes``):
            with nothing charged it may wait in line for its first block,
            and is told by ``on_room`` when it is granted. ``release`` when
            the transfer is over.
    """

    def __init__(
        self, *, max_requests: int, max_bytes: int, shared: SharedBytes | None = None
    ) -> None:
        if max_requests < 1 or max_bytes < 1:
            raise ValueError("budget caps must be positive")
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.shared = shared
        self.requests = 0
        self.bytes = 0
        # Of ``bytes``, those charged for requests not sent yet: an upload's
        # blocks being read from the disk, a block the shared cap granted.
        self.reserved = 0
        self.peak_requests = 0
        self.peak_bytes = 0
        self._held = 0
        # Called when the shared cap grants a block to this budget, which
        # waited in line with nothing charged: send it (the owner's ``fill``).
        self.on_room: Callable[[], None] | None = None

    def __repr__(self) -> str:
        shared = f" shared={self.shared.bytes}/{self.shared.max_bytes}" if self.shared else ""
        reserved = f" reserved={self.reserved}" if self.reserved else ""
        return (
            f"<FlightBudget requests={self.requests}/{self.max_requests} "
            f"bytes={self.bytes}/{self.max_bytes}{reserved}{shared}>"
        )

    @property
    def held(self) -> int:
        """Bytes kept outside the pipe that memory must still count: a verifying
        download's out-of-order pieces, waiting to be hashed in order."""
        return self._held

    @held.setter
    def held(self, count: int) -> None:
        change, self._held = count - self._held, count
        if self.shared is not None and change:
            self.shared.charge(change)

    def blocks(self, length: int) -> int:
        """Requests of ``length`` bytes the byte caps admit now, the reserved ones included.

        An empty pipe always admits one request of its own cap, so a block
        larger than the byte budget still makes progress instead of
        deadlocking; the shared cap may still make it wait its turn.
        """
        length = max(1, length)
        mine = self.reserved // length
        more = (self.max_bytes - self.bytes - self._held) // length
        if self.bytes == 0:
            more = max(more, 1)
        if self.shared is not None and more > 0:
            more = min(more, self.shared.blocks(self, length))
        return mine + max(0, more)

    def has_room(self, length: int) -> bool:
        return self.requests < self.max_requests and self.blocks(length) >= 1

    def reserve(self, count: int) -> None:
        """Charge ``count`` bytes now for requests sent later (``send`` uses them up)."""
        self.reserved += count
        self._add(count)
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def unreserve(self) -> None:
        """What is reserved and was not sent (a short last block, a grant unused) goes back."""
        count, self.reserved = self.reserved, 0
        if count:
            self._add(-count)

    def stop_asking(self) -> None:
        """Nothing more will be sent: the reserve goes back, and the place in line."""
        self.unreserve()
        if self.shared is not None:
            self.shared.leave(self)

    def send(self, length: int) -> None:
        self.requests += 1
        use = min(self.reserved, length)
        self.reserved -= use
        self._add(length - use)
        self.peak_requests = max(self.peak_requests, self.requests)
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def reply(self, length: int, kept: int) -> None:
        """A request of ``length`` bytes was answered; ``kept`` of them stay buffered."""
        self.requests -= 1
        self._add(kept - length)

    def free(self, count: int) -> None:
        """``count`` buffered bytes left our memory."""
        self._add(-count)

    def release(self) -> None:
        """The transfer is over: what it still has charged leaves the shared cap.

        Frees that come later (a write finishing after an error) count here only.
        """
        shared, self.shared = self.shared, None
        self.reserved = 0
        if shared is not None:
            shared.leave(self)
            shared.charge(-(self.bytes + self._held), -(self.bytes > 0))

    def _add(self, count: int) -> None:
        before = self.bytes
        self.bytes += count
        shared = self.shared
        if shared is not None and count:
            if before == 0:
                shared.leave(self)  # past the line: an oversize block, or one past the cap
            shared.charge(count, (self.bytes > 0) - (before > 0))
