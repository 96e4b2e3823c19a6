"""What a transfer and a tree see of the pool, and what they ask it with.

- ``ChannelSpec``: the settings of one lease's channels, the only part of a
  transfer's config the pool reads; its driver makes it once
  (``transfer.channelspec.channel_spec``);
- ``Lease`` and ``Pool``: protocols, so the engine tests can pass fakes and a
  tree can take either the plain pool (``pool.ChannelPool``) or Compression
  auto's (``compressroute.RoutedPool``). Both are re-exported by ``pool``,
  where the transfers have always imported them from.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..core.config import DEFAULT_MAX_CONNECTIONS_PER_HOST
from ..core.servercaps import ServerCaps
from .pacing import Pacer
from .sftp import SFTPSession

# (window, max_packet_size, longest reply) a channel was opened with
ChannelKey = tuple[int, int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelSpec:
    """The channels one lease asks for, and how the pool may give them.

    For example ``ChannelSpec(window=15 * 2**20, max_packet_size=255 * 1024,
    max_reply=257 * 1024, stall_timeout=60.0, queue_timeout=300.0,
    channels=None, channels_per_connection=9, max_connections=4, retries=5,
    rate_limit=None, server_profile="auto")``: the defaults, whose reasons ``core.config`` gives.

    Attributes:
        window: SSH receive window of each channel opened (RFC 4254 §5.2).
        max_packet_size: largest SSH data packet the server is asked to send.
        max_reply: longest SFTP reply a channel accepts (``core.sizing.reply_cap``
            of the block size its READs ask for).
        stall_timeout: seconds without a reply after which a channel is stalled.
        queue_timeout: seconds a lease may wait for room (None: for ever).
        channels: a fixed count of channels; None lets the lease grow.
        channels_per_connection: most channels opened on one connection.
        max_connections: most connections the pool opens.
        max_connections_per_host: most connections the process holds to the
            server before a client with one stops growing (``hostlimits``).
        retries: tries of a log-in the server dropped (``MaxStartups``).
        rate_limit: bytes/s the lease's requests share (None: unlimited).
        server_profile: the cloud profile forced, or "auto" (``core.quirks``);
            the pool reads its own spec's, for every channel.
    """

    window: int
    max_packet_size: int
    max_reply: int
    stall_timeout: float
    queue_timeout: float | None
    channels: int | None
    channels_per_connection: int
    max_connections: int
    retries: int
    rate_limit: int | None
    server_profile: str = "auto"
    max_connections_per_host: int = DEFAULT_MAX_CONNECTIONS_PER_HOST

    @property
    def key(self) -> ChannelKey:
        """What idle channels are reused by: the settings they were opened with."""
        return (self.window, self.max_packet_size, self.max_reply)


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

    def lease(self, spec: ChannelSpec) -> contextlib.AbstractAsyncContextManager[Lease]:
        """Channels for one file, growing as its flow controller wants; given back after."""
        ...

    async def warm(self, spec: ChannelSpec, count: int) -> None:
        """Open up to ``count`` idle channels now, if there is room; never wait for one."""
        ...
