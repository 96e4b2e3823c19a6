"""One SFTP v3 session: INIT and VERSION, the server's limits, handles and named requests.

It speaks the protocol over ``requests.RequestChannel`` (ids, replies owed,
the stall watchdog), so it too does I/O only through the pipe it is given;
``sshlink.py`` plugs an SSH channel in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial

from ..core import codec
from ..core.errors import (
    ConnectionBroken,
    ProtocolError,
    RemoteError,
    RemoteOpenFailed,
    SSHPipeError,
    Stalled,
)
from ..core.flight import SharedBytes
from ..core.quirks import combined_open, split_opens
from ..core.replyparser import decode_limits
from ..core.servercaps import OPEN_SPLIT, SETSTAT_REFUSED
from ..core.serverprofile import profile_of
from ..core.status import status_error
from ..core.tempbook import TempBook
from .replies import ReplyCallback, ReplyClock
from .requests import RequestChannel
from .wiring import Lender, Pipe, RunCommand, Shell

logger = logging.getLogger("sshpipe.sftp")
# What a copy did not do (times and modes not set): said even with -q.
undone = logging.getLogger("sshpipe.upload")

# An OPEN refused with these may be one of combined flags (``quirks.split_opens``).
_OPEN_REFUSALS = (codec.FX_FAILURE, codec.FX_OP_UNSUPPORTED)

_NO_ATTRS = codec.Attrs()


class SFTPSession(RequestChannel):
    """Client side of one SFTP v3 session (``RequestChannel``'s arguments)."""

    def __init__(
        self,
        pipe: Pipe,
        *,
        name: str = "sftp",
        max_reply: int = codec.DEFAULT_MAX_REPLY_LEN,
        stall_timeout: float | None = None,
        replies: ReplyClock | None = None,
    ) -> None:
        super().__init__(
            pipe, name=name, max_reply=max_reply, stall_timeout=stall_timeout, replies=replies
        )
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
        # Our temporary files on the server, from before their OPEN to their
        # end (the pool's, shared): its OPENs with CREAT are told there.
        self.temps = TempBook()
        # The byte budget every transfer of the client draws from (the pool's,
        # shared): 200 transfers at once hold one budget, not 200.
        self.client_bytes: SharedBytes | None = None
        # "user@host:port" of the connection it runs on (the SSH edge fills
        # it in): an upload's resume journal is kept per destination server.
        self.peer = ""
        # Runs a command on the same server: (exit status, stdout), or None
        # when it runs none. The SSH edge fills it in (used to verify hashes).
        self.run_command: RunCommand | None = None
        # Opens a Shell on the same connection (None when the server runs none).
        self.open_shell: Callable[[], Awaitable[Shell | None]] | None = None

    # -- session set-up and control requests ---------------------------------

    async def start(
        self, *, known_limits: codec.Limits | None = None, deadline: float | None = None
    ) -> None:
        """Exchange INIT/VERSION, and ask for the server's limits when it offers them.

        The limits@openssh.com request is sent, not awaited: its answer comes
        with the first requests' (the OPEN, a STAT), which go out behind it
        (``learn_limits`` waits for it).

        The VERSION must be in by ``deadline``: one small message, owed at once,
        so a deadline, not the stall watchdog's silence (which bytes keep off:
        a VERSION trickled a byte a second, beside busy sibling channels, would
        hold the set-up for days). A session not started by then is aborted.

        Args:
            known_limits: limits another session on the same server already
                learned; a channel opened mid-transfer then asks for none.
            deadline: the loop's time by which the VERSION must be in (the
                link's set-up deadline for the channel); default
                ``stall_timeout`` from now, none without one.

        Raises:
            Stalled: no VERSION by the deadline; ConnectionBroken: the channel
            ended first; ProtocolError: not an SFTP v3 server.
        """
        loop = asyncio.get_running_loop()
        if deadline is None and self.stall_timeout is not None:
            deadline = loop.time() + self.stall_timeout
        self._version = loop.create_future()
        sent = time.monotonic()
        try:
            self._pipe.write(codec.encode_init())
        except ConnectionBroken as exc:
            self._fail(exc)  # the await below raises it
        try:
            async with asyncio.timeout_at(deadline):
                version = await self._version
        except TimeoutError:
            # The channel's set-up had ``stall_timeout`` seconds, its open included.
            budget = self.stall_timeout or time.monotonic() - sent
            stalled = Stalled(f"{self.name}: no answer to SFTP INIT in {budget:g} s")
            self.abort(stalled)
            raise stalled from None
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
            self._take_limits(decode_limits(reply.payload))
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
        return await self.handle_from(self.open_request(path, pflags, attrs), path)

    async def opendir(self, path: str) -> bytes:
        return await self._open_handle(
            lambda rid: codec.encode_path_request(codec.FXP_OPENDIR, rid, codec.wire(path)), path
        )

    def open_request(
        self, path: str, pflags: int, attrs: codec.Attrs = _NO_ATTRS
    ) -> asyncio.Future[codec.Reply]:
        """Send an OPEN now, to go out with other requests; ``handle_from`` its answer.

        One that may create a temporary file of ours (CREAT) tells ``temps``
        it went out and, when it comes, what its answer says was made. Flags
        some servers refuse together (``quirks.combined_open``) go split where
        the server's profile or an earlier refusal says so, else split once
        more after a refusal (``_open_learning``).
        """
        if pflags & codec.FXF_EXCL:
            # A file made new is empty: TRUNC asks nothing more of it, and a server
            # refusing CREAT|TRUNC with WRITE (AWS Transfer) takes it without.
            pflags &= ~codec.FXF_TRUNC
        if not combined_open(pflags):
            sent = self._open(path, pflags, attrs)
        elif self.caps.opens_split:
            sent = self._open_split(path, pflags, attrs)
        else:
            sent = self._open_learning(path, pflags, attrs)
        if pflags & codec.FXF_CREAT and self.temps.tracks(path):
            temps = self.temps
            temps.create_sent(path)
            sent.add_done_callback(partial(_told_created, temps, path))
        return sent

    def _open(self, path: str, pflags: int, attrs: codec.Attrs) -> asyncio.Future[codec.Reply]:
        return self._request(lambda rid: codec.encode_open(rid, codec.wire(path), pflags, attrs))

    def _open_then(self, path: str, pflags: int, attrs: codec.Attrs, then: ReplyCallback) -> None:
        """Send an OPEN whose answer goes to ``then``, called from inside the reply.

        Not through a future's callbacks (run later, from the loop): an OPEN
        sent as several is answered, and a late one's CLOSE sent, before the
        channel is found to owe nothing (``on_drained``), as for one OPEN.
        """
        request_id = self._allocate(then)
        self._send(request_id, codec.encode_open(request_id, codec.wire(path), pflags, attrs))

    def _opened(self, path: str) -> tuple[asyncio.Future[codec.Reply], ReplyCallback]:
        """The future an OPEN sent as several answers, and the call that answers it."""
        opened: asyncio.Future[codec.Reply] = asyncio.get_running_loop().create_future()

        def answer(outcome: codec.Reply | BaseException) -> None:
            if not opened.done():
                _settle(opened, outcome)
            elif isinstance(outcome, codec.Handle) and self.broken is None:
                self.close_handle_soon(outcome.handle, path)  # nobody waits for it now

        return opened, answer

    def _open_split(
        self, path: str, pflags: int, attrs: codec.Attrs
    ) -> asyncio.Future[codec.Reply]:
        """An OPEN of combined flags as a server that refuses them takes it (``split_opens``)."""
        opened, answer = self._opened(path)
        self._send_split(path, pflags, attrs, answer)
        return opened

    def _send_split(self, path: str, pflags: int, attrs: codec.Attrs, then: ReplyCallback) -> None:
        """The OPENs of ``split_opens``, together; ``then`` gets the one answer they make."""
        split = split_opens(pflags)
        if len(split) == 1:
            self._open_then(path, split[0], attrs, then)
            return
        got: dict[int, codec.Reply | BaseException] = {}

        def one(index: int, reply: codec.Reply | BaseException) -> None:
            got[index] = reply
            if len(got) < len(split):
                return
            first, second = got[0], got[1]
            handles = [reply for reply in (first, second) if isinstance(reply, codec.Handle)]
            for extra in handles[1:]:  # both (a file made between them): one kept
                if self.broken is None:
                    self.close_handle_soon(extra.handle, path)
            if handles:
                then(handles[0])
            elif isinstance(first, codec.Status) and first.code == codec.FX_NO_SUCH_FILE:
                then(second)  # nothing there to truncate: the create's answer says why
            else:
                then(first)

        for index, flags in enumerate(split):
            self._open_then(path, flags, attrs, partial(one, index))

    def _open_learning(
        self, path: str, pflags: int, attrs: codec.Attrs
    ) -> asyncio.Future[codec.Reply]:
        """An OPEN of combined flags, sent split once more if refused (AWS Transfer).

        If the split one gives a handle, the server's ``ServerCaps`` learns it;
        if not, the refusal was the file's (a permission, a full disk): the
        first answer is the one reported.
        """
        opened, answer = self._opened(path)

        def retried(refusal: codec.Reply, reply: codec.Reply | BaseException) -> None:
            if not isinstance(reply, codec.Handle):
                answer(refusal)
                return
            self.caps.split_open = True
            if self.caps.adapt(OPEN_SPLIT):
                logger.info("%s: %s", self.name, OPEN_SPLIT)
            answer(reply)

        def answered(reply: codec.Reply | BaseException) -> None:
            refused = isinstance(reply, codec.Status) and reply.code in _OPEN_REFUSALS
            if not refused or self.broken is not None or opened.done():
                answer(reply)
                return
            assert isinstance(reply, codec.Status)
            try:
                self._send_split(path, pflags, attrs, partial(retried, reply))
            except SSHPipeError:
                answer(reply)

        self._open_then(path, pflags, attrs, answered)
        return opened

    async def _open_handle(self, build: Callable[[int], bytes], path: str) -> bytes:
        return await self.handle_from(self._request(build), path)

    async def handle_from(self, future: asyncio.Future[codec.Reply], path: str) -> bytes:
        """The handle an OPEN (or OPENDIR) sent on this session answered with."""
        try:
            reply = await asyncio.shield(future)
        except asyncio.CancelledError:
            # The OPEN is on its way and the server may honour it: what it opens
            # is closed when the answer comes, or the handle leaks on the server.
            # Not waited for here (on a thin link the answer may queue behind
            # megabytes of replies): the channel owes replies, so the pool lets
            # it settle before anyone reuses it (``transport.settling``).
            self.close_when_opened(future, path)
            raise
        if isinstance(reply, codec.Status) and reply.code == codec.FX_FAILURE:
            failed = status_error(reply, path)
            raise RemoteOpenFailed(path, failed.reason, status=reply.code)
        return self._expect(reply, codec.Handle, path).handle

    def close_when_opened(self, future: asyncio.Future[codec.Reply], path: str) -> None:
        """CLOSE what an OPEN sent on this session opens, when its answer comes.

        Nothing waits for either answer: the session owes them, so the pool
        lets it settle before it is used again (``transport.settling``).
        """
        self.unsettled = True
        if future.done():  # now, not soon: before the session is given back as idle
            self._close_late(path, future)
        else:
            future.add_done_callback(partial(self._close_late, path))

    def _close_late(self, path: str, future: asyncio.Future[codec.Reply]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        late = future.result()
        if isinstance(late, codec.Handle) and self.broken is None:
            self.close_handle_soon(late.handle, path)

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

    async def set_attrs(self, path: str, attrs: codec.Attrs) -> bool:
        """SETSTAT of a file the copy made, unless the server takes none: whether it was set.

        A refusal that says the server takes none (``setstat_refused``) is
        learned and said once, and the copy goes on without its times and
        modes; any other failure raises.
        """
        if self.caps.setstat_off:
            return False
        try:
            await self.setstat(path, attrs)
        except RemoteError as exc:
            if not self.setstat_refused(exc):
                raise
            return False
        return True

    def setstat_refused(self, exc: RemoteError) -> bool:
        """Whether ``exc``, a SETSTAT's or FSETSTAT's, means the server takes none.

        Then it is learned (``ServerCaps.refused_setstat``) and said once, as
        a warning: the copy lands without the times and modes.
        """
        if not self.caps.refused_setstat(exc.status):
            return False
        if self.caps.adapt(SETSTAT_REFUSED):
            undone.warning("%s; %s", SETSTAT_REFUSED, exc)
        return True

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


def _settle(future: asyncio.Future[codec.Reply], outcome: codec.Reply | BaseException) -> None:
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _told_created(temps: TempBook, path: str, future: asyncio.Future[codec.Reply]) -> None:
    """What an OPEN with CREAT of a temporary file made, from its answer (or its loss)."""
    if future.cancelled() or future.exception() is not None:
        temps.create_lost(path)
    else:
        temps.create_answered(path, created=isinstance(future.result(), codec.Handle))


def lent_session(
    link: Lender,
    pipe: Pipe,
    *,
    window: int,
    peer_window: int,
    server_version: str,
    max_reply: int,
    stall_timeout: float,
) -> SFTPSession:
    """A new session on ``pipe``, wired to what ``link`` lends it; the link counts it first.

    One place for both kinds of link, so neither forgets what a session needs
    (its peer for the resume journal, its command runner for ``--verify``).
    """
    sftp = SFTPSession(
        pipe,
        name=f"{link.label}#{link.channels_opened}",
        max_reply=max_reply,
        stall_timeout=stall_timeout,
        replies=link.replies,
    )
    sftp.recv_window = window
    sftp.peer_window = peer_window
    sftp.server_version = server_version
    sftp.peer = link.label
    sftp.run_command = None if link.refuses_exec else link.run
    sftp.open_shell = link.open_shell
    # A session the server leaves silent drops the whole connection at once,
    # as the reconnect would (``PoolLease.recover``): its other channels retry.
    sftp.on_stalled = partial(link.abort, stalled=True)
    return sftp
