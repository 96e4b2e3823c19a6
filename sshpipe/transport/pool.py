"""The client's SSH connections and SFTP channels, handed out to transfers as leases.

A transfer never opens a channel itself: it holds a ``Lease`` on the pool,
which gives it channels (idle ones first, then new ones, on new connections
when one connection's ``MaxSessions`` is full, then, once every connection
it may open is full, busy ones shared: ``poolshare``) and takes them back
when it ends. Bookkeeping is done before every await: transfers asking at
the same moment see each other's reservations.

- ``Lease``: what a transfer sees (its channels; ``add`` more; ``recover``
  after a break), and ``Pool``, what a tree sees (leases for its big files,
  ``warm`` channels): protocols, in ``lease``, imported from here too;
- ``ChannelPool``: the implementation behind ``sshpipe.Client``, and
  ``PoolLease``, its lease, which asks the pool's bookkeeping for channels
  as the pool's own methods would; ``PooledLink`` counts the channels on
  one of its SSH connections.

What the pool uses of other rooms, each through its public methods:
``poolshare`` (busy channels shared past the ceiling, transfers waiting for
room) and ``settling`` (channels given back still owing replies).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial

from ..core.codec import Limits
from ..core.compresspolicy import CompressionMode
from ..core.config import ConnectConfig
from ..core.errors import (
    ChannelRefused,
    ClosedError,
    ConnectionBroken,
    PoolExhausted,
    SSHPipeError,
    Stalled,
)
from ..core.flight import SharedBytes
from ..core.quirks import idle_close_after, quirks_for
from ..core.servercaps import ServerCaps
from ..core.serverprofile import ServerProfile, describe_server, software_of
from ..core.tempbook import TempBook
from .authmemory import AuthMemory
from .hostlimits import ConnectionBudget, host_limits
from .lease import ChannelKey, ChannelSpec
from .lease import Lease as Lease
from .lease import Pool as Pool
from .linkopen import Link, LoginTurns, open_link
from .pacing import Pacer
from .poolshare import BusyChannels, Room
from .settling import SETTLE_AT_CLOSE, WIND_DOWN, Settling, wind_down
from .sftp import SFTPSession

logger = logging.getLogger("sshpipe.client")


@dataclass(slots=True, eq=False)
class PooledLink:
    """One SSH connection of the pool and how many channels it carries."""

    link: Link
    cap: int  # channels it may carry; lowered when the server refuses one
    open: int = 0  # channels open on it (idle, busy, or being opened)
    # When a channel of it last came back (or it was made): its idle clock.
    used: float = field(default_factory=time.monotonic)

    @property
    def room(self) -> int:
        return max(0, self.cap - self.open)


def _capped(error: BaseException) -> bool:
    """A channel the server refused, or left unanswered: its connection takes no more
    (``_open_channels``), but it may still carry channels."""
    return isinstance(error, (ChannelRefused, Stalled))


class ChannelPool:
    """SSH connections and the SFTP channels on them, shared by every transfer of a client.

    Idle channels are kept per (window, packet size, reply cap) and reused, so
    a second transfer pays no channel set-up.

    Args:
        connect_config: how every connection of the pool is opened.
        spec: the client's own lease settings: its first connection's
            log-in retries and channel cap (each lease brings its own).
        client_bytes: the byte budget every transfer of the client shares
            (Compression auto's second pool is given the first one's).
        budget: the connections the client may hold, over all its pools, and
            its server's per-process budget (``hostlimits``); made from
            ``spec`` when not given (Compression auto's second pool is given
            the first one's).
    """

    def __init__(
        self,
        connect_config: ConnectConfig,
        spec: ChannelSpec,
        *,
        client_bytes: SharedBytes,
        budget: ConnectionBudget | None = None,
    ) -> None:
        self.connect_config = connect_config
        self.spec = spec
        self.budget = budget or ConnectionBudget(
            host_limits(connect_config),
            cap=spec.max_connections,
            per_host=spec.max_connections_per_host,
        )
        self._slots: list[PooledLink] = []
        self._slot_of: dict[SFTPSession, PooledLink] = {}
        self._idle: dict[ChannelKey, list[SFTPSession]] = {}
        self._busy = BusyChannels()  # lent out, and to how many transfers each
        self._settling = Settling()  # given back with replies owed: not reused yet
        self._connecting = 0
        self._closed = False
        self._login = LoginTurns()  # the first connection's (``open``)
        self.warming = 0  # ``warm`` calls under way
        # The server's limits@openssh.com answer, learned on the first channel:
        # every connection reaches the same server.
        self._server_limits: Limits | None = None
        # What the server was found to refuse (handles, blocks, requests in
        # flight), shared by every channel, reconnects included.
        self.server_caps = ServerCaps()
        self.server_profile: ServerProfile | None = None  # from the first channel
        # Payload bytes every transfer of the client may hold at once, together
        # (each channel carries it to the transfers on it: ``transfer.pumpsetup``).
        self.client_bytes = client_bytes
        # Our temporary files on the server, for every channel (``core.tempbook``);
        # the client gives it its durable record (``durability.ledger``).
        self.temps = TempBook()
        self.peer = ""  # "user@host:port", from the first channel
        self.swept = False  # the temps an earlier run left were looked for
        self._room = Room()  # transfers waiting for a channel, woken when room appears
        self.auth_memory = AuthMemory()  # what log-ins learnt: reconnects ask nothing again
        # Closes connections idle past the server's idle timeout (``_close_idle``).
        self._idle_timer: asyncio.TimerHandle | None = None

    def __repr__(self) -> str:
        return f"<ChannelPool {self.connect_config.host} {self.state}>"

    @property
    def state(self) -> str:
        """How the client shows it: open or closed, connections, idle and busy channels."""
        state = "closed" if self._closed else ("open" if self._slots else "new")
        idle = sum(len(v) for v in self._idle.values())
        shared = f" shared={self._busy.sharing}" if self._busy.sharing else ""
        queued = f" queued={self._room.queued}" if self._room.queued else ""
        return (
            f"{state} connections={len(self._slots)} "
            f"idle_channels={idle} busy_channels={len(self._busy)}{shared}{queued}"
        ) + (f" settling_channels={len(self._settling)}" if self._settling else "")

    # -- the public face: open, lease, warm, close ---------------------------

    async def open(self) -> None:
        """Connect and authenticate (done by ``async with``).

        Raises:
            ConnectError, AuthenticationError, HostKeyError: see the exception tree.
        """
        if self._closed:
            raise ClosedError("this client was closed")
        if self._slots:
            return
        async with self._login.turn():  # a log-in under way: its outcome is ours
            if self._slots:
                return
            if not self.budget.take(1):  # a second pool of the client (Compression auto)
                raise PoolExhausted(
                    f"no connection left for this pool: the client holds its "
                    f"max_connections ({self.budget.cap})"
                )
            try:
                # A server past its MaxStartups drops it: tried again within the retries.
                link = await open_link(
                    self.connect_config, self.auth_memory, retries=self.spec.retries
                )
            except BaseException:
                self.budget.give_back()
                raise
            if self._closed:  # closed while we connected
                await link.close()
                self.budget.give_back()
                raise ClosedError("this client was closed")
            self._slots.append(PooledLink(link, self._channels_per_connection()))
            # The banner names a cloud profile before any channel: a transfer
            # sizes its lease by it (``transfer.inorder``).
            self._take_quirks(software_of(link.server_version))

    @contextlib.asynccontextmanager
    async def lease(
        self,
        spec: ChannelSpec,
        *,
        at_start: Callable[[float], int] | None = None,
        light: bool = False,
    ) -> AsyncIterator[PoolLease]:
        """Channels for one transfer, given back to the pool when it ends.

        ``at_start(rtt)``: how many channels the transfer will want at once on
        a link of that round trip (the flow controller's first guess). All of
        them are opened together, with the first, on more connections if need
        be: the transfer gets the first as soon as it is open and the others
        as they are (``PoolLease.add``), so none waits for measured growth.

        ``light``: a user asking little of its channel (a file held open, a
        STAT) shares a busy light one before one is opened for it (``poolshare``).

        From the moment it asks, the transfer is a member of the client's byte
        budget (``core.flight.SharedBytes``): a block of it is kept for its start.
        """
        self.client_bytes.members += 1
        try:
            async with self._leased(spec, at_start, light) as lease:
                yield lease
        finally:
            self.client_bytes.members -= 1

    async def warm(self, spec: ChannelSpec, count: int) -> None:
        """Open up to ``count`` idle channels now, if there is room; never wait for one.

        A light lease asking meanwhile waits for them (``_leased``).
        """
        self.warming += 1
        try:
            self._give_back(spec, await self._take_channels(spec, count, required=0))
        finally:
            self.warming -= 1
            self._room.wake()

    async def aclose(self) -> None:
        """Close every channel and connection; calling it twice is fine.

        Running transfers fail with ClosedError (not as broken, which they
        would retry) and get ``WIND_DOWN`` seconds to clean up; channels
        settling get ``SETTLE_AT_CLOSE`` (``settling.py``).
        """
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._room.wake()  # transfers waiting for a channel see the client closed
        await wind_down(self._busy, self._room, WIND_DOWN)
        await self._settling.wait(SETTLE_AT_CLOSE)
        slots, self._slots = self._slots, []
        self.budget.give_back(len(slots))
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
    def compression(self) -> str:
        """The compression its first connection agreed on ("none" before any)."""
        return self._slots[0].link.compression if self._slots else "none"

    @property
    def compression_mode(self) -> CompressionMode:
        """The Compression setting its first connection was opened with ("no" before any)."""
        return self._slots[0].link.compression_mode if self._slots else "no"

    @property
    def connections(self) -> int:
        """SSH connections open now."""
        return len(self._slots)

    @property
    def rtt_estimate(self) -> float:
        """The round trip the first connection's log-in took (0 if none is open)."""
        return self._slots[0].link.rtt_estimate if self._slots else 0.0

    def server(self) -> dict[str, object]:
        """What the server is, offers and was found to allow (``--json``'s "server")."""
        learned = self.server_caps.learned()
        if any(slot.link.refuses_exec for slot in self._slots):
            learned["runs_commands"] = False  # an exec was refused (--verify's sha256sum)
        caps = self.server_caps
        return describe_server(
            self.server_profile,
            self._server_limits,
            learned,
            quirks=caps.quirks.name,
            adapted=caps.adapted,
        )

    # -- leases: a transfer's channels, taken and given back -----------------

    @contextlib.asynccontextmanager
    async def _leased(
        self, spec: ChannelSpec, at_start: Callable[[float], int] | None, light: bool
    ) -> AsyncIterator[PoolLease]:
        """The body of ``lease`` (see there), its byte budget's count aside."""
        first = spec.channels or 1
        if spec.channels is None and at_start is not None:
            await self.open()
            early = at_start(self.rtt_estimate) - first
            if early > 0:
                async with self._leased_with_spares(spec, first, early) as lease:
                    yield lease
                return
        while light and self.warming:
            # A warm-up's channels are on their way (an fsspec filesystem's early
            # log-in): one of them will be idle, sooner than a channel of our own.
            seen = self._room.epoch
            await self._room.wait(seen, None)
        taken = await self._take_channels(spec, first, required=first, light=light)
        if light:
            self._busy.mark_light(taken)
        lease = PoolLease(self, spec, taken)
        lease.grow_no_more_if_shared()
        try:
            yield lease
        finally:
            self._give_back(spec, lease.channels)

    @contextlib.asynccontextmanager
    async def _leased_with_spares(
        self, spec: ChannelSpec, first: int, spares: int
    ) -> AsyncIterator[PoolLease]:
        """A lease of ``first`` channels, ``spares`` more being opened alongside.

        The body's error is caught inside the TaskGroup (whose only task is
        stopped first) and raised again outside it, as itself.
        """
        lease = PoolLease(self, spec, [])
        failure: BaseException | None = None
        async with asyncio.TaskGroup() as group:
            lease.open_spares(group, spares)
            try:
                lease.channels = await self._take_channels(spec, first, required=first)
                if lease.grow_no_more_if_shared():
                    await lease.stop_spares()  # none will be wanted: others may need them
                    self._give_back(spec, lease.spares)
                    lease.spares = []
                yield lease
            except BaseException as exc:  # CancelledError and GeneratorExit too
                failure = exc
            await lease.stop_spares()
        self._give_back(spec, lease.channels + lease.spares)
        if failure is not None:
            try:
                raise failure
            finally:
                failure = None  # no reference cycle through the traceback

    async def _take_channels(
        self,
        spec: ChannelSpec,
        count: int,
        *,
        required: int,
        ready: Callable[[SFTPSession], None] | None = None,
        light: bool = False,
    ) -> list[SFTPSession]:
        """Up to ``count`` channels: idle ones first, then new ones, on new connections if needed.

        Fewer than ``count`` is not an error (a server may refuse channels or
        connections); fewer than ``required`` raises the first failure. When
        every connection the client may open is full, the ``required`` are
        busy channels shared (``poolshare``); when none has room either, the
        call waits for room, at most ``spec.queue_timeout``. ``light``
        (``lease``): busy light channels are joined before new ones open.

        Raises:
            PoolExhausted: no room came within ``queue_timeout``.
        """
        if required == 0 and self._room.queued:
            return []  # growth waits: transfers without a first channel go first
        deadline: float | None = None
        queued = False
        try:
            while True:
                seen = self._room.epoch  # a wake-up while we look is not lost
                taken = await self._try_take_channels(
                    spec, count, required=required, ready=ready, light=light
                )
                if taken is not None:
                    return taken
                if self._evict_idle(keep=spec.key):
                    continue  # idle channels of other settings made room
                shared = self._share(spec, required, ready)
                if shared is not None:
                    return shared
                if not queued:
                    queued, self._room.queued = True, self._room.queued + 1
                    if spec.queue_timeout is not None:
                        deadline = asyncio.get_running_loop().time() + spec.queue_timeout
                if not await self._room.wait(seen, deadline):
                    raise PoolExhausted(
                        f"no SFTP channel free for {spec.queue_timeout:g} s: "
                        f"{len(self._slots)} connection(s) and their {len(self._busy)} "
                        "channel(s) carry all the transfers the server allows (queue_timeout)"
                    )
        finally:
            if queued:
                self._room.queued -= 1

    async def _try_take_channels(
        self,
        spec: ChannelSpec,
        count: int,
        *,
        required: int,
        ready: Callable[[SFTPSession], None] | None,
        light: bool = False,
        reopened: bool = False,
    ) -> list[SFTPSession] | None:
        """One attempt of ``_take_channels``; None when no room is left anywhere yet.

        ``reopened``: this attempt follows one whose connection was found
        closed; a second such find is the server's answer (it drops every new
        connection at its first channel) and raised, not tried for ever.
        """
        if self._closed:
            raise ClosedError("this client was closed")
        self._prune()  # a connection the server closed while idle (Azure's, after 4 minutes)
        if not self._slots:
            await self.open()
        idle = self._idle.setdefault(spec.key, [])
        taken: list[SFTPSession] = []
        while idle and len(taken) < count:
            sftp = idle.pop()
            if sftp.broken is None:
                sftp.stall_timeout = spec.stall_timeout  # this transfer's
                taken.append(sftp)
            else:
                self._forget(sftp)
        self._busy.add(spec.key, taken)
        if light and len(taken) < count:
            joined = self._busy.share(spec.key, count - len(taken), light=True)
            taken += joined or []
        if ready is not None:
            for sftp in taken:
                ready(sftp)
        errors: list[BaseException] = []
        try:
            taken += await self._open_channels(spec, count - len(taken), errors, ready)
            if len(taken) < count and any(_capped(e) for e in errors):
                # A refusal (MaxSessions), or a channel the connection did not set
                # up in time, capped that connection: what it would not open goes
                # to other connections now, not never (the grower stops asking
                # once a request brings nothing).
                taken += await self._open_channels(spec, count - len(taken), errors, ready)
        except BaseException:
            if ready is None:  # else each went to ``ready``: its holder gives it back
                self._give_back(spec, taken)
            raise
        if len(taken) < required:
            self._give_back(spec, taken)
            if self._closed:  # what failed was our own closing, not the server
                raise ClosedError("this client was closed")
            if (
                not reopened
                and any(slot.link.closed for slot in self._slots)
                and all(isinstance(e, ConnectionBroken) for e in errors)
            ):
                # Its connection closed as the channel was asked for (dropped idle,
                # its close not yet seen at the prune above): one more try opens one.
                self._prune()
                return await self._try_take_channels(
                    spec, count, required=required, ready=ready, light=light, reopened=True
                )
            if errors and not (self._carrying() and all(_capped(e) for e in errors)):
                raise errors[0]
            # Connections that took no more (refused, or left a set-up unanswered)
            # while channels are open or on their way elsewhere: room to wait
            # for (one given back, idle), or to share. A refusal is the
            # server's MaxSessions speaking, not a failure of the transfer.
            return None
        return taken

    def _share(
        self, spec: ChannelSpec, count: int, ready: Callable[[SFTPSession], None] | None
    ) -> list[SFTPSession] | None:
        """``count`` busy channels to share, or None while connections are on their way."""
        if self._connecting:
            return None  # they bring channels of their own: wait for them (woken)
        shared = self._busy.share(spec.key, count)
        if shared is not None and ready is not None:
            for sftp in shared:
                ready(sftp)
        return shared

    def _give_back(self, spec: ChannelSpec, channels: list[SFTPSession]) -> None:
        key = spec.key
        if channels:
            self._room.wake()
            self._arm_idle()
        now = time.monotonic()
        for sftp in channels:
            if not self._busy.leave(sftp):
                continue  # other transfers still use it (shared): the last one gives it back
            slot = self._slot_of.get(sftp)
            if slot is not None:
                slot.used = now
            if sftp.broken is None and not self._closed and sftp.unsettled and sftp.pending:
                self._settling.add(sftp, partial(self._give_back, spec, [sftp]))
            elif sftp.broken is None and not self._closed:
                sftp.unsettled = False  # owes nothing unwanted (a read's CLOSE at most)
                self._idle.setdefault(key, []).append(sftp)
            else:
                sftp.close()
                self._forget(sftp)

    # -- connections idle past the server's timeout ----------------------------

    def _arm_idle(self, delay: float | None = None) -> None:
        """Look for idle connections once the server's idle timeout (less a margin) is near.

        Only where the profile in force states one (``Quirks.idle_timeout``:
        Azure drops a connection idle for 4 minutes). A long-lived client (an
        fsspec filesystem, a Dask worker) then never meets a dead connection
        on its next call: a closed one is opened again on demand. ``delay``:
        when the next connection is due (default: the whole idle time).
        """
        timeout = self.server_caps.quirks.idle_timeout
        if timeout is None or self._closed or self._idle_timer is not None:
            return  # a look already due comes sooner than this one would
        loop = asyncio.get_running_loop()
        due = idle_close_after(timeout) if delay is None else delay
        self._idle_timer = loop.call_later(due, self._close_idle)

    def _close_idle(self) -> None:
        """Close every connection whose channels have all been idle too long; look again later."""
        self._idle_timer = None
        timeout = self.server_caps.quirks.idle_timeout
        if timeout is None or self._closed:
            return
        after, now = idle_close_after(timeout), time.monotonic()
        idle = {sftp for sessions in self._idle.values() for sftp in sessions}
        held: dict[int, int] = {}  # idle channels per connection
        for sftp, slot in self._slot_of.items():
            if sftp in idle:
                held[id(slot)] = held.get(id(slot), 0) + 1
        soonest: float | None = None  # the next idle connection due
        for slot in list(self._slots):
            if slot.open != held.get(id(slot), 0):
                continue  # busy (its channels' return arms the next look)
            if now - slot.used < after:
                due = slot.used + after - now
                soonest = due if soonest is None else min(soonest, due)
                continue
            logger.info(
                "closed a connection idle for %.1f s: the server drops it at %g s (%s)",
                now - slot.used,
                timeout,
                self.server_caps.quirks.name,
            )
            for sessions in self._idle.values():
                for sftp in [s for s in sessions if self._slot_of.get(s) is slot]:
                    sessions.remove(sftp)
                    sftp.close()
                    self._forget(sftp)
            self._slots.remove(slot)
            self.budget.give_back()
            slot.link.abort()  # nothing in flight on it: no need to wait for the server
        if soonest is not None:
            self._arm_idle(soonest)

    # -- connections and channels: bookkeeping -------------------------------

    def _evict_idle(self, *, keep: ChannelKey) -> bool:
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

    def _learned_channels(self) -> int | None:
        """Channels one connection carries, as learned: from a connection that left one
        unanswered (``server_caps``), or one the server refused, by any client
        of the process (``hostlimits``)."""
        found = [n for n in (self.server_caps.channels, self.budget.server.channels) if n]
        return min(found) if found else None

    def _channels_per_connection(self) -> int:
        learned = self._learned_channels()
        cap = self.spec.channels_per_connection
        return min(cap, learned) if learned else cap

    def _take_profile(self, profile: ServerProfile) -> None:
        """The first channel's server: its cloud profile put in force, and said once."""
        self.server_profile = profile
        self._take_quirks(profile.software)

    def _take_quirks(self, software: str) -> None:
        """The cloud profile of the server whose banner names ``software``, said once."""
        quirks = quirks_for(self.spec.server_profile, software)
        self.server_caps.quirks = quirks
        for change in quirks.changes():
            if self.server_caps.adapt(change):
                logger.info("%s (%s server profile)", change, quirks.name)

    def _learned(self, limits: Limits) -> None:
        self._server_limits = self._server_limits or limits

    def _prune(self, also: list[PooledLink] | None = None) -> None:
        """Forget connections that are gone (and ``also``), and every channel on them."""
        dead = [slot for slot in self._slots if slot.link.closed or slot in (also or [])]
        if not dead:
            return
        self._slots = [slot for slot in self._slots if slot not in dead]
        self.budget.give_back(len(dead))
        for sessions in self._idle.values():
            sessions[:] = [sftp for sftp in sessions if self._slot_of.get(sftp) not in dead]
        for sftp in [s for s, slot in self._slot_of.items() if slot in dead]:
            # Its connection is gone (dropped, or aborted as stalled): work in
            # flight on it, of any transfer, is retried, so not close().
            sftp.abort(ConnectionBroken(f"{sftp.name}: connection lost"))
            del self._slot_of[sftp]
        self._room.wake()  # room for new connections

    def _abort_links_of(self, channels: list[SFTPSession]) -> None:
        """Drop the connections these channels are on (they stalled), and forget them."""
        slots = {id(self._slot_of[s]): self._slot_of[s] for s in channels if s in self._slot_of}
        for slot in slots.values():
            slot.link.abort(stalled=True)
        self._prune(also=list(slots.values()))

    def _drop_unused(self, slot: PooledLink) -> None:
        """Close a connection that carries no channel and may carry none (its cap is 0)."""
        if slot.open == 0 and slot in self._slots:
            self._slots.remove(slot)
            self.budget.give_back()
            slot.link.abort()  # nothing in flight on it: no need to wait for the server
            self._room.wake()  # room for a connection of use

    def _forget(self, sftp: SFTPSession) -> None:
        slot = self._slot_of.pop(sftp, None)
        if slot is not None:
            slot.open -= 1

    def _carrying(self) -> bool:
        """Whether any channel is open (idle, busy, settling) or being opened, or a
        connection is on its way: a refused transfer has something to wait for."""
        return self._connecting > 0 or any(slot.open > 0 for slot in self._slots)

    def _connections_of(self, channels: list[SFTPSession]) -> int:
        return len({id(self._slot_of[s]) for s in channels if s in self._slot_of}) or 1

    def _reserve(
        self, spec: ChannelSpec, count: int, per_new: int
    ) -> tuple[list[PooledLink], list[int]]:
        """Room for ``count`` channels, reserved before any await: on each connection
        with room (one entry per channel), then the channels of each new connection
        (``per_new`` at most on each).

        Transfers asking at the same moment must see these connections as
        already coming (64 concurrent gets opened 55 connections when each
        counted only the ones under way).
        """
        learned = self._learned_channels()
        plan: list[PooledLink] = []  # a channel to open on each existing connection listed
        for slot in self._slots:
            if learned is not None:
                slot.cap = min(slot.cap, max(learned, slot.open))
            take = min(slot.room, count - len(plan))
            slot.open += take
            plan += [slot] * take
        new_links = min(
            -(-(count - len(plan)) // per_new),
            spec.max_connections - len(self._slots) - self._connecting,
        )
        # Within the client's cap over all its pools, and its server's budget.
        new_links = self.budget.take(new_links) if new_links > 0 else 0
        new_counts = [
            min(per_new, count - len(plan) - i * per_new) for i in range(max(new_links, 0))
        ]
        self._connecting += len(new_counts)
        return plan, new_counts

    # -- connections and channels: I/O ---------------------------------------

    async def _open_channels(
        self,
        spec: ChannelSpec,
        count: int,
        errors: list[BaseException],
        ready: Callable[[SFTPSession], None] | None = None,
    ) -> list[SFTPSession]:
        """Open ``count`` channels concurrently over the connections with room and new ones.

        Room is reserved first (``_reserve``), then everything is opened at
        once in one TaskGroup; what fails is added to ``errors``.
        """
        if count <= 0 or self._closed:  # closed meanwhile: no new connection for nobody
            return []
        learned = self._learned_channels()
        per_new = min(spec.channels_per_connection, learned or spec.channels_per_connection)
        plan, new_counts = self._reserve(spec, count, per_new)
        unsettled = [len(new_counts)]  # reservations not yet given back
        opened: list[SFTPSession] = []

        async def on_slot(slot: PooledLink) -> None:
            try:
                await open_on(slot)
            finally:
                self._room.wake()  # a channel to share came, or its room is free again

        async def open_on(slot: PooledLink) -> None:
            began = time.monotonic()
            try:
                sftp = await slot.link.open_sftp(
                    window=spec.window,
                    max_packet_size=spec.max_packet_size,
                    max_reply=spec.max_reply,
                    stall_timeout=spec.stall_timeout,
                    known_limits=self._server_limits,
                )
            except (ChannelRefused, Stalled) as exc:
                # Refused: the server said how many it allows. Not set up in the
                # stall timeout: it answers no more here (a server that opens each
                # connection's first channels only), or the connection is dead, and
                # its channels' own watchdogs find that out. Either way this
                # connection takes no more: what it would not open goes elsewhere.
                slot.open -= 1
                slot.cap = slot.open
                errors.append(exc)
                if isinstance(exc, ChannelRefused):
                    # MaxSessions: every new connection of the process asks no more.
                    self.budget.server.refused_channel(slot.open)
                if isinstance(exc, Stalled) and slot.link.replies.at > began:
                    # It answered its other channels meanwhile: the silence was
                    # aimed at this one. Each new connection then opens no more.
                    self.server_caps.channel_unanswered(slot.open)
                if slot.cap == 0:
                    self._drop_unused(slot)  # it may carry nothing: of no use
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
            sftp.temps = self.temps
            sftp.client_bytes = self.client_bytes
            self.peer = self.peer or sftp.peer
            if self.server_profile is None and sftp.profile is not None:
                self._take_profile(sftp.profile)
            self._slot_of[sftp] = slot
            self._busy.add(spec.key, [sftp])
            opened.append(sftp)
            if ready is not None:
                ready(sftp)

        async def on_new_link(channels: int) -> None:
            try:
                link = await open_link(self.connect_config, self.auth_memory, retries=spec.retries)
            except SSHPipeError as exc:
                self.budget.give_back()
                errors.append(exc)
                return
            except BaseException:
                self.budget.give_back()
                raise
            finally:
                self._connecting -= 1
                unsettled[0] -= 1
                self._room.wake()  # waiters for it may share now, or find its room
            if self._closed:
                await link.close()
                self.budget.give_back()
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
            self.budget.give_back(unsettled[0])
        if errors:
            logger.debug("%d channel(s) not opened: %s", len(errors), errors[0])
        return opened


class PoolLease:
    """The channels of one transfer; the engine asks it for more as the controller wants.

    The pool's own half: it takes and gives back channels through the pool's
    bookkeeping, as the pool's methods would.
    """

    def __init__(self, pool: ChannelPool, spec: ChannelSpec, channels: list[SFTPSession]):
        self._pool = pool
        self._spec = spec
        self.channels = channels
        self.max_channels = spec.channels or min(
            64, spec.channels_per_connection * spec.max_connections
        )
        self.can_grow = spec.channels is None
        self.pacer = Pacer.for_rate(spec.rate_limit)
        # Channels opened at the start, before anyone asked (``ChannelPool.lease``):
        # open and not yet handed out, and still being opened.
        self.spares: list[SFTPSession] = []
        self._spares_opening = 0
        self._spare_came = asyncio.Event()
        self._spare_task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<PoolLease channels={len(self.channels)}/{self.max_channels}>"

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
                await self._pool._take_channels(self._spec, count, required=0, ready=came)
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

    def grow_no_more_if_shared(self) -> bool:
        """A lease given a shared channel grows no more; True if it was.

        Sharing starts only once every channel the client may open is busy:
        any channel such a transfer grew onto would be another's, and it
        already has one's worth. Its controller then wants no more lanes
        (``max_channels``) but still sizes its byte budget (adaptive).
        """
        if not self._pool._busy.is_shared(self.channels):
            return False
        self.max_channels = len(self.channels)
        return True

    def connections_of(self, channels: list[SFTPSession]) -> int:
        """How many connections these channels (of this lease) belong to."""
        return self._pool._connections_of(channels)

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
                self._pool._give_back(self._spec, [sftp])
        if len(added) < count:
            added += await self._pool._take_channels(
                self._spec, count - len(added), required=0, ready=arrived
            )
        return added

    async def recover(self, *, stalled: bool) -> None:
        """After a dropped (or, ``stalled``, silent) connection: fresh channels.

        Channels whose connection is gone are given back (closed); if none is
        left, one is opened, on a new connection if need be.

        Raises:
            ConnectError: no connection could be made (the caller retries).
        """
        pool = self._pool
        if stalled:
            pool._abort_links_of(self.channels)
        pool._prune()
        dead = [sftp for sftp in self.channels if sftp.broken is not None]
        self.channels = [sftp for sftp in self.channels if sftp.broken is None]
        pool._give_back(self._spec, dead)
        if not self.channels:
            self.channels = await pool._take_channels(self._spec, 1, required=1)
            self.grow_no_more_if_shared()  # for its next attempt's controller
