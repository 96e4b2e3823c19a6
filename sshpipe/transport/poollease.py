"""``PoolLease``: the channels of one transfer, lent by ``pool.ChannelPool``.

It is the pool's own half: it calls the pool's bookkeeping (``_take_channels``,
``_give_back``, ``_prune``) directly, as the pool's methods would. Split out of
``pool.py`` for size alone, with the protocols the engine and a tree see it
through (``Lease``, ``Pool``; imported from ``pool``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Protocol

from ..core.config import TransferConfig
from ..core.errors import SSHPipeError
from ..core.servercaps import ServerCaps
from .pacing import Pacer
from .sftp import SFTPSession

if TYPE_CHECKING:
    from .pool import ChannelPool

logger = logging.getLogger("sshpipe.client")


class Lease(Protocol):
    """The channels of one transfer, lent by the pool; more are asked for as it grows."""

    channels: list[SFTPSession]
    max_channels: int
    can_grow: bool
    # The rate limit its requests draw on (None: unlimited); a tree's big
    # files are given the tree's, so the whole call shares one bucket.
    pacer: Pacer | None

    def connections_of(self, channels: list[SFTPSession]) -> int: ...

    async def add(
        self, count: int, ready: Callable[[SFTPSession], None] | None = None
    ) -> list[SFTPSession]: ...

    async def recover(self, *, stalled: bool) -> None: ...


class Pool(Protocol):
    """Where a tree's big files get their leases."""

    server_caps: ServerCaps

    def lease(self, config: TransferConfig) -> contextlib.AbstractAsyncContextManager[Lease]:
        """Channels for one file, growing as its flow controller wants; given back after."""
        ...

    async def warm(self, config: TransferConfig, count: int) -> None:
        """Open up to ``count`` idle channels now, if there is room; never wait for one."""
        ...


class PoolLease:
    """The channels of one transfer; the engine asks it for more as the controller wants."""

    def __init__(self, client: ChannelPool, config: TransferConfig, channels: list[SFTPSession]):
        self._client = client
        self._config = config
        self.channels = channels
        self.max_channels = config.channels or min(
            64, config.channels_per_connection * config.max_connections
        )
        self.can_grow = config.channels is None
        self.pacer = Pacer.for_rate(config.rate_limit)
        # Channels opened at the start, before anyone asked (``ChannelPool.lease``):
        # open and not yet handed out, and still being opened.
        self.spares: list[SFTPSession] = []
        self._spares_opening = 0
        self._spare_came = asyncio.Event()
        self._spare_task: asyncio.Task[None] | None = None

    def open_spares(self, group: asyncio.TaskGroup, count: int) -> None:
        """Start opening ``count`` channels that ``add`` hands out first."""
        count = min(count, self.max_channels - 1)
        if count <= 0:
            return
        self._spares_opening = count

        def came(sftp: SFTPSession) -> None:
            self._spares_opening -= 1
            self.spares.append(sftp)
            self._spare_came.set()

        async def open_them() -> None:
            try:
                await self._client._take_channels(self._config, count, required=0, ready=came)
            except SSHPipeError as exc:  # only the head start is lost
                logger.debug("channels opened at the start: %s", exc)
            finally:
                self._spares_opening = 0
                self._spare_came.set()

        self._spare_task = group.create_task(open_them())

    async def stop_spares(self) -> None:
        """Stop opening spares and wait for it (those open stay in ``spares``)."""
        task, self._spare_task = self._spare_task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    def __repr__(self) -> str:
        return f"<PoolLease channels={len(self.channels)}/{self.max_channels}>"

    def grow_no_more_if_shared(self) -> bool:
        """A lease given a shared channel grows no more; True if it was.

        Sharing starts only once every channel the client may open is busy:
        any channel such a transfer grew onto would be another's, and it
        already has one's worth. Its controller then wants no more lanes
        (``max_channels``) but still sizes its byte budget (adaptive).
        """
        if not self._client._busy.is_shared(self.channels):
            return False
        self.max_channels = len(self.channels)
        return True

    def connections_of(self, channels: list[SFTPSession]) -> int:
        """How many connections these channels (of this lease) belong to."""
        return self._client._connections_of(channels)

    async def add(
        self, count: int, ready: Callable[[SFTPSession], None] | None = None
    ) -> list[SFTPSession]:
        """Up to ``count`` more channels (fewer, or none, if the server says no).

        ``ready(channel)`` is called for each as soon as it is open, before the
        rest are; the channel already belongs to this lease then.
        """
        count = min(count, self.max_channels - len(self.channels))
        if count <= 0 or not self.can_grow:
            return []

        def arrived(sftp: SFTPSession) -> None:
            self.channels.append(sftp)
            if ready is not None:
                ready(sftp)

        added: list[SFTPSession] = []
        while len(added) < count and (self.spares or self._spares_opening):
            if not self.spares:  # opened at the start: sooner here than a new one
                self._spare_came.clear()
                await self._spare_came.wait()
                continue
            sftp = self.spares.pop(0)
            if sftp.broken is None:
                added.append(sftp)
                arrived(sftp)
            else:
                self._client._give_back(self._config, [sftp])
        if len(added) < count:
            added += await self._client._take_channels(
                self._config, count - len(added), required=0, ready=arrived
            )
        return added

    async def recover(self, *, stalled: bool) -> None:
        """After a dropped (or, ``stalled``, silent) connection: fresh channels.

        Channels whose connection is gone are given back (closed); if none is
        left, one is opened, on a new connection if need be.

        Raises:
            ConnectError: no connection could be made (the caller retries).
        """
        client = self._client
        if stalled:
            client._abort_links_of(self.channels)
        client._prune()
        dead = [sftp for sftp in self.channels if sftp.broken is not None]
        self.channels = [sftp for sftp in self.channels if sftp.broken is None]
        client._give_back(self._config, dead)
        if not self.channels:
            self.channels = await client._take_channels(self._config, 1, required=1)
            self.grow_no_more_if_shared()  # for its next attempt's controller


@contextlib.asynccontextmanager
async def leased(
    client: ChannelPool,
    config: TransferConfig,
    at_start: Callable[[float], int] | None,
    light: bool,
) -> AsyncIterator[PoolLease]:
    """The body of ``ChannelPool.lease`` (see there), its byte budget's count aside."""
    first = config.channels or 1
    if config.channels is None and at_start is not None:
        await client.open()
        early = at_start(client.rtt_estimate) - first
        if early > 0:
            async with leased_with_spares(client, config, first, early) as lease:
                yield lease
            return
    while light and client.warming:
        # A warm-up's channels are on their way (an fsspec filesystem's early
        # log-in): one of them will be idle, sooner than a channel of our own.
        seen = client._room.epoch
        await client._room.wait(seen, None)
    taken = await client._take_channels(config, first, required=first, light=light)
    if light:
        client._busy.mark_light(taken)
    lease = PoolLease(client, config, taken)
    lease.grow_no_more_if_shared()
    try:
        yield lease
    finally:
        client._give_back(config, lease.channels)


@contextlib.asynccontextmanager
async def leased_with_spares(
    client: ChannelPool, config: TransferConfig, first: int, spares: int
) -> AsyncIterator[PoolLease]:
    """A lease of ``first`` channels, ``spares`` more being opened alongside.

    The body's error is caught inside the TaskGroup (whose only task is
    stopped first) and raised again outside it, as itself.
    """
    lease = PoolLease(client, config, [])
    failure: BaseException | None = None
    async with asyncio.TaskGroup() as group:
        lease.open_spares(group, spares)
        try:
            lease.channels = await client._take_channels(config, first, required=first)
            if lease.grow_no_more_if_shared():
                await lease.stop_spares()  # none will be wanted: others may need them
                client._give_back(config, lease.spares)
                lease.spares = []
            yield lease
        except BaseException as exc:  # CancelledError and GeneratorExit too
            failure = exc
        await lease.stop_spares()
    client._give_back(config, lease.channels + lease.spares)
    if failure is not None:
        try:
            raise failure
        finally:
            failure = None  # no reference cycle through the traceback
