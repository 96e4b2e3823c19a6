"""What a transfer and a tree see of the pool: ``Lease`` and ``Pool``.

Protocols, so the engine tests can pass fakes and a tree can take either
the plain pool (``pool.ChannelPool``) or Compression auto's
(``compressroute.RoutedPool``). Both are re-exported by ``pool``, where the
transfers have always imported them from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Protocol

from ..core.config import TransferConfig
from ..core.servercaps import ServerCaps
from .pacing import Pacer
from .sftp import SFTPSession


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
