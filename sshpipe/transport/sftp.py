"""One SFTP session over one byte pipe: request ids, pending replies, handles.

This layer does I/O only through the pipe it is given (``write``/``close``)
and the two calls the pipe makes back (``data_received``/``connection_lost``),
so it never sees asyncssh; ``ssh.py`` plugs an SSH channel in.

Hot-path requests (READ, WRITE) take a callback instead of returning a future:
a transfer keeps 128 of them in flight and a future plus a task per request is
pure overhead. Control requests (OPEN, CLOSE, STAT...) are awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .._errors import (
    ClosedError,
    ConnectionBroken,
    ProtocolError,
    RemoteOpenFailed,
    SSHPipeError,
    Stalled,
)
from ..core import codec
from ..core.servercaps import ServerCaps
from ..core.serverprofile import profile_of
from ..core.status import status_error
from .replies import ReplyCallback, ReplyClock
from .wiring import Pipe, RunCommand, Shell

logger = logging.getLogger("sshpipe.sftp")

_R = TypeVar("_R", bound="codec.Reply")


_NO_ATTRS = codec.Attrs()


class SFTPSession:
    """Client side of one SFTP v3 session.

    Args:
        pipe: where request bytes go; replies come back through ``data_received``.
        name: used in log lines and ``repr``.
        max_reply: the longest reply accepted (``core.sizing.reply_cap``).
        stall_timeout: seconds the server may owe a reply without sending a
            byte before the session counts as dropped (``Stalled``); None never.
    """

    def __init__(
        self,
        pipe: Pipe,
        *,
        name: str = "sftp",
        max_reply: int = codec.DEFAULT_MAX_REPLY_LEN,
        stall_timeout: float | None = None,
        replies: ReplyClock | None = None,
    ) -> None:
        self._pipe = pipe
        self.name = name
        self._parser = codec.ReplyParser(max_reply)
        # Every request, control ones too (OPEN, STAT, limits, CLOSE), is
        # covered: a server that never answers one fails the session instead
        # of hanging the transfer. Transfers set their own (``stall_timeout``).
        self.stall_timeout = stall_timeout
        self._watchdog: asyncio.TimerHandle | None = None
        self._pending: dict[int, ReplyCallback] = {}
        self._slow: dict[int, float] = {}  # request id: seconds its answer may take more
        self._next_id = 0
        self._version: asyncio.Future[codec.Version] | None = None
        self._broken: BaseException | None = None
        self.extensions: dict[str, bytes] = {}
        self.limits: codec.Limits | None = None
        self._limits_reply: asyncio.Future[codec.Reply] | None = None
        self._limits_error: ProtocolError | None = None
        # Told the limits when they arrive (the pool: channels opened later ask for none).
        self.on_limits: Callable[[codec.Limits], None] | None = None
        # How this channel (and, for a connection's first, the connection)
        # was set up: ``core.timeline``'s phases, taken by the first transfer.
        self.setup: list[tuple[str, float]] = []
        # Seconds from INIT to VERSION: one round trip on an idle channel, the
        # flow controller's first RTT estimate.
        self.init_rtt = 0.0
        # Bytes of payload the channel can hold in flight each way (RFC 4254
        # §5.2): the receive window we granted, the send window the server
        # granted. 0 means unknown; the SSH edge fills them in.
        self.recv_window = 0
        self.peer_window = 0
        # The server's SSH version string (the SSH edge fills it in) and what
        # it and the VERSION extensions say the server is (``start``).
        self.server_version = ""
        self.profile = profile_of("", {})
        # Caps the server was found to impose, shared by its channels (the pool's).
        self.caps = ServerCaps()
        # Our temp files on the server that could not be removed (the pool's, shared).
        self.left_temps: set[str] = set()
        # "user@host:port" of the connection it runs on (the SSH edge fills
        # it in): an upload's resume journal is kept per destination server.
        self.peer = ""
        # Runs a command on the same server: (exit status, stdout), or None
        # when it runs none. The SSH edge fills it in (used to verify hashes).
        self.run_command: RunCommand | None = None
        # Opens a Shell on the same connection (None when the server runs none).
        self.open_shell: Callable[[], Awaitable[Shell | None]] | None = None
        # The watchdog's clocks: since when the server owes us a reply, when a
        # byte of this channel last came, when a whole reply last came on any
        # channel of the connection (``replies``, shared). See ``_silence``.
        now = time.monotonic()
        self._owed_since = now
        self._last_byte = now
        self._replies = replies if replies is not None else ReplyClock(now)

    def __repr__(self) -> str:
        state = "broken" if self._broken else "open"
        return f"<SFTPSession {self.name} {state} pending={len(self._pending)}>"

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def broken(self) -> BaseException | None:
        return self._broken

    # -- pipe callbacks ----------------------------------------------------

    def _silence(self, now: float) -> float:
        """Seconds the server has owed a reply while this channel heard no byte, or its
        connection finished no reply: the one stall detector every transfer and tree
        relies on (the pool sets each channel's ``stall_timeout`` to its transfer's).

        Bytes alone would let a server trickle a reply a byte at a time forever;
        whole replies alone would count a channel whose data waits behind its
        siblings' on the same connection (a thin link, big windows) as silent.
        """
        return now - max(self._owed_since, min(self._last_byte, self._replies.at))

    def abort(self, exc: BaseException) -> None:
        """Give up on the session: every request in flight fails with ``exc`` at once.

        ``exc`` says why (``Stalled``, ``ConnectionBroken``), so the work in
        flight knows whether to retry; ``close`` is for closing on purpose.
        """
        self._fail(exc)

    def data_received(self, data: bytes) -> None:
        self._last_byte = time.monotonic()
        if self._broken is not None:
            return
        try:
            self._parser.feed(data)
            for message in self._parser.drain():
                self._dispatch(message)
        except codec.CodecError as exc:
            self._fail(ProtocolError(f"{self.name}: malformed reply from server: {exc}"))

    def connection_lost(self, exc: BaseException | None) -> None:
        reason = exc if exc is not None else ConnectionBroken(f"{self.name}: channel closed")
        self._fail(reason)

    def _dispatch(self, message: codec.ServerMessage) -> None:
        if isinstance(message, codec.Version):
            if self._version is None or self._version.done():
                raise codec.CodecError("unexpected VERSION message")
            self._version.set_result(message)
            return
        self._replies.at = time.monotonic()
        if self._slow:
            self._slow.pop(message.request_id, None)
        callback = self._pending.pop(message.request_id, None)
        if callback is None:
            # A reply to a request we never sent (or already answered): the peer is
            # broken or hostile, and nothing it says on this session can be trusted.
            raise codec.CodecError(f"reply for unknown request id {message.request_id}")
        callback(message)

    def _fail(self, exc: BaseException) -> None:
        if self._broken is not None:
            return
        self._broken = exc
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        pending, self._pending = self._pending, {}
        self._slow.clear()
        if self._version is not None and not self._version.done():
            self._version.set_exception(exc)
        for callback in pending.values():
            callback(exc)
        self._pipe.close()

    def _watch(self, delay: float) -> None:
        self._watchdog = asyncio.get_running_loop().call_later(delay, self._check_silence)

    def _check_silence(self) -> None:
        """The watchdog's look: fail the session once the server owed a reply too long."""
        self._watchdog = None
        if self._broken is not None or not self._pending or self.stall_timeout is None:
            return  # re-armed by the next request owed
        timeout = self.stall_timeout + max(self._slow.values(), default=0.0)
        silent = self._silence(time.monotonic())
        if silent < timeout:
            self._watch(timeout - silent)
            return
        logger.debug("%s: no reply for %.1f s: stalled", self.name, silent)
        self.caps.stalled(len(self._pending))  # the next attempt asks for fewer at once
        self._fail(Stalled(f"{self.name}: no reply from the server for {timeout:g} s"))

    # -- sending -------------------------------------------------------------

    def _allocate(self, callback: ReplyCallback) -> int:
        if self._broken is not None:
            raise self._broken
        if not self._pending:  # silence counts from the first request owed
            self._owed_since = time.monotonic()
            if self._watchdog is None and self.stall_timeout is not None:
                self._watch(self.stall_timeout)
        request_id = self._next_id
        self._next_id = (request_id + 1) & 0xFFFFFFFF
        self._pending[request_id] = callback
        return request_id

    def _send(self, request_id: int, data: bytes) -> None:
        """Write one request; if the pipe is gone, the session breaks with it.

        The request is no longer owed, and its sender gets the error raised
        here, not also through its callback: nothing is left to fail unseen.
        """
        try:
            self._pipe.write(data)
        except ConnectionBroken as exc:
            self._pending.pop(request_id, None)
            self._fail(exc)
            raise

    def send_read(self, handle: bytes, offset: int, length: int, callback: ReplyCallback) -> None:
        request_id = self._allocate(callback)
        self._send(request_id, codec.encode_read(request_id, handle, offset, length))

    def send_write(self, handle: bytes, offset: int, data: bytes, callback: ReplyCallback) -> None:
        request_id = self._allocate(callback)
        # One write, not header then payload: asyncssh cuts each write into SSH
        # packets separately, so a separate header would cost a packet of its own.
        self._send(
            request_id, codec.encode_write_header(request_id, handle, offset, len(data)) + data
        )

    def _request(
        self, build: Callable[[int], bytes], slow: float = 0.0
    ) -> asyncio.Future[codec.Reply]:
        """Send one request built by ``build(request_id)``; its reply resolves the future.

        ``slow``: seconds its answer may take beyond the stall timeout (the
        server reads a whole file for it: check-file).
        """
        future: asyncio.Future[codec.Reply] = asyncio.get_running_loop().create_future()

        def resolve(reply: codec.Reply | BaseException) -> None:
            if future.done():
                return
            if isinstance(reply, BaseException):
                future.set_exception(reply)
            else:
                future.set_result(reply)

        request_id = self._allocate(resolve)
        if slow > 0:
            self._slow[request_id] = slow
        self._send(request_id, build(request_id))
        return future

    def request(self, build: Callable[[int], bytes]) -> asyncio.Future[codec.Reply]:
        """Send one request now; await the future for its reply (pipelining)."""
        return self._request(build)

    async def call(self, build: Callable[[int], bytes], *, slow: float = 0.0) -> codec.Reply:
        """Send one request and await its reply (``slow``: as for ``_request``)."""
        return await self._request(build, slow)

    # -- session set-up and control requests ---------------------------------

    async def start(self, *, known_limits: codec.Limits | None = None) -> None:
        """Exchange INIT/VERSION, and ask for the server's limits when it offers them.

        The limits@openssh.com request is sent, not awaited: its answer comes
        with the first requests' (the OPEN, a STAT), which go out behind it
        (``learn_limits`` waits for it).

        Args:
            known_limits: limits another session on the same server already
                learned; a channel opened mid-transfer then asks for none.
        """
        self._version = asyncio.get_running_loop().create_future()
        sent = time.monotonic()
        try:
            self._pipe.write(codec.encode_init())
        except ConnectionBroken as exc:
            self._fail(exc)  # the await below raises it
        version = await self._version
        self.init_rtt = time.monotonic() - sent
        if version.version != codec.SFTP_VERSION:
            raise ProtocolError(f"{self.name}: server speaks SFTP version {version.version}, not 3")
        self.extensions = version.extensions
        self.profile = profile_of(self.server_version, version.extensions)
        if "limits@openssh.com" in self.extensions and known_limits is not None:
            self._take_limits(known_limits)
        elif "limits@openssh.com" in self.extensions:
            self._limits_reply = self._request(
                lambda rid: codec.encode_extended(rid, "limits@openssh.com")
            )
            self._limits_reply.add_done_callback(self._on_limits)

    def _on_limits(self, future: asyncio.Future[codec.Reply]) -> None:
        if future.cancelled() or future.exception() is not None:
            return  # the session broke: ``learn_limits`` raises its error
        reply = future.result()
        if not isinstance(reply, codec.ExtendedReply):
            self._limits_error = ProtocolError(f"{self.name}: bad reply to limits@openssh.com")
            return
        try:
            self._take_limits(codec.decode_limits(reply.payload))
        except codec.CodecError as exc:
            self._limits_error = ProtocolError(f"{self.name}: bad limits@openssh.com reply")
            self._limits_error.__cause__ = exc

    def _take_limits(self, limits: codec.Limits) -> None:
        self.limits = limits
        if self.on_limits is not None:
            self.on_limits(limits)
        if limits.max_packet_len:
            # A server that states its packets' size sends no longer reply; one
            # stating less than every server must take (filexfer-02 §3) is not
            # believed, as for block sizing.
            stated = max(limits.max_packet_len, codec.MIN_PACKET_LEN) + 1024
            self._parser.max_len = min(self._parser.max_len, stated)

    async def learn_limits(self) -> codec.Limits | None:
        """The server's limits once its answer is in (None if it states none).

        Raises:
            ProtocolError: the answer was malformed; ConnectionBroken, Stalled,
            ClosedError: the session ended first.
        """
        if self._limits_reply is not None:
            await asyncio.shield(self._limits_reply)  # a cancelled caller leaves it be
        if self._limits_error is not None:
            raise self._limits_error
        return self.limits

    async def open(self, path: str, pflags: int, attrs: codec.Attrs = _NO_ATTRS) -> bytes:
        return await self._open_handle(
            lambda rid: codec.encode_open(rid, codec.wire(path), pflags, attrs), path
        )

    async def opendir(self, path: str) -> bytes:
        return await self._open_handle(
            lambda rid: codec.encode_path_request(codec.FXP_OPENDIR, rid, codec.wire(path)), path
        )

    def open_request(
        self, path: str, pflags: int, attrs: codec.Attrs = _NO_ATTRS
    ) -> asyncio.Future[codec.Reply]:
        """Send an OPEN now, to go out with other requests; ``handle_from`` its answer."""
        return self._request(lambda rid: codec.encode_open(rid, codec.wire(path), pflags, attrs))

    async def _open_handle(self, build: Callable[[int], bytes], path: str) -> bytes:
        return await self.handle_from(self._request(build), path)

    async def handle_from(self, future: asyncio.Future[codec.Reply], path: str) -> bytes:
        """The handle an OPEN (or OPENDIR) sent on this session answered with."""
        try:
            reply = await asyncio.shield(future)
        except asyncio.CancelledError:
            # The OPEN is on its way and the server may honour it: wait for the
            # answer and close what it opened, or the handle leaks on the server.
            with contextlib.suppress(Exception):
                late = await future
                if isinstance(late, codec.Handle):
                    await self.close_handle(late.handle, path)
            raise
        if isinstance(reply, codec.Status) and reply.code == codec.FX_FAILURE:
            failed = status_error(reply, path)
            raise RemoteOpenFailed(path, failed.reason, status=reply.code)
        return self._expect(reply, codec.Handle, path).handle

    async def close_handle(self, handle: bytes, path: str) -> None:
        reply = await self.call(
            lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, handle)
        )
        self.check_status(reply, path)

    def close_handle_soon(self, handle: bytes, path: str) -> None:
        """Send CLOSE and let the answer come when it comes (a failure is logged)."""

        def answered(future: asyncio.Future[codec.Reply]) -> None:
            if future.cancelled():
                return
            error = future.exception()
            if error is None:
                try:
                    self.check_status(future.result(), path)
                except SSHPipeError as exc:
                    error = exc
            if error is not None:
                logger.debug("%s: CLOSE of %s: %s", self.name, path, error)

        self._request(
            lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, handle)
        ).add_done_callback(answered)

    async def fstat(self, handle: bytes, path: str) -> codec.Attrs:
        reply = await self.call(
            lambda rid: codec.encode_handle_request(codec.FXP_FSTAT, rid, handle)
        )
        return self._expect(reply, codec.AttrsReply, path).attrs

    def stat_request(self, path: str) -> asyncio.Future[codec.Reply]:
        """Send a STAT now, to go out with other requests (an OPEN)."""
        return self._request(
            lambda rid: codec.encode_path_request(codec.FXP_STAT, rid, codec.wire(path))
        )

    async def stat(self, path: str) -> codec.Attrs:
        return self._expect(await self.stat_request(path), codec.AttrsReply, path).attrs

    async def lstat(self, path: str) -> codec.Attrs:
        reply = await self.call(
            lambda rid: codec.encode_path_request(codec.FXP_LSTAT, rid, codec.wire(path))
        )
        return self._expect(reply, codec.AttrsReply, path).attrs

    async def realpath(self, path: str) -> str:
        reply = await self.call(
            lambda rid: codec.encode_path_request(codec.FXP_REALPATH, rid, codec.wire(path))
        )
        return self._single_name(reply, path)

    async def readlink(self, path: str) -> str:
        reply = await self.call(
            lambda rid: codec.encode_path_request(codec.FXP_READLINK, rid, codec.wire(path))
        )
        return self._single_name(reply, path)

    async def symlink(self, target: str, link: str) -> None:
        """Make ``link`` a symlink to ``target``, in the order the server reads them.

        filexfer-02 sends (linkpath, targetpath); OpenSSH's server reads them
        the other way round, and so does nearly every other v3 server
        (``core.serverprofile.symlink_order``).
        """
        if self.profile.symlink_order == "target-link":
            first, second = target, link
        else:
            first, second = link, target
        reply = await self.call(
            lambda rid: codec.encode_symlink(rid, codec.wire(first), codec.wire(second))
        )
        self.check_status(reply, link)

    async def mkdir(self, path: str, attrs: codec.Attrs = _NO_ATTRS) -> None:
        reply = await self.call(
            lambda rid: codec.encode_path_attrs_request(
                codec.FXP_MKDIR, rid, codec.wire(path), attrs
            )
        )
        self.check_status(reply, path)

    async def setstat(self, path: str, attrs: codec.Attrs) -> None:
        reply = await self.call(
            lambda rid: codec.encode_path_attrs_request(
                codec.FXP_SETSTAT, rid, codec.wire(path), attrs
            )
        )
        self.check_status(reply, path)

    @property
    def can_fsync(self) -> bool:
        return "fsync@openssh.com" in self.extensions

    def fsync_request(self, handle: bytes) -> asyncio.Future[codec.Reply]:
        """Send ``fsync@openssh.com`` for ``handle`` (check ``can_fsync`` first)."""
        return self._request(lambda rid: codec.encode_fsync(rid, handle))

    async def fsync(self, handle: bytes, path: str) -> None:
        """Make the file's data durable on the server, if it offers fsync@openssh.com."""
        if self.can_fsync:
            self.check_status(await self.fsync_request(handle), path)

    async def remove(self, path: str) -> None:
        reply = await self.call(
            lambda rid: codec.encode_path_request(codec.FXP_REMOVE, rid, codec.wire(path))
        )
        self.check_status(reply, path)

    def close(self) -> None:
        """Close the channel; pending requests fail with ClosedError (not retried).

        For a channel given up on because of the network or the server (it
        stalled, its connection died), ``abort`` with that cause instead: the
        work in flight on it is then retried.
        """
        self._fail(ClosedError(f"{self.name}: closed"))

    @staticmethod
    def check_status(
        reply: codec.Reply, path: str, offset: int | None = None, *, write: bool = False
    ) -> None:
        if not isinstance(reply, codec.Status):
            raise ProtocolError(f"{path}: expected a STATUS reply, got {type(reply).__name__}")
        if reply.code != codec.FX_OK:
            raise status_error(reply, path, offset, write=write)

    @classmethod
    def _single_name(cls, reply: codec.Reply, path: str) -> str:
        names = cls._expect(reply, codec.Name, path).names
        if len(names) != 1:
            raise ProtocolError(f"{path}: expected one name in the reply, got {len(names)}")
        return names[0][0]

    @staticmethod
    def _expect(reply: codec.Reply, kind: type[_R], path: str) -> _R:
        if isinstance(reply, kind):
            return reply
        if isinstance(reply, codec.Status):
            raise status_error(reply, path)
        raise ProtocolError(f"{path}: expected {kind.__name__}, got {type(reply).__name__}")
