"""The pipeline's channels and what it may have in flight on them.

``Credits`` grants requests and bytes first come first served; ``TreeChannels``
sends each file or directory to the least loaded channel, and keeps the
handles open on each under half the server's limit. A listing that waits for
something else (room in a queue, a directory listed further down) steps aside
(``stepping_aside``): its handle then counts for no one, so the steps it waits
for can always have one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from ..core.errors import RemoteOpenFailed
from ..core.servercaps import after_handle_refusal, handle_cap
from ..transport.sftp import SFTPSession

logger = logging.getLogger("sshpipe.tree")

_T = TypeVar("_T")

# An OPEN refused with a bare failure is asked again this many times, each once
# a handle was given back (``TreeChannels.run``), before it is the file's.
OPEN_REFUSALS = 8


class Credits:
    """Requests and bytes the pipeline may have in flight, granted first come first served.

    A file asks for all it needs at once (its whole size is at most half the
    bytes), so no two files can each hold half of what both need. What one
    asks is capped at the maxima when it is granted: they may come down while
    it waits (after a stall, ``TreeRun._healed``), and a wait for more than
    the whole would never end.
    """

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        self._waiters: deque[tuple[int, int, asyncio.Future[tuple[int, int]]]] = deque()

    def __repr__(self) -> str:
        return (
            f"<Credits requests={self.requests}/{self.max_requests} "
            f"bytes={self.bytes}/{self.max_bytes} waiting={len(self._waiters)}>"
        )

    def _capped(self, requests: int, count: int) -> tuple[int, int]:
        return min(requests, self.max_requests), min(count, self.max_bytes)

    def _fits(self, requests: int, count: int) -> bool:
        requests, count = self._capped(requests, count)
        return (
            self.requests + requests <= self.max_requests and self.bytes + count <= self.max_bytes
        )

    @contextlib.asynccontextmanager
    async def hold(self, requests: int, count: int) -> AsyncIterator[None]:
        if self._waiters or not self._fits(requests, count):
            future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
            waiter = (requests, count, future)
            self._waiters.append(waiter)
            try:
                taken = await future
            except BaseException:
                if future.done() and not future.cancelled():
                    self._release(*future.result())  # granted as we were cancelled
                else:
                    with contextlib.suppress(ValueError):  # _grant may have dropped it
                        self._waiters.remove(waiter)
                    self._grant()
                raise
        else:
            taken = self._take(requests, count)
        try:
            yield
        finally:
            self._release(*taken)

    def _take(self, requests: int, count: int) -> tuple[int, int]:
        requests, count = self._capped(requests, count)
        self.requests += requests
        self.bytes += count
        return requests, count

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
            future.set_result(self._take(requests, count))


@dataclass(slots=True, eq=False)
class TreeChannel:
    """One pipeline channel, how many handles are open on it, and how many it may hold."""

    sftp: SFTPSession
    cap: int
    handles: int = 0

    @property
    def room(self) -> int:
        return self.cap - self.handles if self.sftp.broken is None else 0


class TreeChannels:
    """The pipeline's channels; each step goes to the one with the most room.

    A step waits while every channel holds its cap of handles: a server's
    handle table is per channel (Green End's has 128 slots and it crashes
    past them), so the tree's files in flight are not a per-channel bound.
    """

    def __init__(self, channels: list[SFTPSession]) -> None:
        self.slots = [TreeChannel(sftp, _handle_cap(sftp)) for sftp in channels]
        self._waiters: list[asyncio.Future[None]] = []

    def __repr__(self) -> str:
        held = " ".join(f"{slot.handles}/{slot.cap}" for slot in self.slots)
        return f"<TreeChannels {held} waiting={len(self._waiters)}>"

    def add(self, sftp: SFTPSession) -> None:
        self.slots.append(TreeChannel(sftp, _handle_cap(sftp)))
        self._wake()

    async def take(self) -> TreeChannel:
        """The live channel with the most room, once one has any; its handle counted."""
        while True:
            slot = max(self.slots, key=lambda candidate: candidate.room)
            if slot.room > 0 or all(each.sftp.broken is not None for each in self.slots):
                # All broken: take one anyway; its step fails at once and heals the tree.
                slot.handles += 1
                return slot
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def give(self, slot: TreeChannel) -> None:
        slot.handles -= 1
        self._wake()

    async def run(self, operation: Callable[[SFTPSession], Awaitable[_T]]) -> _T:
        """``operation`` on the channel with the most room, its handle counted meanwhile.

        An OPEN refused with a bare failure (``RemoteOpenFailed``) may be the
        channel out of handles: it runs again once others are given back, with
        the cap lowered to what was open (``refused``); a few times, since the
        server also counts handles whose CLOSE is still on its way; then it is
        the file's own failure.
        """
        refusals = 0
        while True:
            slot = await self.take()
            held = _held.set((self, slot))
            try:
                return await operation(slot.sftp)
            except RemoteOpenFailed:
                refusals += 1
                if refusals > OPEN_REFUSALS:
                    raise
                self.refused(slot)
            finally:
                _held.reset(held)
                self.give(slot)

    def refused(self, slot: TreeChannel) -> None:
        """An OPEN on ``slot`` was refused with a generic failure: perhaps its handle cap.

        If other handles were open on it, the cap comes down to those (for this
        channel and, through ``ServerCaps``, every channel opened later). If
        none were, the server may still count one whose CLOSE is on its way (a
        one-file-at-a-time server): the step runs again, the cap as it was.
        """
        learned = after_handle_refusal(slot.handles - 1)
        if learned is None:
            return
        slot.cap = min(slot.cap, learned)
        caps = slot.sftp.caps
        caps.handles = learned if caps.handles is None else min(caps.handles, learned)
        logger.info("%s: a handle refused with %d open: at most that many", slot.sftp.name, learned)

    def _wake(self) -> None:
        """Let every waiting step look again (few wait, and each takes one handle)."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


# The slot the running task's step holds, inside ``TreeChannels.run``.
_held: ContextVar[tuple[TreeChannels, TreeChannel] | None] = ContextVar(
    "sshpipe_tree_slot", default=None
)


@contextlib.asynccontextmanager
async def stepping_aside() -> AsyncIterator[None]:
    """The current step's handle counts for no one while the task waits inside this.

    A listing holds a directory handle while its entries are queued. When a
    queue is full it waits for the workers, and the workers wait for a
    handle: with every handle held by a waiting listing (a server that allows
    few, a tree that goes down many levels at once) nothing would move. The
    server still holds the handle, so its table may see a few more than our
    cap (one per listing waiting); the cap is half of what it allows.
    Outside a step, nothing to do.
    """
    held = _held.get()
    if held is None:
        yield
        return
    channels, slot = held
    channels.give(slot)
    token = _held.set(None)
    try:
        yield
    finally:
        _held.reset(token)
        slot.handles += 1  # the step's again, without a wait: it holds the handle all along


def _handle_cap(sftp: SFTPSession) -> int:
    """Handles we may keep open on one channel (``core.servercaps.handle_cap``)."""
    stated = sftp.limits.max_open_handles if sftp.limits is not None else 0
    cap = handle_cap(stated, sftp.caps.handles)
    # Each small file's few requests go on its channel: after a stall, fewer
    # handles keep fewer requests owed there (``ServerCaps.requests``).
    return min(cap, sftp.caps.requests or cap)
