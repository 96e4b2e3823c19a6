"""``PoolLease``: the channels of one transfer, lent by ``pool.ChannelPool``.

It is the pool's own half: it calls the pool's bookkeeping (``_take_channels``,
``_give_back``, ``_prune``) directly, as the pool's methods would. Split out of
``pool.py`` for size alone; the engine sees it through ``pool.Lease``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._config import TransferConfig
from .._errors import SSHPipeError
from .sftp import SFTPSession

if TYPE_CHECKING:
    from .pool import ChannelPool

logger = logging.getLogger("sshpipe.client")


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
