"""The mux master: authenticated SSH connections kept for later commands, on a UNIX socket.

An SSH connection's crypto state cannot be handed to another process, so the
master keeps the connections and splices each client's channel bytes to one
of its SSH channels (``core.muxwire`` is the framing; ``muxclient`` the other
end). What a client would wait round trips for is done ahead:

- a **spare** SFTP channel per connection, already opened and INIT'ed (and
  the server's ``limits@openssh.com`` asked once): the client's INIT is
  answered with the VERSION the server sent, from here, in no round trip;
  a new spare is opened as soon as one is taken;
- the limits go in the header reply, so the client asks for none.

Slots: a client's first link is slot 0 (the connection the master started
with), its next ones 1, 2...: a striped transfer's links map to SSH
connections of their own, opened on first use and kept for the next command.

Lifetime: ``persist`` seconds after the last client left (None: until
``exit``); at once when slot 0's connection dies (its clients' channels
break: their transfers reconnect, directly when no master answers). The
socket is removed on the way out. Clients of another uid (SO_PEERCRED) are
refused. Nothing is logged but at debug level, and never a secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

import asyncssh

from ..core import codec
from ..core.config import (
    DEFAULT_MAX_PACKET_SIZE,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_WINDOW,
    ConnectConfig,
)
from ..core.errors import ChannelRefused, ConnectionBroken, SSHPipeError, Stalled
from ..core.replyparser import ReplyParser, decode_limits
from ..core.text import clip
from .asyncssh_patches import ChannelTuning
from .muxconn import ClientConnection, bind_socket
from .ssh import open_link
from .sshlink import SSHLink

logger = logging.getLogger("sshpipe.mux")

__all__ = ["Master", "bind_socket"]

# A first client that never comes (its command died before it connected)
# must not leave a master behind for ever when ControlPersist is short.
FIRST_CLIENT_GRACE = 10.0
# Channels one connection carries before the master keeps no spare on it:
# the pool's 9 (MaxSessions 10 less one for a command) less the spare's own.
SPARE_BELOW = 8
# The spare's window and packet size: the library's defaults, which the CLI
# keeps unless --window says otherwise (then a channel is opened on request).
SPARE_KEY = (DEFAULT_WINDOW, DEFAULT_MAX_PACKET_SIZE)
# The master's own request on a spare: an id the client's requests, counted
# up from 0 on a fresh session, do not reach for 4 billion requests.
_LIMITS_ID = 0xFFFFFFFF


class Splice(asyncssh.SSHClientSession[bytes]):
    """One SSH SFTP channel, its bytes collected until a client takes it, then forwarded."""

    def __init__(self, window: int, patches: frozenset[str]) -> None:
        self.chan: asyncssh.SSHClientChannel[bytes] | None = None
        self.client: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.lost = False
        self.on_lost: Callable[[], None] | None = None
        self._window = window
        self._patches = patches
        self._tuning: ChannelTuning | None = None
        self._more: asyncio.Event = asyncio.Event()
        self._filter_id: int | None = None
        self._on_filtered: Callable[[bytes], None] | None = None
        self._scan = bytearray()

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self.chan = chan
        self._tuning = ChannelTuning(chan, self._window, self._patches)

    @property
    def peer_window(self) -> int:
        return self._tuning.peer_window if self._tuning is not None else 0

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype is None:
            self._deliver(self._filtered(data) if self._filter_id is not None else data)
        if self._tuning is not None:
            self._tuning.after_data()

    def _deliver(self, data: bytes) -> None:
        if not data:
            return
        if self.client is not None:
            self.client.write(data)
        else:
            self.buffer += data
            self._more.set()

    def expect_reply(self, request_id: int, answered: Callable[[bytes], None]) -> None:
        """Take the reply to our own request ``request_id`` out of the stream, for ``answered``.

        The spare's limits request is sent after INIT and not waited for: its
        answer may come once a client holds the channel, and must not reach it.
        """
        self._filter_id = request_id
        self._on_filtered = answered

    def _filtered(self, data: bytes) -> bytes:
        """``data`` less our reply, once whole packets show where it is."""
        self._scan += data
        out = bytearray()
        while len(self._scan) >= 4:
            end = 4 + int.from_bytes(self._scan[:4], "big")
            if len(self._scan) < end:
                break
            packet = bytes(self._scan[:end])
            del self._scan[:end]
            if len(packet) >= 9 and int.from_bytes(packet[5:9], "big") == self._filter_id:
                self._filter_id = None
                if self._on_filtered is not None:
                    self._on_filtered(packet)
                out += self._scan  # past it, the stream is the client's alone
                self._scan = bytearray()
                break
            out += packet
        return bytes(out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._more.set()
        if self.client is not None:
            self.client.close()
        if self.on_lost is not None:
            self.on_lost()

    def pause_writing(self) -> None:  # the SSH channel's send window is full
        if self.client is not None:
            self.client.pause_reading()

    def resume_writing(self) -> None:
        if self.client is not None:
            self.client.resume_reading()

    async def packet(self) -> bytes:
        """The next whole SFTP packet (length included), before a client takes the channel."""
        while True:
            if len(self.buffer) >= 4:
                end = 4 + int.from_bytes(self.buffer[:4], "big")
                if len(self.buffer) >= end:
                    raw = bytes(self.buffer[:end])
                    del self.buffer[:end]
                    return raw
            if self.lost:
                raise ConnectionError("SFTP channel closed by the server")
            self._more.clear()
            await self._more.wait()


class _Spare:
    """A channel opened ahead; ``version`` is the VERSION packet its INIT got (b"" if none)."""

    def __init__(self, splice: Splice, key: tuple[int, int], version: bytes, peer_window: int):
        self.splice = splice
        self.key = key
        self.version = version
        self.peer_window = peer_window


class _Upstream:
    """One SSH connection of the master (a slot) and its spare channel."""

    def __init__(self, link: SSHLink) -> None:
        self.link = link
        self.channels = 0  # open on it, spare included
        self.spare: asyncio.Task[_Spare | None] | None = None
        self.watchers: set[asyncio.Transport] = set()  # clients' links on it ("hello")


class Master:
    """Serves the clients of one ``[user@]host:port`` on a listening socket.

    Args:
        cfg: how to open more connections (slots past 0), as the first was.
        link: the connection the master was started with (slot 0).
        path: the socket's path, removed on the way out.
        persist: seconds to stay after the last client left; None for ever.
        retries: as many more tries for a connection the server closes before
            the log-in (``open_link``): the command's ``--retries``.
    """

    def __init__(
        self,
        cfg: ConnectConfig,
        link: SSHLink,
        path: str,
        persist: float | None,
        *,
        retries: int = 0,
    ) -> None:
        self._cfg = cfg
        self._retries = retries
        self._path = path
        self._persist = persist
        self._ups: dict[int, _Upstream] = {0: _Upstream(link)}
        self._coming: dict[int, asyncio.Task[_Upstream | SSHPipeError]] = {}
        self._limits: codec.Limits | None = None
        self._clients = 0
        self._idle_timer: asyncio.TimerHandle | None = None
        self._done = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None
        self._transports: set[asyncio.BaseTransport] = set()

    async def serve(self, sock: socket.socket) -> None:
        """Serve until told to exit, idle past ``persist``, or slot 0's connection died."""
        loop = asyncio.get_running_loop()
        ours = os.stat(self._path).st_ino  # removed at the end only if still ours
        self._idle(FIRST_CLIENT_GRACE if self._persist is not None else None)
        server = await loop.create_unix_server(lambda: ClientConnection(self), sock=sock)
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                group.create_task(self._watch(self._ups[0], primary=True))
                group.create_task(self._until_done())
                self._refill(self._ups[0])
        except* _Stop:
            pass
        finally:
            server.close()
            with contextlib.suppress(OSError):
                if os.stat(self._path).st_ino == ours:
                    os.unlink(self._path)
            for transport in list(self._transports):
                transport.close()
            for up in self._ups.values():
                await up.link.close()

    async def _until_done(self) -> None:
        await self._done.wait()
        raise _Stop  # the TaskGroup cancels every other task: clients' and spares'

    def stop(self) -> None:
        self._done.set()

    def abort(self, slot: int) -> None:
        """Drop slot ``slot``'s SSH connection: a client found it stalled (slot 0's: we leave)."""
        up = self._ups.get(slot)
        if up is not None:
            logger.debug("mux: %s stalled: dropped", up.link.label)
            up.link.abort()

    # -- clients coming and going ---------------------------------------------

    def came(self, transport: asyncio.BaseTransport) -> None:
        self._transports.add(transport)

    def joined(self) -> None:
        """A client began to use the master (a link, a channel, a command)."""
        self._clients += 1
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def left(self, transport: asyncio.BaseTransport, joined: bool) -> None:
        self._transports.discard(transport)
        if joined:
            self._clients -= 1
            if self._clients == 0:
                self._idle(self._persist)

    def _idle(self, seconds: float | None) -> None:
        if seconds is None:
            return
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._idle_timer = asyncio.get_running_loop().call_later(seconds, self.stop)

    # -- the SSH connections ----------------------------------------------------

    async def upstream(self, slot: int) -> _Upstream:
        """Slot ``slot``'s connection, opened now if it is not yet (or no longer) open.

        Raises:
            SSHPipeError: it could not be opened (as ``open_link``).
        """
        up = self._ups.get(slot)
        if up is not None and not up.link.closed:
            return up
        if slot == 0:
            raise ConnectionBroken("connection lost: the master's connection is closed")
        task = self._coming.get(slot)
        if task is None:
            assert self._group is not None
            task = self._group.create_task(self._connect(slot))
            self._coming[slot] = task
        result = await asyncio.shield(task)
        self._coming.pop(slot, None)
        if isinstance(result, SSHPipeError):
            raise result
        return result

    async def _connect(self, slot: int) -> _Upstream | SSHPipeError:
        logger.debug("mux: opening connection %d", slot)
        try:
            up = _Upstream(await open_link(self._cfg, retries=self._retries))
        except SSHPipeError as exc:
            return exc
        self._ups[slot] = up
        assert self._group is not None
        self._group.create_task(self._watch(up, primary=False))
        return up

    async def _watch(self, up: _Upstream, *, primary: bool) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            await up.link.connection.wait_closed()
        logger.debug("mux: %s closed", up.link.label)
        for transport in list(up.watchers):
            transport.close()
        if primary:
            self.stop()

    def _refill(self, up: _Upstream) -> None:
        """A spare channel on ``up``, opened now, unless it carries nearly all it may."""
        if up.spare is None and up.channels < SPARE_BELOW and not up.link.closed:
            assert self._group is not None
            up.spare = self._group.create_task(self._prepare_quietly(up))

    async def _prepare_quietly(self, up: _Upstream) -> _Spare | None:
        try:
            return await self._prepare(up)
        except (SSHPipeError, OSError, asyncssh.Error, TimeoutError) as exc:
            logger.debug("mux: no spare channel on %s: %s", up.link.label, exc)
            return None

    async def _prepare(self, up: _Upstream) -> _Spare:
        key = SPARE_KEY
        splice = await self.open_channel(up, key)
        assert splice.chan is not None
        peer_window = splice.peer_window
        try:
            async with asyncio.timeout(DEFAULT_STALL_TIMEOUT):
                splice.chan.write(codec.encode_init())
                version = await splice.packet()
                parser = ReplyParser()
                parser.feed(version)
                message = parser.next_message()
                if not isinstance(message, codec.Version):
                    raise ConnectionError("no SFTP VERSION")
                if "limits@openssh.com" in message.extensions and self._limits is None:
                    # Not waited for: a first client would pay its round trip.
                    # The client asks again itself meanwhile (its own request id).
                    splice.expect_reply(_LIMITS_ID, self._took_limits)
                    splice.chan.write(codec.encode_extended(_LIMITS_ID, "limits@openssh.com"))
        except BaseException:
            splice.chan.close()
            raise
        return _Spare(splice, key, version, peer_window)

    def _took_limits(self, packet: bytes) -> None:
        parser = ReplyParser()
        try:
            parser.feed(packet)
            reply = parser.next_message()
            if isinstance(reply, codec.ExtendedReply):
                self._limits = self._limits or decode_limits(reply.payload)
        except codec.CodecError as exc:
            logger.debug("mux: bad limits@openssh.com reply: %s", exc)

    async def open_channel(self, up: _Upstream, key: tuple[int, int]) -> Splice:
        splice = Splice(key[0], up.link.patches)
        up.channels += 1

        def lost() -> None:
            up.channels -= 1

        try:
            await _open_raw(
                up.link, splice, window=key[0], max_packet_size=key[1], within=DEFAULT_STALL_TIMEOUT
            )
        except BaseException:
            up.channels -= 1
            raise
        splice.on_lost = lost
        return splice

    async def take(self, up: _Upstream, key: tuple[int, int]) -> tuple[Splice, bytes, int]:
        """A channel for a client: the spare if it fits, else a new one (no INIT sent).

        Returns:
            The channel, the VERSION its INIT got (b"": the client's INIT goes
            to the server), the send window the server granted it.
        """
        spare: _Spare | None = None
        if key == SPARE_KEY and up.spare is not None:
            spare_task, up.spare = up.spare, None
            spare = await asyncio.shield(spare_task)
            if spare is not None and spare.splice.lost:
                spare = None
        if spare is not None:
            self._refill(up)
            return spare.splice, spare.version, spare.peer_window
        splice = await self.open_channel(up, key)
        self._refill(up)
        return splice, b"", splice.peer_window

    def describe(self, up: _Upstream) -> dict[str, Any]:
        limits = self._limits
        return {
            "ok": True,
            "pid": os.getpid(),
            "label": up.link.label,
            "server_version": str(up.link.connection.get_extra_info("server_version", "")),
            "rtt": up.link.rtt_estimate,
            "refuses_exec": up.link.refuses_exec,
            "limits": None
            if limits is None
            else [
                limits.max_packet_len,
                limits.max_read_len,
                limits.max_write_len,
                limits.max_open_handles,
            ],
        }

    def spawn(self, coro: Any) -> None:
        assert self._group is not None
        self._group.create_task(coro)


async def _open_raw(
    link: SSHLink,
    session: Splice,
    *,
    window: int,
    max_packet_size: int,
    within: float,
) -> None:
    """Start the sftp subsystem on a new channel of ``link`` whose bytes go to ``session``.

    Not ``SSHLink.open_sftp``: the master splices the channel's bytes to a
    client's socket rather than speak SFTP on it.

    Raises:
        ChannelRefused, ConnectionBroken, Stalled: as ``open_sftp``.
    """
    try:
        async with asyncio.timeout(within):
            await link.connection.create_session(
                lambda: session,
                subsystem="sftp",
                encoding=None,
                window=window,
                max_pktsize=max_packet_size,
            )
    except asyncssh.ChannelOpenError as exc:
        raise ChannelRefused(
            f"{link.label}: server refused an SFTP channel: {clip(exc.reason)}"
        ) from exc
    except TimeoutError as exc:
        raise Stalled(f"{link.label}: no answer to an SFTP channel request") from exc
    except (asyncssh.Error, OSError) as exc:
        raise ConnectionBroken(f"connection lost: {exc}") from exc
    link.channels_opened += 1


class _Stop(Exception):
    """The master is done: raised in its TaskGroup to end every task in it."""
