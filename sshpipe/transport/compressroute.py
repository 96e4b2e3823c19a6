"""``Compression auto``: a compressed connection beside the plain ones, and leases that move.

SSH compression is fixed per connection at key exchange (RFC 4253 §6.2), so
nothing is toggled: ``CompressRoute`` keeps a second ``ChannelPool`` whose
connections offer zlib@openssh.com, then zlib, then "none", so that a server
offering no compression still connects and is then known to offer none
(said once at ``-v``; auto means off for the rest of the client's life).
The second pool shares the first's byte budget, connection count (its
connection counts against ``max_connections``), server caps, log-in memory
and temp-file list: one client, two kinds of connection.

``RoutedLease`` is a transfer's lease on both: its channels are the plain
pool's until ``move`` gives it compressed ones (the transfer's remaining
requests go there, ``transfer.compressswitch``); growth then comes from the
route it is on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

from ..core.compresspolicy import CompressionMode, Route, ZlibCost
from ..core.errors import SSHPipeError
from ..core.stats import CompressionReport
from .lease import ChannelSpec
from .pacing import Pacer
from .pool import ChannelPool, PoolLease
from .sftp import SFTPSession
from .zlibprobe import cached_zlib_cost, zlib_cost

__all__ = ["EAGER_RTT", "EARLY_LOGIN_RTT", "CompressRoute", "RoutedLease", "RoutedPool"]

# The RTT from which a file may go compressed (``transfer.compressswitch``:
# it is sampled, opened on the compressed connection as soon as its data is
# known to shrink, and starts with a probe train): 5 ms, where the flow
# controller's first guess (1 Gbit/s x RTT: 625 KB) is a quarter second of a
# 20 Mbit/s link's queue. Below it, a LAN or loopback: plain.
EAGER_RTT = 0.005
# The log-in round trip from which the compressed connection logs in beside
# the plain one, before any file: 10 ms. Higher than EAGER_RTT because it is
# one sample and the log-in a cost of its own: on loopback it cost a get of
# 64 MiB 11 % of its whole command (the CPU is the bottleneck there), and with
# the cores 3x overloaded a loopback round trip read over 5 ms 13 times in 60,
# over 10 ms once. Below it a file that shrinks opens the connection itself.
EARLY_LOGIN_RTT = 0.010

logger = logging.getLogger("sshpipe.compress")


class CompressRoute:
    """The compressed pool of a client whose compression is auto, opened on first need."""

    def __init__(self, plain: ChannelPool) -> None:
        self.plain = plain
        self._zlib: ChannelPool | None = None
        self.offered: bool | None = None  # does the server compress (None: not asked yet)
        self.algorithm = "none"
        self._opening = asyncio.Lock()
        self._mode: CompressionMode | None = None
        # The plain link's payload rate the last file measured: a tree's next
        # files are weighed by it before they measure their own.
        self.link_rate: float | None = None
        # An earlier file's data shrank: a tree's next file readies the
        # compressed connection from its start, not from its first reply.
        self.shrank = False
        # The compressed log-in begun beside the plain one (``speculate``).
        self._early: asyncio.Task[None] | None = None

    @property
    def early(self) -> bool:
        """The compressed log-in was begun with the plain one: a file may be opened
        on it from its start."""
        return self._early is not None and self.offered is not False

    def speculate(self) -> None:
        """Begin the compressed log-in beside the plain one, if the link is a WAN.

        Begun only once the data shrank, its ~8 round trips and key exchange
        came after the plain log-in, the file's OPEN and first reply: at
        20 Mbit/s and 40 ms auto took 2.69 s where -C took 2.04. It begins at
        the plain log-in's SERVICE_ACCEPT, once that shows a round trip of
        ``EARLY_LOGIN_RTT`` or more and the setting in force (given,
        ssh_config's or the default) is auto. Not through a mux master (auto
        is off there) or under a rate limit. Unused (random data) it costs one
        idle connection's log-in; ``aclose`` ends it.
        """
        cfg = self.plain.connect_config
        if self._early is not None or self._zlib is not None or self.offered is False:
            return
        limited = self.plain.spec.rate_limit is not None
        if cfg.compression not in ("auto", None) or cfg.control_path or limited:
            return
        self._early = asyncio.get_running_loop().create_task(self._connect_early())

    async def _connect_early(self) -> None:
        # From the plain log-in's SERVICE_ACCEPT on: its key exchange has
        # checked (and maybe recorded) the host key, its round trip is known,
        # and its round trips to come (auth, channel, OPEN) are the ones this
        # one overlaps.
        memory = self.plain.auth_memory
        await memory.rtt_known.wait()
        if memory.compression != "auto" or memory.rtt is None or memory.rtt < EARLY_LOGIN_RTT:
            return  # a LAN, loopback or a near WAN (or not measured): opened when wanted
        # No channel is opened here ahead of a file: one warmed with the client's
        # settings made a put run compressed at 2 MB/s (1 run in 3, then 4 in 6)
        # where the file's own channel ran 11 MB/s in 6 of 6; not understood yet.
        await self.connect()

    async def cancel_early(self) -> None:
        """The plain log-in failed: no compressed one goes on alone."""
        early, self._early = self._early, None
        if early is not None:
            early.cancel()
            await asyncio.wait([early])

    async def mode(self) -> CompressionMode:
        """The client's setting, as its connection was opened with it (ssh_config
        is read once, by the log-in); "no" through a mux master."""
        if self._mode is None:
            await self.plain.open()
            self._mode = self.plain.compression_mode
        return self._mode

    async def cost(self) -> ZlibCost:
        """zlib's rates on this machine (probed once per process, off the loop)."""
        return await zlib_cost()

    @staticmethod
    def known_cost() -> ZlibCost | None:
        return cached_zlib_cost()

    async def pool(self) -> ChannelPool | None:
        """The compressed pool, connected; None when the server offers no compression."""
        async with self._opening:
            if self.offered is False:
                return None
            if self._zlib is None:
                cfg = replace(self.plain.connect_config, compression=True, control_path=None)
                # The one memory budget, shared, and the one count of connections:
                # with max_connections=1 there is no room for this one (auto: off).
                pool = ChannelPool(
                    cfg,
                    self.plain.spec,
                    client_bytes=self.plain.client_bytes,
                    budget=self.plain.budget,
                )
                pool.server_caps = self.plain.server_caps
                pool.auth_memory = self.plain.auth_memory
                pool.temps = self.plain.temps
                try:
                    await pool.open()
                except SSHPipeError as exc:
                    logger.info("compression auto: no compressed connection (%s): off", exc)
                    self.offered = False
                    return None
                self.algorithm = pool.compression
                if self.algorithm == "none":
                    logger.info("compression auto: the server offers no compression: off")
                    self.offered = False
                    await pool.aclose()
                    return None
                self.offered = True
                logger.info("compression auto: compressed connection up (%s)", self.algorithm)
                self._zlib = pool
            return self._zlib

    async def aclose(self) -> None:
        await self.cancel_early()  # a log-in still under way is of no use now
        zlib, self._zlib = self._zlib, None
        if zlib is not None:
            await zlib.aclose()

    def abort(self) -> None:
        if self._early is not None:
            self._early.cancel()
        if self._zlib is not None:
            self._zlib.abort()

    @contextlib.asynccontextmanager
    async def lease(
        self, spec: ChannelSpec, *, at_start: Callable[[float], int] | None = None
    ) -> AsyncIterator[RoutedLease]:
        """A plain lease that may move to the compressed pool (``RoutedLease.move``).

        The compressed connection is not opened here: a transfer's switch asks
        for it once the data is known to shrink (``Switch``: a put's sample of
        the local file, a get's first reply), so random data and tiny files
        never pay a second log-in.
        """
        await self.plain.open()
        async with contextlib.AsyncExitStack() as stack:
            plain = await stack.enter_async_context(self.plain.lease(spec, at_start=at_start))
            yield RoutedLease(self, spec, plain, stack)

    async def connect(self) -> None:
        """Open the compressed connection ahead of a move (its errors: the move's to see)."""
        with contextlib.suppress(SSHPipeError):
            await self.pool()


class RoutedPool:
    """What a tree sees of a client whose compression is auto: its big files' leases routed.

    Each big file decides for itself (``transfer.compressswitch``), those whose
    name says compressed already (``RoutedLease.hint``) staying plain: text
    goes compressed while media go plain, at the same time, under the one byte
    budget both pools share.
    """

    def __init__(self, route: CompressRoute) -> None:
        self.route = route
        self.server_caps = route.plain.server_caps

    def lease(self, spec: ChannelSpec) -> contextlib.AbstractAsyncContextManager[RoutedLease]:
        return self.route.lease(spec)

    async def warm(self, spec: ChannelSpec, count: int) -> None:
        await self.route.plain.warm(spec, count)


class RoutedLease:
    """A transfer's lease on the plain pool, and on the compressed one once moved there."""

    def __init__(
        self,
        route: CompressRoute,
        spec: ChannelSpec,
        plain: PoolLease,
        stack: contextlib.AsyncExitStack,
    ) -> None:
        self.route = route
        self._spec = spec
        self._plain = plain
        self._zlib: PoolLease | None = None
        self._stack = stack
        self.compressed = False  # where new channels come from
        self.max_channels = plain.max_channels
        self.can_grow = plain.can_grow
        self.pacer: Pacer | None = plain.pacer
        # What the transfer's switch did (``transfer.compressswitch``), for its stats.
        self.report: Callable[[], CompressionReport] | None = None
        self.hint: Route | None = None  # PLAIN: its name says compressed already

    def __repr__(self) -> str:
        return f"<RoutedLease compressed={self.compressed} channels={len(self.channels)}>"

    @property
    def rtt(self) -> float:
        """Seconds of one round trip: the least of its channels' SFTP INIT and the
        log-in's SERVICE_REQUEST, neither with server work in it (the log-in's
        phases carry sshd's signature check and fork: 10-45 ms on loopback), else
        the log-in's estimate. The least, since a loaded machine only adds: one
        INIT on a CI worker's loopback took over 5 ms."""
        samples = [s.init_rtt for s in self._plain.channels if s.init_rtt > 0]
        login = self.route.plain.auth_memory.rtt
        if login is not None:
            samples.append(login)
        return min(samples, default=self.route.plain.rtt_estimate)

    @property
    def _active(self) -> PoolLease:
        return self._zlib if self.compressed and self._zlib is not None else self._plain

    @property
    def channels(self) -> list[SFTPSession]:
        """The channels of the route in use (the other's lanes only drain)."""
        return self._active.channels

    @channels.setter
    def channels(self, channels: list[SFTPSession]) -> None:
        self._active.channels = channels

    @property
    def all_channels(self) -> list[SFTPSession]:
        return self._plain.channels + (self._zlib.channels if self._zlib is not None else [])

    def connections_of(self, channels: list[SFTPSession]) -> int:
        plain = [s for s in channels if s in self._plain.channels]
        zlib = [s for s in channels if s not in plain]
        count = self._plain.connections_of(plain) if plain else 0
        if zlib and self._zlib is not None:
            count += self._zlib.connections_of(zlib)
        return max(count, 1)

    def is_compressed(self, sftp: SFTPSession) -> bool:
        """``sftp`` is a channel of the compressed connection (a grower's too)."""
        return self._zlib is not None and sftp in self._zlib.channels

    async def add(
        self, count: int, ready: Callable[[SFTPSession], None] | None = None
    ) -> list[SFTPSession]:
        return await self._active.add(count, ready)

    async def recover(self, *, stalled: bool) -> None:
        await self._active.recover(stalled=stalled)

    async def prepare(self) -> list[SFTPSession]:
        """This transfer's first channels on the compressed pool, not routed to yet
        (the transfer opens its file on them ahead of a move); [] once had, or
        when the server offers no compression."""
        if self._zlib is not None:
            return []
        pool = await self.route.pool()
        if pool is None:
            return []
        self._zlib = await self._stack.enter_async_context(pool.lease(self._spec))
        return list(self._zlib.channels)

    async def move(self, count: int, *, compressed: bool) -> list[SFTPSession] | None:
        """New channels come from the compressed pool (or the plain one again), with up
        to ``count`` there: the channels new to the transfer; None when the server
        offers no compression."""
        fresh = await self.prepare() if compressed else []
        if compressed and self._zlib is None:
            return None
        self.compressed = compressed
        if self._zlib is not None and compressed and count > len(self._zlib.channels):
            fresh += await self._zlib.add(count - len(self._zlib.channels))
        return fresh
