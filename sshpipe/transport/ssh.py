"""Connections and their channels: ``open_link``, ``SSHLink``, asyncssh's errors translated.

It opens connections (ssh_config, keys, known_hosts through ``hostkeys``),
opens SFTP channels with the receive window and packet size the engine chose,
and translates asyncssh's and the OS's exceptions into sshpipe's tree
(``raise X(...) from exc``). asyncssh's internals are tuned in
``asyncssh_patches``, nowhere else.

``SSHClientConnection.start_sftp_client()`` takes no window, so the SFTP
subsystem is started with ``create_session(..., window=, max_pktsize=)`` and
our own SFTP session (``sftp.py``) speaks the protocol over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
import weakref
from dataclasses import replace
from typing import Any

import asyncssh

from .._config import ConnectConfig
from .._errors import (
    AuthenticationError,
    ChannelRefused,
    ConnectError,
    ConnectionBroken,
    ConnectTimeout,
    KeyLoadError,
    SSHPipeError,
    Stalled,
    UnknownHostKey,
    UsageError,
)
from ..core.codec import Limits
from ..core.compresspolicy import CompressionMode
from ..core.timeline import CONNECTION_PHASES, Timeline
from .asyncssh_patches import SIGNED_FIRST, ChannelTuning, tune_connection
from .auth import AuthMemory, Deadline, LoginClient, why_no_prompt
from .negotiation import log_negotiated
from .replies import ReplyClock
from .sftp import SFTPSession, lent_session
from .shell import SHELL_OPEN_TIMEOUT, TEXT, RemoteShell, read_bounded
from .sshoptions import Prepared, read_options

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

    def write(self, data: bytes) -> None:
        """Send ``data``; a channel the server closed under us raises ConnectionBroken.

        asyncssh raises BrokenPipeError once the channel is closed for sending
        (it may be before ``connection_lost`` tells us): the broken path, so
        the work on it is retried.
        """
        assert self._chan is not None
        try:
            self._chan.write(data)
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
            stall_timeout: how long the server may leave the channel open
                request, or any SFTP request, unanswered.

        Raises:
            ChannelRefused: the server will not open more channels here.
            ConnectionBroken: the connection went away; Stalled: the server
                did not answer.
        """
        pipe = _ChannelPipe(window, self.patches)
        timeline = Timeline(time.monotonic(), self.setup)
        self.setup = []
        try:
            async with asyncio.timeout(stall_timeout):
                await self._conn.create_session(
                    lambda: pipe,
                    subsystem="sftp",
                    encoding=None,
                    window=window,
                    max_pktsize=max_packet_size,
                )
        except asyncssh.ChannelOpenError as exc:
            raise ChannelRefused(
                f"{self.label}: server refused an SFTP channel: {exc.reason}"
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
            server_version=str(self._conn.get_extra_info("server_version", "")),
            max_reply=max_reply,
            stall_timeout=stall_timeout,
        )
        pipe.sftp = sftp
        self._sessions.add(sftp)
        try:
            await sftp.start(known_limits=known_limits)
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


# Jump hosts behind jump hosts (a hop's own ProxyJump): OpenSSH has no limit,
# and a loop in ssh_config spawns ssh processes until something breaks.
MAX_JUMP_DEPTH = 8


async def open_link(cfg: ConnectConfig, memory: AuthMemory | None = None) -> SSHLink:
    """Connect and authenticate, through the jump hosts if any (``proxy_jump``).

    Every ConnectError raised names the ``host`` (as given) and ``port``;
    one on the way through a jump host begins with "jump host NAME:".
    Closing the link closes the jump hosts' connections too.

    Args:
        memory: what earlier log-ins of the same client learnt (``auth.py``):
            answers that worked are reused, not asked again.

    Raises:
        UsageError: an ssh_config or option value that cannot be used.
        KeyLoadError: a key named cannot be used (before any connection).
        ConnectError: invalid options, DNS failure, refused, handshake failure;
            ConnectTimeout: no connection within ``connect_timeout``.
        AuthenticationError, HostKeyError (UnknownHostKey, HostKeyMismatch).
    """
    return await _open(cfg, via=None, depth=0, memory=memory)


async def _open(
    cfg: ConnectConfig, *, via: SSHLink | None, depth: int, memory: AuthMemory | None = None
) -> SSHLink:
    # Off the loop: an RSA key's checks or a passphrase's KDF take 0.3-0.4 s,
    # ssh_config and known_hosts are file reads; the caller's other tasks run on.
    memory = memory if memory is not None else AuthMemory()
    prepared = await asyncio.to_thread(read_options, cfg, memory)
    if cfg.batch_mode is None:  # ssh_config's BatchMode
        cfg = replace(cfg, batch_mode=prepared.batch_mode)
    if via is None and prepared.jumps:
        via = await _open_jumps(cfg, prepared.jumps, depth)
    try:
        return await _log_in(cfg, prepared, via, memory)
    except BaseException:
        if via is not None:
            await via.close()
        raise


async def _open_jumps(
    cfg: ConnectConfig, jumps: list[tuple[str | None, str, int | None]], depth: int
) -> SSHLink:
    """The last of the hops, each opened through the one before.

    As ssh's ``-J a,b``: ``a`` is looked up in ssh_config as a host of its own
    (its own ProxyJump too); ``b`` is reached through ``a``, whatever its
    ProxyJump says. Each hop takes the keys, known_hosts, host key policy,
    connect timeout and ciphers ``cfg`` sets (OpenSSH hands its hops only
    ``-F``; sshpipe checks them as strictly as the target), never the
    password. Each pool connection opens its own chain: a hop dropped takes
    down only the connection that used it, and a reconnect opens a new one.
    """
    if depth >= MAX_JUMP_DEPTH:
        # The same on every try: the config's doing, not the network's.
        raise UsageError(
            f"{cfg.host}: more than {MAX_JUMP_DEPTH} jump hosts deep (a ProxyJump loop?)"
        )
    link: SSHLink | None = None
    for user, host, port in jumps:
        hop = replace(
            cfg,
            host=host,
            port=port,
            username=user,
            password=None,
            compression=None,
            ssh_options=(),
            proxy_jump=None if link is None else "none",
        )
        # The hop as -J spells it.
        name = (f"{user}@" if user else "") + (f"[{host}]" if ":" in host else host)
        name += f":{port}" if port is not None else ""
        try:
            # A hop's answers are its own: never the target's remembered ones.
            link = await _open(hop, via=link, depth=depth + 1, memory=AuthMemory())
        except SSHPipeError as exc:
            if not str(exc).startswith("jump host "):  # a hop's own hop named itself
                exc.args = (f"jump host {name}: {exc.args[0] if exc.args else exc}",)
            raise
    assert link is not None
    return link


async def _log_in(
    cfg: ConnectConfig, prepared: Prepared, via: SSHLink | None, memory: AuthMemory
) -> SSHLink:
    port = prepared.port
    tried = cfg.password if cfg.password is not None else memory.password
    user = str(getattr(prepared.options, "username", "") or "")
    policy = LoginClient(
        cfg,
        memory,
        prepared.known_files,
        strict=prepared.strict,
        locked=prepared.locked,
        tried_password=tried,
        username=user,
    )
    label = f"{cfg.host}:{port}"
    where: dict[str, Any] = {"host": cfg.host, "port": port}
    started = time.monotonic()
    try:
        async with asyncio.timeout(prepared.connect_timeout) as scope:
            policy.deadline = Deadline(scope)
            conn = await _login(cfg, prepared, policy, label, where, via)
    except asyncssh.HostKeyNotVerifiable as exc:
        refusal = policy.refusal or UnknownHostKey(f"{label}: {exc.reason}", **where)
        # A known_hosts callable that raised: its error is the cause to show.
        raise refusal from (refusal.__cause__ or exc)
    except asyncssh.PermissionDenied as exc:
        why = why_no_prompt(cfg)
        raise AuthenticationError(
            f"{label}: authentication failed: {exc.reason}{why}", **where
        ) from exc
    except asyncssh.KeyImportError as exc:
        raise KeyLoadError("(a key asyncssh loaded)", str(exc), **where) from exc
    except socket.gaierror as exc:
        raise ConnectError(
            f"{cfg.host}: cannot resolve host name: {exc.strerror}", **where
        ) from exc
    except ConnectionRefusedError as exc:
        raise ConnectError(f"{label}: connection refused", **where) from exc
    except asyncssh.ChannelOpenError as exc:  # the jump host would not forward to us
        raise ConnectError(f"{label}: the jump host refused: {exc.reason}", **where) from exc
    except TimeoutError as exc:
        raise ConnectTimeout(
            f"{label}: timed out after {prepared.connect_timeout:g} s", **where
        ) from exc
    except asyncssh.DisconnectError as exc:
        raise ConnectError(f"{label}: server disconnected: {exc.reason}", **where) from exc
    except (asyncssh.Error, OSError) as exc:
        raise ConnectError(f"{label}: {exc}", **where) from exc
    if via is not None:
        # asyncssh closes the tunnel of a connection it opened through one only
        # when it opened the tunnel itself: closing ours closes the hops too.
        conn.set_tunnel(via._conn)
    patches = tune_connection(conn) | policy.handshake_patches
    port = conn.get_extra_info("peername", (cfg.host, port))[1] if via is None else port
    link = SSHLink(conn, f"{conn.get_extra_info('username')}@{cfg.host}:{port}", patches)
    timeline = Timeline(started)
    for name, at in zip(
        CONNECTION_PHASES,
        (policy.connected_at, policy.auth_began_at, policy.auth_ended_at or time.monotonic()),
        strict=True,
    ):
        timeline.mark(name, at or timeline.last)
    link.setup = timeline.phases
    link.compression = conn.get_extra_info("send_compression", "none") or "none"
    link.compression_mode = prepared.compression_mode
    if logger.isEnabledFor(logging.INFO):
        log_negotiated(conn, link.label, policy.negotiated, timeline.phases)
    # The log-in is one round trip when the key is signed at once (two when
    # asyncssh queries it first), plus the server's check of one signature.
    auth = dict(timeline.phases)["auth"]
    link.rtt_estimate = auth if SIGNED_FIRST in patches else auth / 2
    return link


async def _login(
    cfg: ConnectConfig,
    prepared: Prepared,
    client: LoginClient,
    label: str,
    where: dict[str, Any],
    via: SSHLink | None,
) -> asyncssh.SSHClientConnection:
    """``asyncssh.connect``; a prompt callback that raised ends it with its error.

    Raises:
        the callback's SSHPipeError, or AuthenticationError from its other
        errors; else asyncssh's own (translated by the caller).
    """
    try:
        conn = await asyncssh.connect(
            cfg.host,
            options=prepared.options,
            known_hosts=prepared.trusted,
            client_factory=lambda: client,
            # Always given: left out, asyncssh would open ssh_config's ProxyJump itself.
            tunnel=via._conn if via is not None else None,
        )
    except (asyncssh.Error, OSError):
        if client.failure is None:
            raise
        conn = None
    failure, client.failure = client.failure, None  # no cycle through its traceback
    if failure is None:
        assert conn is not None
        return conn
    if conn is not None:
        conn.abort()
    if isinstance(failure, SSHPipeError):
        raise failure
    raise AuthenticationError(
        f"{label}: the prompt callback raised {type(failure).__name__}: {failure}", **where
    ) from failure
