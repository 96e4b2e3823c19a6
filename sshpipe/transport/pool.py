"""The client's SSH connections and SFTP channels, handed out to transfers as leases.

A transfer never opens a channel itself: it holds a ``Lease`` on the pool,
which gives it channels (idle ones first, then new ones, on new connections
when one connection's ``MaxSessions`` is full, then, once every connection
it may open is full, busy ones shared: ``poolshare``) and takes them back
when it ends. Bookkeeping is done before every await: transfers asking at
the same moment see each other's reservations.

- ``Lease``: what a transfer sees (its channels; ``add`` more; ``recover``
  after a break), a protocol so the engine tests can pass a fake;
- ``Pool``: what a tree sees (leases for its big files, ``warm`` channels);
  both live in ``poollease``, beside the pool's implementation of a lease;
- ``ChannelPool``: the implementation behind ``sshpipe.Client``;
  ``PooledLink`` (in ``poolshare``) counts the channels on one of its SSH connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from functools import partial

from ..core.codec import Limits
from ..core.compresspolicy import CompressionMode
from ..core.config import ConnectConfig, TransferConfig
from ..core.errors import ChannelRefused, ClosedError, ConnectionBroken, PoolExhausted, Stalled
from ..core.flight import SharedBytes
from ..core.servercaps import ServerCaps
from ..core.serverprofile import ServerProfile, describe_server
from ..core.tempbook import TempBook
from .authmemory import AuthMemory
from .linkopen import LoginTurns, open_link
from .poollease import Lease as Lease
from .poollease import Pool as Pool
from .poollease import PoolLease, leased
from .poolopen import open_channels
from .poolshare import BusyChannels, ChannelKey, PooledLink, Room, channel_key
from .settling import SETTLE_AT_CLOSE, WIND_DOWN, Settling, wind_down
from .sftp import SFTPSession

logger = logging.getLogger("sshpipe.client")


def _capped(error: BaseException) -> bool:
    """A channel the server refused, or left unanswered: its connection takes no more
    (``poolopen``), but it may still carry channels."""
    return isinstance(error, (ChannelRefused, Stalled))


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
        # (each channel carries it to the transfers on it: ``transfer.pump``).
        self.client_bytes = SharedBytes(transfer_config.max_bytes_in_flight)
        # Our temporary files on the server, for every channel (``core.tempbook``);
        # the client gives it its durable record (``durability.ledger``).
        self.temps = TempBook()
        self.peer = ""  # "user@host:port", from the first channel
        self.swept = False  # the temps an earlier run left were looked for
        self._room = Room()  # transfers waiting for a channel, woken when room appears
        self.auth_memory = AuthMemory()  # what log-ins learnt: reconnects ask nothing again

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
            # A server past its MaxStartups drops it: tried again within the retries.
            link = await open_link(
                self.connect_config, self.auth_memory, retries=self.config.retries
            )
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
        self._room.wake()  # transfers waiting for a channel see the client closed
        await wind_down(self._busy, self._room, WIND_DOWN)
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

    async def _take_channels(
        self,
        config: TransferConfig,
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
        call waits for room, at most ``config.queue_timeout``. ``light``
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
                    config, count, required=required, ready=ready, light=light
                )
                if taken is not None:
                    return taken
                if self._evict_idle(keep=channel_key(config)):
                    continue  # idle channels of other settings made room
                shared = self._share(config, required, ready)
                if shared is not None:
                    return shared
                if not queued:
                    queued, self._room.queued = True, self._room.queued + 1
                    if config.queue_timeout is not None:
                        deadline = asyncio.get_running_loop().time() + config.queue_timeout
                if not await self._room.wait(seen, deadline):
                    raise PoolExhausted(
                        f"no SFTP channel free for {config.queue_timeout:g} s: "
                        f"{len(self._slots)} connection(s) and their {len(self._busy)} "
                        "channel(s) carry all the transfers the server allows (queue_timeout)"
                    )
        finally:
            if queued:
                self._room.queued -= 1

    def _share(
        self, config: TransferConfig, count: int, ready: Callable[[SFTPSession], None] | None
    ) -> list[SFTPSession] | None:
        """``count`` busy channels to share, or None while connections are on their way."""
        if self._connecting:
            return None  # they bring channels of their own: wait for them (woken)
        shared = self._busy.share(channel_key(config), count)
        if shared is not None and ready is not None:
            for sftp in shared:
                ready(sftp)
        return shared

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

    async def _try_take_channels(
        self,
        config: TransferConfig,
        count: int,
        *,
        required: int,
        ready: Callable[[SFTPSession], None] | None,
        light: bool = False,
    ) -> list[SFTPSession] | None:
        """One attempt of ``_take_channels``; None when no room is left anywhere yet."""
        if self._closed:
            raise ClosedError("this client was closed")
        if not self._slots:
            await self.open()
        idle = self._idle.setdefault(channel_key(config), [])
        taken: list[SFTPSession] = []
        while idle and len(taken) < count:
            sftp = idle.pop()
            if sftp.broken is None:
                sftp.stall_timeout = config.stall_timeout  # this transfer's
                taken.append(sftp)
            else:
                self._forget(sftp)
        self._busy.add(channel_key(config), taken)
        if light and len(taken) < count:
            joined = self._busy.share(channel_key(config), count - len(taken), light=True)
            taken += joined or []
        if ready is not None:
            for sftp in taken:
                ready(sftp)
        errors: list[BaseException] = []
        try:
            taken += await open_channels(self, config, count - len(taken), errors, ready)
            if len(taken) < count and any(_capped(e) for e in errors):
                # A refusal (MaxSessions), or a channel the connection did not set
                # up in time, capped that connection: what it would not open goes
                # to other connections now, not never (the grower stops asking
                # once a request brings nothing).
                taken += await open_channels(self, config, count - len(taken), errors, ready)
        except BaseException:
            if ready is None:  # else each went to ``ready``: its holder gives it back
                self._give_back(config, taken)
            raise
        if len(taken) < required:
            self._give_back(config, taken)
            if self._closed:  # what failed was our own closing, not the server
                raise ClosedError("this client was closed")
            if errors and not (self._busy and all(_capped(e) for e in errors)):
                raise errors[0]
            # Connections that took no more (refused, or left a set-up unanswered)
            # while others' channels are busy: room to wait for, or to share.
            return None
        return taken

    def server(self) -> dict[str, object]:
        """What the server is, offers and was found to allow (``--json``'s "server")."""
        learned = self.server_caps.learned()
        if any(slot.link.refuses_exec for slot in self._slots):
            learned["runs_commands"] = False  # an exec was refused (--verify's sha256sum)
        return describe_server(self.server_profile, self._server_limits, learned)

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
            slot.link.abort()  # nothing in flight on it: no need to wait for the server
            self._room.wake()  # room for a connection of use

    def _forget(self, sftp: SFTPSession) -> None:
        slot = self._slot_of.pop(sftp, None)
        if slot is not None:
            slot.open -= 1

    def _give_back(self, config: TransferConfig, channels: list[SFTPSession]) -> None:
        key = channel_key(config)
        if channels:
            self._room.wake()
        for sftp in channels:
            if not self._busy.leave(sftp):
                continue  # other transfers still use it (shared): the last one gives it back
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
        self,
        config: TransferConfig,
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
            async with leased(self, config, at_start, light) as lease:
                yield lease
        finally:
            self.client_bytes.members -= 1

    @property
    def rtt_estimate(self) -> float:
        """The round trip the first connection's log-in took (0 if none is open)."""
        return self._slots[0].link.rtt_estimate if self._slots else 0.0

    async def warm(self, config: TransferConfig, count: int) -> None:
        """Open up to ``count`` idle channels now, if there is room; never wait for one.

        A light lease asking meanwhile waits for them (``poollease.leased``).
        """
        self.warming += 1
        try:
            self._give_back(config, await self._take_channels(config, count, required=0))
        finally:
            self.warming -= 1
            self._room.wake()
