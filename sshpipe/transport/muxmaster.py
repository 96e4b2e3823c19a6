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

Its SSH side (connections, and channels spliced to a client) is
``muxsplice``; a client's connection on the socket, ``muxconn``, which sees
the master through ``muxconn.MasterSide``.

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
from collections.abc import Awaitable, Callable
from typing import Any

import asyncssh

from ..core import codec
from ..core.config import (
    DEFAULT_MAX_PACKET_SIZE,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_WINDOW,
    ConnectConfig,
)
from ..core.errors import ConnectionBroken, SSHPipeError
from ..core.replyparser import ReplyParser, decode_limits
from .muxconn import ClientConnection, bind_socket
from .muxsplice import Spare, Splice, Upstream, open_splice
from .ssh import open_link
from .sshlink import SSHLink

logger = logging.getLogger("sshpipe.mux")

__all__ = ["Master", "Runner", "bind_socket"]

# A thin client's whole command run here (``cli.thinserve``): its header, its
# pid (its cwd is the command's), an event set by its Ctrl-C; the answer's
# header and the bytes after it (``cli.thin`` reads them).
Runner = Callable[[dict[str, Any], int, asyncio.Event], Awaitable[tuple[dict[str, Any], bytes]]]

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


class Master:
    """Serves the clients of one ``[user@]host:port`` on a listening socket.

    Args:
        cfg: how to open more connections (slots past 0), as the first was.
        link: the connection the master was started with (slot 0).
        path: the socket's path, removed on the way out.
        persist: seconds to stay after the last client left; None for ever.
        retries: as many more tries for a connection the server closes before
            the log-in (``open_link``): the command's ``--retries``.
        runner: runs a thin client's get or put ("run"); None: refused, and
            the client runs it itself.
    """

    def __init__(
        self,
        cfg: ConnectConfig,
        link: SSHLink,
        path: str,
        persist: float | None,
        *,
        retries: int = 0,
        runner: Runner | None = None,
    ) -> None:
        self._cfg = cfg
        self._runner = runner
        self._retries = retries
        self._path = path
        self._persist = persist
        self._ups: dict[int, Upstream] = {0: Upstream(link)}
        self._coming: dict[int, asyncio.Task[Upstream | SSHPipeError]] = {}
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

    async def upstream(self, slot: int) -> Upstream:
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

    async def _connect(self, slot: int) -> Upstream | SSHPipeError:
        logger.debug("mux: opening connection %d", slot)
        try:
            up = Upstream(await open_link(self._cfg, retries=self._retries))
        except SSHPipeError as exc:
            return exc
        self._ups[slot] = up
        assert self._group is not None
        self._group.create_task(self._watch(up, primary=False))
        return up

    async def _watch(self, up: Upstream, *, primary: bool) -> None:
        with contextlib.suppress(asyncssh.Error, OSError):
            await up.link.connection.wait_closed()
        logger.debug("mux: %s closed", up.link.label)
        for transport in list(up.watchers):
            transport.close()
        if primary:
            self.stop()

    def _refill(self, up: Upstream) -> None:
        """A spare channel on ``up``, opened now, unless it carries nearly all it may."""
        if up.spare is None and up.channels < SPARE_BELOW and not up.link.closed:
            assert self._group is not None
            up.spare = self._group.create_task(self._prepare_quietly(up))

    async def _prepare_quietly(self, up: Upstream) -> Spare | None:
        try:
            return await self._prepare(up)
        except (SSHPipeError, OSError, asyncssh.Error, TimeoutError) as exc:
            logger.debug("mux: no spare channel on %s: %s", up.link.label, exc)
            return None

    async def _prepare(self, up: Upstream) -> Spare:
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
        return Spare(splice, key, version, peer_window)

    def _took_limits(self, packet: bytes) -> None:
        parser = ReplyParser()
        try:
            parser.feed(packet)
            reply = parser.next_message()
            if isinstance(reply, codec.ExtendedReply):
                self._limits = self._limits or decode_limits(reply.payload)
        except codec.CodecError as exc:
            logger.debug("mux: bad limits@openssh.com reply: %s", exc)

    async def open_channel(self, up: Upstream, key: tuple[int, int]) -> Splice:
        splice = Splice(key[0], up.link.patches)
        up.channels += 1

        def lost() -> None:
            up.channels -= 1

        try:
            await open_splice(
                up.link, splice, window=key[0], max_packet_size=key[1], within=DEFAULT_STALL_TIMEOUT
            )
        except BaseException:
            up.channels -= 1
            raise
        splice.on_lost = lost
        return splice

    async def take(self, up: Upstream, key: tuple[int, int]) -> tuple[Splice, bytes, int]:
        """A channel for a client: the spare if it fits, else a new one (no INIT sent).

        Returns:
            The channel, the VERSION its INIT got (b"": the client's INIT goes
            to the server), the send window the server granted it.
        """
        spare: Spare | None = None
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

    def describe(self, up: Upstream) -> dict[str, Any]:
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

    async def run_command(
        self, header: dict[str, Any], pid: int, interrupted: asyncio.Event
    ) -> tuple[dict[str, Any], bytes]:
        if self._runner is None:
            return {"ok": False, "error": "unknown op 'run'"}, b""
        return await self._runner(header, pid, interrupted)

    def spawn(self, coro: Any) -> None:
        assert self._group is not None
        self._group.create_task(coro)


class _Stop(Exception):
    """The master is done: raised in its TaskGroup to end every task in it."""
