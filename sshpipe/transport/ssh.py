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
import os
import socket
import time
import weakref
from pathlib import Path
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
)
from ..core.codec import Limits
from ..core.timeline import CONNECTION_PHASES, Timeline
from .asyncssh_patches import SIGNED_FIRST, ChannelTuning, tune_connection
from .auth import AuthMemory, Deadline, LoginClient, can_prompt, why_no_prompt
from .hostkeys import known_hosts_files, load_known_hosts
from .keys import client_keys, locked_keys
from .replies import ReplyClock
from .sftp import SFTPSession
from .shell import SHELL_OPEN_TIMEOUT, TEXT, RemoteShell, read_bounded

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
        self._tuning = ChannelTuning(chan, self._window, self._patches)

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
        sftp = SFTPSession(
            pipe,
            name=f"{self.label}#{self.channels_opened}",
            max_reply=max_reply,
            stall_timeout=stall_timeout,
            replies=self.replies,
        )
        sftp.recv_window = window
        sftp.server_version = str(self._conn.get_extra_info("server_version", ""))
        sftp.peer = self.label
        sftp.run_command = None if self.refuses_exec else self.run
        sftp.open_shell = self.open_shell
        # Read before INIT is sent: nothing has used the server's grant yet.
        sftp.peer_window = pipe.peer_window
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
    def closed(self) -> bool:
        """The connection is gone (dropped, reset, or closed by us)."""
        return bool(self._conn.is_closed())

    def abort(self) -> None:
        """Drop the connection now (it stalled): every channel on it fails at once.

        With ``ConnectionBroken``, as for a connection the network dropped:
        the work in flight on it is retried.
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


async def open_link(cfg: ConnectConfig, memory: AuthMemory | None = None) -> SSHLink:
    """Connect and authenticate.

    Every ConnectError raised names the ``host`` (as given) and ``port``.

    Args:
        memory: what earlier log-ins of the same client learnt (``auth.py``):
            answers that worked are reused, not asked again.

    Raises:
        KeyLoadError: a key named cannot be used (before any connection).
        ConnectError: invalid options, DNS failure, refused, handshake failure;
            ConnectTimeout: no connection within ``connect_timeout``.
        AuthenticationError, HostKeyError (UnknownHostKey, HostKeyMismatch).
    """
    # Off the loop: an RSA key's checks or a passphrase's KDF take 0.3-0.4 s,
    # ssh_config and known_hosts are file reads; the caller's other tasks run on.
    memory = memory if memory is not None else AuthMemory()
    options, known_files, trusted, port, locked = await asyncio.to_thread(
        _read_options, cfg, memory
    )
    tried = cfg.password if cfg.password is not None else memory.password
    user = str(getattr(options, "username", "") or "")
    policy = LoginClient(
        cfg, memory, known_files, locked=locked, tried_password=tried, username=user
    )
    label = f"{cfg.host}:{port}"
    where: dict[str, Any] = {"host": cfg.host, "port": port}
    started = time.monotonic()
    try:
        async with asyncio.timeout(cfg.connect_timeout) as scope:
            policy.deadline = Deadline(scope)
            conn = await _login(cfg, options, trusted, policy, label, where)
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
    except TimeoutError as exc:
        raise ConnectTimeout(
            f"{label}: timed out after {cfg.connect_timeout:g} s", **where
        ) from exc
    except asyncssh.DisconnectError as exc:
        raise ConnectError(f"{label}: server disconnected: {exc.reason}", **where) from exc
    except (asyncssh.Error, OSError) as exc:
        raise ConnectError(f"{label}: {exc}", **where) from exc
    patches = tune_connection(conn) | policy.handshake_patches
    port = conn.get_extra_info("peername", (cfg.host, port))[1]
    link = SSHLink(conn, f"{conn.get_extra_info('username')}@{cfg.host}:{port}", patches)
    timeline = Timeline(started)
    for name, at in zip(
        CONNECTION_PHASES,
        (policy.connected_at, policy.auth_began_at, policy.auth_ended_at or time.monotonic()),
        strict=True,
    ):
        timeline.mark(name, at or timeline.last)
    link.setup = timeline.phases
    # The log-in is one round trip when the key is signed at once (two when
    # asyncssh queries it first), plus the server's check of one signature.
    auth = dict(timeline.phases)["auth"]
    link.rtt_estimate = auth if SIGNED_FIRST in patches else auth / 2
    return link


async def _login(
    cfg: ConnectConfig,
    options: asyncssh.SSHClientConnectionOptions,
    trusted: asyncssh.SSHKnownHosts,
    client: LoginClient,
    label: str,
    where: dict[str, Any],
) -> asyncssh.SSHClientConnection:
    """``asyncssh.connect``; a prompt callback that raised ends it with its error.

    Raises:
        the callback's SSHPipeError, or AuthenticationError from its other
        errors; else asyncssh's own (translated by the caller).
    """
    try:
        conn = await asyncssh.connect(
            cfg.host, options=options, known_hosts=trusted, client_factory=lambda: client
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


def _read_options(
    cfg: ConnectConfig, memory: AuthMemory
) -> tuple[asyncssh.SSHClientConnectionOptions, list[Path], asyncssh.SSHKnownHosts, int, list[str]]:
    """asyncssh's options (ssh_config read, keys loaded), the known_hosts files and
    the entries for this host, the port, and the encrypted key files to ask about.

    Raises:
        KeyLoadError: a key named cannot be used.
        ConnectError: options asyncssh rejects, a bad known_hosts.
    """
    kwargs: dict[str, Any] = {
        "encryption_algs": list(cfg.ciphers),
        "compression_algs": ["zlib@openssh.com", "none"] if cfg.compression else ["none"],
        "connect_timeout": cfg.connect_timeout,
    }
    if can_prompt(cfg):
        # open_link's own deadline, stopped at prompts (``auth.Deadline``); and
        # no login timeout of asyncssh's (2 min): sshd's LoginGraceTime decides.
        kwargs.update(connect_timeout=None, login_timeout=0)
    if cfg.port is not None:
        kwargs["port"] = cfg.port
    if cfg.username is not None:
        kwargs["username"] = cfg.username
    locked: list[str] = []
    keys = client_keys(cfg, locked if can_prompt(cfg) or memory.unlocked else None)
    if keys is not None:
        kwargs["client_keys"] = keys
    if cfg.passphrase is not None:  # for the default keys asyncssh loads itself
        kwargs["passphrase"] = cfg.passphrase
    if cfg.agent_path is not None:
        # OpenSSH's "IdentityAgent none": asyncssh's None.
        agent = os.fspath(cfg.agent_path)
        kwargs["agent_path"] = None if agent == "none" else os.path.expanduser(agent)
    password = cfg.password if cfg.password is not None else memory.password
    if password is not None:
        kwargs["password"] = password  # sent first, by asyncssh itself
    elif not can_prompt(cfg):
        # Nothing to answer with: skip the methods rather than fail them.
        kwargs["password_auth"] = False
        kwargs["kbdint_auth"] = False
    if cfg.ssh_config is not None:
        kwargs["config"] = [os.path.expanduser(p) for p in cfg.ssh_config]
    try:
        options = asyncssh.SSHClientConnectionOptions(host=cfg.host, **kwargs)
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
        # A default key (ssh_config's IdentityFile) the passphrase given does not open.
        raise KeyLoadError("(default keys)", str(exc), host=cfg.host, port=cfg.port) from exc
    except (ValueError, asyncssh.Error, OSError) as exc:
        raise ConnectError(
            f"{cfg.host}: invalid SSH options: {exc}", host=cfg.host, port=cfg.port
        ) from exc
    if keys is None and (can_prompt(cfg) or memory.unlocked):
        locked = locked_keys(cfg, options)
    known_files = known_hosts_files(cfg, options)
    port = cfg.port or _port_of(options)
    trusted = load_known_hosts(known_files, host=cfg.host, port=port)
    return options, known_files, trusted, port, locked


def _port_of(options: asyncssh.SSHClientConnectionOptions) -> int:
    """The port ssh_config chose (asyncssh's ``port`` option), else 22."""
    port = getattr(options, "port", None)
    return port if isinstance(port, int) and port > 0 else 22
