"""One SSH connection and its channels: ``SSHLink``, the SFTP channel pipe.

``SSHClientConnection.start_sftp_client()`` takes no window, so the SFTP
subsystem is started with ``create_session(..., window=, max_pktsize=)`` and
our own SFTP session (``sftp.py``) speaks the protocol over it. Remote
commands and the kept shell run on the same connection. asyncssh's and the
OS's exceptions on an open connection are translated here (``raise X(...)
from exc``); opening and logging in is ``ssh.open_link``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref

import asyncssh

from ..core.codec import Limits
from ..core.compresspolicy import CompressionMode
from ..core.errors import ChannelRefused, ConnectionBroken, Stalled
from ..core.text import clip
from ..core.timeline import Timeline
from .asyncssh_patches import ChannelTuning
from .hostkeys import HostKeyPolicy
from .replies import ReplyClock
from .sftp import SFTPSession, lent_session
from .shell import SHELL_OPEN_TIMEOUT, TEXT, RemoteShell, read_bounded

__all__ = ["SSHLink"]

logger = logging.getLogger("sshpipe.ssh")


class _ChannelPipe(asyncssh.SSHClientSession[bytes]):
    """Feeds an SSH channel's bytes to an SFTPSession and writes its requests.

    It also tops the receive window up early (``asyncssh_patches.ChannelTuning``).

    Args:
        patches: the patches in force on the connection.
    """

    def __init__(self, window: int, patches: frozenset[str]) -> None:
        self.sftp: SFTPSession | None = None
        self._chan: asyncssh.SSHClientChannel[bytes] | None = None
        self._window = window
        self._patches = patches
        self._tuning: ChannelTuning | None = None

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self._chan = chan
        # The SFTP reply parser reads memoryviews as it reads bytes.
        self._tuning = ChannelTuning(chan, self._window, self._patches, views=True)

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype is None and self.sftp is not None:
            self.sftp.data_received(data)
        if self._tuning is not None:
            self._tuning.after_data()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.sftp is not None:
            self.sftp.connection_lost(_broken(exc, "SFTP channel closed by the server"))

    @property
    def peer_window(self) -> int:
        """The send window the server granted (0 if it is not read)."""
        return self._tuning.peer_window if self._tuning is not None else 0

    def write(self, data: bytes, payload: bytes | memoryview = b"") -> None:
        """Send ``data`` then ``payload``; a channel the server closed under us raises
        ConnectionBroken.

        asyncssh raises BrokenPipeError once the channel is closed for sending
        (it may be before ``connection_lost`` tells us): the broken path, so
        the work on it is retried.
        """
        assert self._chan is not None
        writer = self._tuning.writer if self._tuning is not None else None
        try:
            if writer is not None:
                writer.write(data, payload)  # no copy of the payload before its packets
            else:
                self._chan.write(data + payload if payload else data)
        except (asyncssh.Error, OSError) as exc:
            raise _broken(exc, "SFTP channel closed by the server") from exc

    def close(self) -> None:
        if self._chan is not None:
            self._chan.close()


def _broken(exc: BaseException | None, default: str) -> ConnectionBroken:
    if isinstance(exc, ConnectionBroken):
        return exc
    message = str(exc) if exc else default
    broken = ConnectionBroken(f"connection lost: {message}")
    broken.__cause__ = exc
    return broken


class SSHLink:
    """One authenticated SSH connection, able to open SFTP channels.

    Attributes:
        patches: the names of the asyncssh patches in force on it
            (``asyncssh_patches``): empty on an unchecked asyncssh release.
    """

    def __init__(
        self, conn: asyncssh.SSHClientConnection, label: str, patches: frozenset[str] = frozenset()
    ) -> None:
        self._conn = conn
        # Its client (``hostkeys``): asyncssh lets go of it as the connection
        # ends, and it keeps why (``lost``).
        self._owner = conn.get_owner()
        self.label = label
        self.patches = patches
        self.channels_opened = 0
        # A whole reply on any of its channels tells each that the connection lives.
        self.replies = ReplyClock(time.monotonic())
        self._sessions: weakref.WeakSet[SFTPSession] = weakref.WeakSet()
        # How the connection was set up (``core.timeline``): handed to the
        # first channel opened on it, whose transfer reports it.
        self.setup: list[tuple[str, float]] = []
        self.rtt_estimate = 0.0  # seconds of one round trip, from the log-in
        self.compression = "none"  # the algorithm agreed on at key exchange
        # The Compression setting it was opened with ("auto": ``compressroute``).
        self.compression_mode: CompressionMode = "no"
        # The server refused an exec once (an SFTP-only one: paramiko, ProFTPD):
        # its sessions run no command more, and --verify hashes the copy for no
        # sha256sum (``transfer.verify.plan_for``).
        self.refuses_exec = False

    def __repr__(self) -> str:
        return f"<SSHLink {self.label} channels_opened={self.channels_opened}>"

    async def open_sftp(
        self,
        *,
        window: int,
        max_packet_size: int,
        max_reply: int,
        stall_timeout: float,
        known_limits: Limits | None = None,
    ) -> SFTPSession:
        """Start the sftp subsystem on a new channel with our window and packet size.

        Args:
            max_reply: the longest SFTP reply the session accepts.
            stall_timeout: how long the channel's set-up (its open, the
                subsystem request, INIT/VERSION) may take in all, and how long
                the server may then leave any SFTP request unanswered.

        Raises:
            ChannelRefused: the server will not open more channels here.
            ConnectionBroken: the connection went away; Stalled: the server
                did not answer.
        """
        pipe = _ChannelPipe(window, self.patches)
        timeline = Timeline(time.monotonic(), self.setup)
        self.setup = []
        # One deadline for the channel's whole set-up: the open, the subsystem
        # request and INIT/VERSION (``SFTPSession.start``).
        deadline = asyncio.get_running_loop().time() + stall_timeout
        try:
            async with asyncio.timeout_at(deadline):
                await self._conn.create_session(
                    lambda: pipe,
                    subsystem="sftp",
                    encoding=None,
                    window=window,
                    max_pktsize=max_packet_size,
                )
        except asyncssh.ChannelOpenError as exc:
            if self._conn.is_closed():  # not refused: the connection went away under it
                owner = self._owner
                lost = owner.lost if isinstance(owner, HostKeyPolicy) else None
                raise _broken(lost, "connection lost") from exc
            raise ChannelRefused(
                f"{self.label}: server refused an SFTP channel: {clip(exc.reason)}"
            ) from exc
        except TimeoutError as exc:
            pipe.close()
            raise Stalled(
                f"{self.label}: no answer to an SFTP channel request in {stall_timeout:g} s"
            ) from exc
        except (asyncssh.Error, OSError) as exc:
            raise _broken(exc, "connection lost") from exc
        timeline.mark("channel", time.monotonic())
        self.channels_opened += 1
        sftp = lent_session(
            self,
            pipe,
            window=window,
            # Read before INIT is sent: nothing has used the server's grant yet.
            peer_window=pipe.peer_window,
            server_version=self.server_version,
            max_reply=max_reply,
            stall_timeout=stall_timeout,
        )
        pipe.sftp = sftp
        self._sessions.add(sftp)
        try:
            await sftp.start(known_limits=known_limits, deadline=deadline)
        except BaseException:
            sftp.close()
            raise
        timeline.mark("sftp_init", time.monotonic())
        sftp.setup = timeline.phases
        if 0 < self.rtt_estimate < sftp.init_rtt:
            # The server took longer to answer INIT than the link takes: it
            # started its SFTP process for this channel (Green End, behind
            # sshd's shell, takes 0.13 s on loopback). Taken as the RTT, that
            # made the flow controller want six channels, each as slow to start.
            sftp.init_rtt = self.rtt_estimate
        return sftp

    @property
    def connection(self) -> asyncssh.SSHClientConnection:
        """asyncssh's connection: the mux master (``muxmaster``) opens raw channels on it."""
        return self._conn

    @property
    def closed(self) -> bool:
        """The connection is gone (dropped, reset, or closed by us)."""
        return bool(self._conn.is_closed())

    @property
    def server_version(self) -> str:
        """The server's SSH version string, as it sent it."""
        return str(self._conn.get_extra_info("server_version", ""))

    def abort(self, *, stalled: bool = False) -> None:
        """Drop the connection now (it stalled, or the user is leaving): every
        channel on it fails at once.

        With ``ConnectionBroken``, as for a connection the network dropped:
        the work in flight on it is retried. (``stalled`` matters to a
        ``MuxLink`` only: this connection is ours alone either way.)
        """
        self._conn.abort()

    async def run(self, command: str, *, within: float, max_output: int) -> tuple[int, str] | None:
        """Run ``command`` on the server: (exit status, stdout), or None if it runs none.

        A server that only offers SFTP (ForceCommand internal-sftp, a chrooted
        account, an SFTP-only appliance) refuses the session or the exec; one
        that stays silent for ``timeout`` seconds counts as running none.

        Raises:
            ProtocolError: the command printed more than ``max_output``.
        """
        process: asyncssh.SSHClientProcess[str] | None = None
        try:
            async with asyncio.timeout(within):  # not wait_for: it can eat a cancel
                process = await self._conn.create_process(
                    command, stdin=asyncssh.DEVNULL, stderr=asyncssh.DEVNULL, **TEXT
                )
                what = f"{self.label}: {command.split()[0]}"
                stdout = await read_bounded(process.stdout, max_output, what)
                status = (await process.wait(check=False)).exit_status
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            logger.debug("%s: no command run (%s)", self.label, type(exc).__name__)
            refused = asyncssh.OPEN_REQUEST_SESSION_FAILED
            if isinstance(exc, asyncssh.ChannelOpenError) and exc.code == refused:
                # The session opened and the exec itself was refused (not a full
                # connection's MaxSessions, which refuses the session).
                self.refuses_exec = True
                for sftp in self._sessions:
                    sftp.run_command = None
            return None
        finally:
            if process is not None:
                process.close()
        return (status if status is not None else -1), stdout

    async def open_shell(self) -> RemoteShell | None:
        """A ``sh`` kept open for many commands, or None if the server runs none."""
        try:
            async with asyncio.timeout(SHELL_OPEN_TIMEOUT):
                process = await self._conn.create_process("sh", stderr=asyncssh.DEVNULL, **TEXT)
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            logger.debug("%s: no shell (%s)", self.label, type(exc).__name__)
            return None
        return RemoteShell(process, self.label)

    async def close(self) -> None:
        """Close the connection on purpose: requests in flight fail with ClosedError.

        The sessions are closed first: asyncssh would tell them the channel
        closed, which reads as the server's doing (``ConnectionBroken``).
        """
        for sftp in list(self._sessions):
            sftp.close()
        self._conn.close()
        # Closing a connection that already broke is not an error.
        with contextlib.suppress(asyncssh.Error, OSError):
            await self._conn.wait_closed()
