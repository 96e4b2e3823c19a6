"""How much may be in flight: the request and byte budget of one transfer (pure).

Bytes are charged when a request is sent and stay charged until the payload
has left our memory (written to disk, delivered to the reader, or acknowledged
by the server), so peak memory is bounded by ``max_bytes`` plus one block.
"""

from __future__ import annotations


class FlightBudget:
    """Counts requests and payload bytes in flight against two caps.

    Args:
        max_requests: most requests outstanding at once (``sftp -R``).
        max_bytes: most payload bytes charged at once (in flight or buffered).
    """

    def __init__(self, *, max_requests: int, max_bytes: int) -> None:
        if max_requests < 1 or max_bytes < 1:
            raise ValueError("budget caps must be positive")
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        self.peak_requests = 0
        self.peak_bytes = 0

    def __repr__(self) -> str:
        return (
            f"<FlightBudget requests={self.requests}/{self.max_requests} "
            f"bytes={self.bytes}/{self.max_bytes}>"
        )

    def has_room(self, length: int) -> bool:
        if self.requests >= self.max_requests:
            return False
        # An empty pipe always admits one request, so a block larger than the
        # byte budget still makes progress instead of deadlocking.
        return self.bytes + length <= self.max_bytes or self.bytes == 0

    def send(self, length: int) -> None:
        self.requests += 1
        self.bytes += length
        self.peak_requests = max(self.peak_requests, self.requests)
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def reply(self, length: int, kept: int) -> None:
        """A request of ``length`` bytes was answered; ``kept`` of them stay buffered."""
        self.requests -= 1
        self.bytes -= length - kept

    def free(self, count: int) -> None:
        """``count`` buffered bytes left our memory."""
        self.bytes -= count
