"""How much may be in flight: the request and byte budget of one transfer (pure).

Bytes are charged when a request is sent and stay charged until the payload
has left our memory (written to disk, delivered to the reader, or acknowledged
by the server), so peak memory is bounded by ``max_bytes`` plus one block.
"""

from __future__ import annotations


class SharedBytes:
    """Bytes several transfers may hold in flight together (the big files of a tree)."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("budget caps must be positive")
        self.max_bytes = max_bytes
        self.bytes = 0

    def __repr__(self) -> str:
        return f"<SharedBytes {self.bytes}/{self.max_bytes}>"


class FlightBudget:
    """Counts requests and payload bytes in flight against two caps.

    Args:
        max_requests: most requests outstanding at once (``sftp -R``).
        max_bytes: most payload bytes charged at once (in flight or buffered).
        shared: a cap this transfer shares with others. A transfer with
            nothing in flight may still send one request past it, so none
            starves; together they exceed it by at most a block each.
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
        if shared is not None and shared.bytes + length > shared.max_bytes:
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

    def _add(self, count: int) -> None:
        self.bytes += count
        if self.shared is not None:
            self.shared.bytes += count
