"""The client's SSH connections and SFTP channels, handed out to transfers as leases.

A transfer never opens a channel itself: it holds a ``Lease`` on the pool,
which gives it channels (idle ones first, then new ones, on new connections
when one connection's ``MaxSessions`` is full) and takes them back when it
ends. Bookkeeping is done before every await: transfers asking at the same
moment see each other's reservations.

- ``Lease``: what a transfer sees (its channels; ``add`` more; ``recover``
  after a break), a protocol so the engine tests can pass a fake;
- ``Pool``: what a tree sees (leases for its big files, ``warm`` channels);
- ``ChannelPool``: the implementation behind ``sshpipe.Client``;
  ``PooledLink`` is one of its SSH connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from .._config import ConnectConfig, TransferConfig
from .._errors import ChannelRefused, ClosedError, ConnectionBroken, SSHPipeError
from ..core.codec import Limits
from ..core.servercaps import ServerCaps
from ..core.serverprofile import ServerProfile
from ..core.sizing import reply_cap
from .poollease import PoolLease
from .settling import SETTLE_AT_CLOSE, WIND_DOWN, Settling, wind_down
from .sftp import SFTPSession
from .ssh import SSHLink, open_link

logger = logging.getLogger("sshpipe.client")

# (window, max_packet_size, longest reply) a channel was opened with
_ChannelKey = tuple[int, int, int]


def _key(config: TransferConfig) -> _ChannelKey:
    return (config.window, config.max_packet_size, reply_cap(config.block_size))


class Lease(Protocol):
    """The channels of one transfer, lent by the pool; more are asked for as it grows."""

    channels: list[SFTPSession]
    max_channels: int
    can_grow: bool

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


@dataclass(slots=True, eq=False)
class PooledLink:
    """One SSH connection of the pool and how many channels it carries."""

    link: SSHLink
    cap: int  # channels it may carry; lowered when the server refuses one
    open: int = 0  # channels open on it (idle, busy, or being opened)

    @property
    def room(self) -> int:
        return max(0, self.cap - self.open)


class ChannelPool:
    """SSH connections and the SFTP channels on them, shared by every transfer of a client.

    Idle channels are kept per (window, packet size, reply cap) and reused, so
    a second transfer pays no channel set-up.
    """

    def __init__(self, connect_config: ConnectConfig, transfer_config: TransferConfig) -> None:
        self.connect_config = connect_config
        self.config = transfer_config
        self._slots: list[PooledLink] = []
        self._slot_of: dict[SFTPSession, PooledLink] = {}
        self._idle: dict[_ChannelKey, list[SFTPSession]] = {}
        self._busy: set[SFTPSession] = set()
        self._settling = Settling()  # given back with replies owed: not reused yet
        self._connecting = 0
        self._closed = False
        # The server's limits@openssh.com answer, learned on the first channel:
        # every connection reaches the same server.
        self._server_limits: Limits | None = None
        # What the server was found to refuse (handles, blocks, requests in
        # flight), shared by every channel, reconnects included.
        self.server_caps = ServerCaps()
        self.server_profile: ServerProfile | None = None  # from the first channel
        # Our temp files the server could not be made to remove (``durability.lefttemps``).
        self.left_temps: set[str] = set()
        self.peer = ""  # "user@host:port", from the first channel
        self.swept = False  # the temps an earlier run left were looked for
        self._freed = asyncio.Event()  # set when a transfer gives channels back

    def __repr__(self) -> str:
        return f"<ChannelPool {self.connect_config.host} {self.state}>"

    @property
    def state(self) -> str:
        """How the client shows it: open or closed, connections, idle and busy channels."""
        state = "closed" if self._closed else ("open" if self._slots else "new")
        idle = sum(len(v) for v in self._idle.values())
        return (
            f"{state} connections={len(self._slots)} "
            f"idle_channels={idle} busy_channels={len(self._busy)}"
        ) + (f" settling_channels={len(self._settling)}" if self._settling else "")

    async def open(self) -> None:
        """Connect and authenticate (done by ``async with``).

        Raises:
            ConnectError, AuthenticationError, HostKeyError: see the exception tree.
        """
        if self._closed:
            raise ClosedError("this client was closed")
        if not self._slots:
            link = await open_link(self.connect_config)
            if self._closed:  # closed while we connected
                await link.close()
                raise ClosedError("this client was closed")
            self._slots.append(PooledLink(link, self.config.channels_per_connection))

    async def aclose(self) -> None:
        """Close every channel and connection; calling it twice is fine.

        Running transfers fail with ClosedError (not as broken, which they
        would retry) and get ``WIND_DOWN`` seconds to clean up; channels
        settling get ``SETTLE_AT_CLOSE`` (``settling.py``).
        """
        self._closed = True
        self._freed.set()  # transfers waiting for a channel see the client closed
        await wind_down(self._busy, self._freed, WIND_DOWN)
        await self._settling.wait(SETTLE_AT_CLOSE)
        slots, self._slots = self._slots, []
        for sessions in self._idle.values():
            for sftp in sessions:
                sftp.close()
        self._idle.clear()
        self._slot_of.clear()
        for slot in slots:
            await slot.link.close()

    def abort(self) -> None:
        """Drop every connection at once, without waiting for the server.

        Everything in flight fails at once with ConnectionBroken; what the
        transfers clean up locally (temporary files) they still do, but
        nothing more is asked of the server. For a server that stopped
        answering, or a user's second Ctrl-C. ``aclose()`` is still the way out.
        """
        for slot in self._slots:
            slot.link.abort()

    @property
    def connections(self) -> int:
        """SSH connections open now."""
        return len(self._slots)

    async def _take_channels(
        self,
        config: TransferConfig,
        count: int,
        *,
        required: int,
        ready: Callable[[SFTPSession], None] | None = None,
    ) -> list[SFTPSession]:
        """Up to ``count`` channels: idle ones first, then new ones, on new connections if needed.

        Fewer than ``count`` is not an error (a server may refuse channels or
        connections); fewer than ``required`` raises the first failure.
        """
        while True:
            taken = await self._try_take_channels(config, count, required=required, ready=ready)
            if taken is not None:
                return taken
            if self._evict_idle(keep=_key(config)):
                continue  # idle channels of other settings made room
            # Every connection we may open is full of busy channels: wait for a
            # transfer to give one back rather than fail (many transfers at once).
            self._freed.clear()
            await self._freed.wait()

    def _evict_idle(self, *, keep: _ChannelKey) -> bool:
        """Close idle channels opened with other settings; True if there were any."""
        evicted = False
        for key, sessions in self._idle.items():
            if key != keep:
                for sftp in sessions:
                    sftp.close()
                    self._forget(sftp)
                evicted = evicted or bool(sessions)
                sessions.clear()
        return evicted

    async def _try_take_channels(
        self,
        config: TransferConfig,
        count: int,
        *,
        required: int,
        ready: Callable[[SFTPSession], None] | None,
    ) -> list[SFTPSession] | None:
        """One attempt of ``_take_channels``; None when no room is left anywhere yet."""
        if self._closed:
            raise ClosedError("this client was closed")
        if not self._slots:
            await self.open()
        idle = self._idle.setdefault(_key(config), [])
        taken: list[SFTPSession] = []
        while idle and len(taken) < count:
            sftp = idle.pop()
            if sftp.broken is None:
                sftp.stall_timeout = config.stall_timeout  # this transfer's
                taken.append(sftp)
            else:
                self._forget(sftp)
        self._busy.update(taken)
        if ready is not None:
            for sftp in taken:
                ready(sftp)
        errors: list[BaseException] = []
        try:
            taken += await self._open_channels(config, count - len(taken), errors, ready)
            if len(taken) < count and any(isinstance(e, ChannelRefused) for e in errors):
                # A refusal taught us that connection's limit (MaxSessions): what it
                # refused goes to other connections now, not never (the grower
                # stops asking once a request brings nothing).
                taken += await self._open_channels(config, count - len(taken), errors, ready)
        except BaseException:
            if ready is None:  # else each went to ``ready``: its holder gives it back
                self._give_back(config, taken)
            raise
        if len(taken) < required:
            self._give_back(config, taken)
            if self._closed:  # what failed was our own closing, not the server
                raise ClosedError("this client was closed")
            if errors:
                raise errors[0]
            return None
        return taken

    async def _open_channels(
        self,
        config: TransferConfig,
        count: int,
        errors: list[BaseException],
        ready: Callable[[SFTPSession], None] | None = None,
    ) -> list[SFTPSession]:
        """Open ``count`` channels concurrently over the connections with room and new ones."""
        if count <= 0 or self._closed:  # closed meanwhile: no new connection for nobody
            return []
        # Bookkeeping first: reserve room on each connection before awaiting.
        plan: list[PooledLink] = []  # a channel to open on each existing connection listed
        for slot in self._slots:
            take = min(slot.room, count - len(plan))
            slot.open += take
            plan += [slot] * take
        per_new = config.channels_per_connection
        new_links = min(
            -(-(count - len(plan)) // per_new),
            config.max_connections - len(self._slots) - self._connecting,
        )
        new_counts = [
            min(per_new, count - len(plan) - i * per_new) for i in range(max(new_links, 0))
        ]
        # Reserved now, before any await: transfers asking at the same moment
        # must see these connections as already coming (64 concurrent gets
        # opened 55 connections when each counted only the ones under way).
        self._connecting += len(new_counts)
        unsettled = [len(new_counts)]  # reservations not yet given back
        opened: list[SFTPSession] = []

        async def on_slot(slot: PooledLink) -> None:
            try:
                sftp = await slot.link.open_sftp(
                    window=config.window,
                    max_packet_size=config.max_packet_size,
                    max_reply=reply_cap(config.block_size),
                    stall_timeout=config.stall_timeout,
                    known_limits=self._server_limits,
                )
            except ChannelRefused as exc:
                slot.open -= 1
                slot.cap = slot.open  # the server said how many it allows
                errors.append(exc)
                return
            except SSHPipeError as exc:
                slot.open -= 1
                errors.append(exc)
                return
            except BaseException:
                slot.open -= 1
                raise
            if self._closed:
                sftp.close()
                slot.open -= 1
                return
            sftp.on_limits = self._learned
            sftp.caps = self.server_caps
            sftp.left_temps = self.left_temps
            self.peer = self.peer or sftp.peer
            self.server_profile = self.server_profile or sftp.profile
            self._slot_of[sftp] = slot
            self._busy.add(sftp)
            opened.append(sftp)
            if ready is not None:
                ready(sftp)

        async def on_new_link(channels: int) -> None:
            try:
                link = await open_link(self.connect_config)
            except SSHPipeError as exc:
                errors.append(exc)
                return
            finally:
                self._connecting -= 1
                unsettled[0] -= 1
            if self._closed:
                await link.close()
                return
            slot = PooledLink(link, per_new, open=channels)
            self._slots.append(slot)
            async with asyncio.TaskGroup() as group:
                for _ in range(channels):
                    group.create_task(on_slot(slot))

        try:
            async with asyncio.TaskGroup() as group:
                for slot in plan:
                    group.create_task(on_slot(slot))
                for channels in new_counts:
                    group.create_task(on_new_link(channels))
        except BaseException:
            # Cancelled (or failed) midway: what opened is closed, unless it was
            # already handed to ``ready`` (a grower's lane, a lease's spare):
            # that is its holder's to give back.
            if ready is None:
                for sftp in opened:
                    self._busy.discard(sftp)
                    self._forget(sftp)
                    sftp.close()
            raise
        finally:
            self._connecting -= unsettled[0]  # tasks cancelled before they started
        if errors:
            logger.debug("%d channel(s) not opened: %s", len(errors), errors[0])
        return opened

    def server(self) -> dict[str, object]:
        """What the server is, offers and was found to allow (``--json``'s "server")."""
        shown: dict[str, object] = {}
        if self.server_profile is not None:
            shown.update(self.server_profile.as_dict())
        if self._server_limits is not None:
            limits = self._server_limits
            shown["limits"] = {
                "max_read_len": limits.max_read_len,
                "max_write_len": limits.max_write_len,
                "max_open_handles": limits.max_open_handles,
            }
        learned = self.server_caps.learned()
        if any(slot.link.refuses_exec for slot in self._slots):
            learned["runs_commands"] = False  # an exec was refused (--verify's sha256sum)
        shown["learned"] = learned
        return shown

    def _learned(self, limits: Limits) -> None:
        self._server_limits = self._server_limits or limits

    def _prune(self, also: list[PooledLink] | None = None) -> None:
        """Forget connections that are gone (and ``also``), and every channel on them."""
        dead = [slot for slot in self._slots if slot.link.closed or slot in (also or [])]
        if not dead:
            return
        self._slots = [slot for slot in self._slots if slot not in dead]
        for sessions in self._idle.values():
            sessions[:] = [sftp for sftp in sessions if self._slot_of.get(sftp) not in dead]
        for sftp in [s for s, slot in self._slot_of.items() if slot in dead]:
            # Its connection is gone (dropped, or aborted as stalled): work in
            # flight on it, of any transfer, is retried, so not close().
            sftp.abort(ConnectionBroken(f"{sftp.name}: connection lost"))
            del self._slot_of[sftp]
        self._freed.set()  # room for new connections

    def _abort_links_of(self, channels: list[SFTPSession]) -> None:
        """Drop the connections these channels are on (they stalled), and forget them."""
        slots = {id(self._slot_of[s]): self._slot_of[s] for s in channels if s in self._slot_of}
        for slot in slots.values():
            slot.link.abort()
        self._prune(also=list(slots.values()))

    def _forget(self, sftp: SFTPSession) -> None:
        slot = self._slot_of.pop(sftp, None)
        if slot is not None:
            slot.open -= 1

    def _give_back(self, config: TransferConfig, channels: list[SFTPSession]) -> None:
        key = _key(config)
        if channels:
            self._freed.set()
        for sftp in channels:
            self._busy.discard(sftp)
            if sftp.broken is None and not self._closed and sftp.unsettled and sftp.pending:
                self._settling.add(sftp, partial(self._give_back, config, [sftp]))
            elif sftp.broken is None and not self._closed:
                sftp.unsettled = False  # owes nothing unwanted (a read's CLOSE at most)
                self._idle.setdefault(key, []).append(sftp)
            else:
                sftp.close()
                self._forget(sftp)

    def _connections_of(self, channels: list[SFTPSession]) -> int:
        return len({id(self._slot_of[s]) for s in channels if s in self._slot_of}) or 1

    @contextlib.asynccontextmanager
    async def lease(
        self, config: TransferConfig, *, at_start: Callable[[float], int] | None = None
    ) -> AsyncIterator[PoolLease]:
        """Channels for one transfer, given back to the pool when it ends.

        ``at_start(rtt)``: how many channels the transfer will want at once on
        a link of that round trip (the flow controller's first guess). All of
        them are opened together, with the first, on more connections if need
        be: the transfer gets the first as soon as it is open and the others
        as they are (``PoolLease.add``), so none waits for measured growth.
        """
        first = config.channels or 1
        if config.channels is None and at_start is not None:
            await self.open()
            early = at_start(self._rtt_estimate()) - first
            if early > 0:
                async with self._leased_with_spares(config, first, early) as lease:
                    yield lease
                return
        lease = PoolLease(self, config, await self._take_channels(config, first, required=first))
        try:
            yield lease
        finally:
            self._give_back(config, lease.channels)

    @contextlib.asynccontextmanager
    async def _leased_with_spares(
        self, config: TransferConfig, first: int, spares: int
    ) -> AsyncIterator[PoolLease]:
        """A lease of ``first`` channels, ``spares`` more being opened alongside.

        The body's error is caught inside the TaskGroup (whose only task is
        stopped first) and raised again outside it, as itself.
        """
        lease = PoolLease(self, config, [])
        failure: BaseException | None = None
        async with asyncio.TaskGroup() as group:
            lease.open_spares(group, spares)
            try:
                lease.channels = await self._take_channels(config, first, required=first)
                yield lease
            except BaseException as exc:  # CancelledError and GeneratorExit too
                failure = exc
            await lease.stop_spares()
        self._give_back(config, lease.channels + lease.spares)
        if failure is not None:
            try:
                raise failure
            finally:
                failure = None  # no reference cycle through the traceback

    def _rtt_estimate(self) -> float:
        """The round trip the first connection's log-in took (0 if none is open)."""
        return self._slots[0].link.rtt_estimate if self._slots else 0.0

    async def warm(self, config: TransferConfig, count: int) -> None:
        """Open up to ``count`` idle channels now, if there is room; never wait for one."""
        self._give_back(config, await self._take_channels(config, count, required=0))
