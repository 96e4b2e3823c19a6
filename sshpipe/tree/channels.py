"""The pipeline's channels and what it may have in flight on them.

``Credits`` grants requests and bytes first come first served; ``TreeChannels``
sends each file or directory to the least loaded channel, and keeps the
handles open on each under half the server's limit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..transport.sftp import SFTPSession

# Handles per channel when the server does not say (limits@openssh.com).
DEFAULT_HANDLES_PER_CHANNEL = 128


class Credits:
    """Requests and bytes the pipeline may have in flight, granted first come first served.

    A file asks for all it needs at once (its whole size is at most half the
    bytes), so no two files can each hold half of what both need.
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        self._waiters: deque[tuple[int, int, asyncio.Future[None]]] = deque()

    def __repr__(self) -> str:
        return (
            f"<Credits requests={self.requests}/{self.max_requests} "
            f"bytes={self.bytes}/{self.max_bytes} waiting={len(self._waiters)}>"
        )

    def _fits(self, requests: int, count: int) -> bool:
        return (
            self.requests + requests <= self.max_requests and self.bytes + count <= self.max_bytes
        )

    @contextlib.asynccontextmanager
    async def hold(self, requests: int, count: int) -> AsyncIterator[None]:
        requests = min(requests, self.max_requests)
        count = min(count, self.max_bytes)
        if self._waiters or not self._fits(requests, count):
            future = asyncio.get_running_loop().create_future()
            waiter = (requests, count, future)
            self._waiters.append(waiter)
            try:
                await future
            except BaseException:
                if future.done() and not future.cancelled():
                    self._release(requests, count)  # granted as we were cancelled
                else:
                    with contextlib.suppress(ValueError):  # _grant may have dropped it
                        self._waiters.remove(waiter)
                    self._grant()
                raise
        else:
            self._take(requests, count)
        try:
            yield
        finally:
            self._release(requests, count)

    def _take(self, requests: int, count: int) -> None:
        self.requests += requests
        self.bytes += count

    def _release(self, requests: int, count: int) -> None:
        self.requests -= requests
        self.bytes -= count
        self._grant()

    def _grant(self) -> None:
        waiters = self._waiters
        while waiters:
            requests, count, future = waiters[0]
            if future.done():  # cancelled, its task not yet resumed to take itself out
                waiters.popleft()
                continue
            if not self._fits(requests, count):
                break
            waiters.popleft()
            self._take(requests, count)
            future.set_result(None)


@dataclass(slots=True, eq=False)
class TreeChannel:
    """One pipeline channel and how many handles are open on it."""

    sftp: SFTPSession
    cap: int
    handles: int = 0


class TreeChannels:
    """The pipeline's channels; each file or directory goes to the least loaded one."""

    def __init__(self, channels: list[SFTPSession]) -> None:
        self.slots = [TreeChannel(sftp, _handle_cap(sftp)) for sftp in channels]

    def add(self, sftp: SFTPSession) -> None:
        self.slots.append(TreeChannel(sftp, _handle_cap(sftp)))

    def take(self) -> TreeChannel:
        live = [slot for slot in self.slots if slot.sftp.broken is None] or self.slots
        slot = min(live, key=lambda candidate: candidate.handles)
        slot.handles += 1
        return slot

    @staticmethod
    def give(slot: TreeChannel) -> None:
        slot.handles -= 1


def _handle_cap(sftp: SFTPSession) -> int:
    """Handles we may keep open on one channel: half the server's limit, for its other users."""
    stated = sftp.limits.max_open_handles if sftp.limits is not None else 0
    if stated <= 0:
        return DEFAULT_HANDLES_PER_CHANNEL
    return max(1, min(DEFAULT_HANDLES_PER_CHANNEL, stated // 2))
