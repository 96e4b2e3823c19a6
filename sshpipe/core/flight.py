"""How much may be in flight: the request and byte budget of one transfer (pure).

Bytes are charged when a request is sent and stay charged until the payload
has left our memory (written to disk, delivered to the reader, or acknowledged
by the server), so peak memory is bounded by ``max_bytes`` plus one block.
"""

from __future__ import annotations


class SharedBytes:
    """Bytes several transfers may hold in flight together (a client's, a tree's big files).

    A transfer with nothing charged may always send one request, so none
    starves while others hold the bytes. Its owner may say how many
    transfers draw on it (``members``: the pool counts its leases, from
    before their file is open); the others then leave a block of room for
    each member with nothing charged, so together they stay within
    ``max_bytes`` while those blocks fit in it (200 transfers of 255 KiB
    blocks need 50 MiB of the client's 64), and within a block each past that.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("budget caps must be positive")
        self.max_bytes = max_bytes
        self.bytes = 0
        self.members = 0  # transfers that may draw on it (its owner counts them)
        self.busy = 0  # budgets drawing on it with something charged

    def __repr__(self) -> str:
        return (
            f"<SharedBytes {self.bytes}/{self.max_bytes} members={self.members} busy={self.busy}>"
        )

    def blocks(self, length: int) -> int:
        """Requests of ``length`` bytes that fit now, a block left for each idle member."""
        idle = max(0, self.members - self.busy)
        return (self.max_bytes - self.bytes - idle * length) // max(1, length)


class FlightBudget:
    """Counts requests and payload bytes in flight against two caps.

    Args:
        max_requests: most requests outstanding at once (``sftp -R``).
        max_bytes: most payload bytes charged at once (in flight or buffered).
        shared: a cap this transfer shares with others. A transfer with
            nothing in flight may still send one request past it, so none
            starves; the others leave room for that block (``SharedBytes``).
            ``release`` when the transfer is over.
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
        self.peak_requests = 0
        self.peak_bytes = 0
        # Bytes kept outside the pipe that memory must still count: a verifying
        # download's out-of-order pieces, waiting to be hashed in order.
        self.held = 0

    def __repr__(self) -> str:
        shared = f" shared={self.shared.bytes}/{self.shared.max_bytes}" if self.shared else ""
        return (
            f"<FlightBudget requests={self.requests}/{self.max_requests} "
            f"bytes={self.bytes}/{self.max_bytes}{shared}>"
        )

    def has_room(self, length: int) -> bool:
        if self.requests >= self.max_requests:
            return False
        # An empty pipe always admits one request, so a block larger than the
        # byte budget still makes progress instead of deadlocking.
        if self.bytes == 0:
            return True
        shared = self.shared
        if shared is not None and shared.blocks(length) < 1:
            return False
        return self.bytes + self.held + length <= self.max_bytes

    def send(self, length: int) -> None:
        self.requests += 1
        self._add(length)
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
        if shared is not None:
            shared.bytes -= self.bytes
            shared.busy -= self.bytes > 0

    def _add(self, count: int) -> None:
        before = self.bytes
        self.bytes += count
        shared = self.shared
        if shared is not None:
            shared.bytes += count
            shared.busy += (self.bytes > 0) - (before > 0)
