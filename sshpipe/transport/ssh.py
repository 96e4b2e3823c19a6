"""The SSH edge: the only client-side module that imports asyncssh.

It opens connections (ssh_config, keys, known_hosts with OpenSSH's
StrictHostKeyChecking semantics), opens SFTP channels with the receive window
and packet size the engine chose, and translates asyncssh's and the OS's
exceptions into sshpipe's tree (``raise X(...) from exc``).

``SSHClientConnection.start_sftp_client()`` takes no window, so the SFTP
subsystem is started with ``create_session(..., window=, max_pktsize=)`` and
our own SFTP session (``_sftp.py``) speaks the protocol over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from pathlib import Path
from typing import Any

import asyncssh
from asyncssh.constants import MSG_CHANNEL_WINDOW_ADJUST
from asyncssh.packet import UInt32

from .._config import ConnectConfig
from .._errors import AuthenticationError, ChannelRefused, ConnectError, ConnectionBroken, HostKeyMismatch, ProtocolError, SSHPipeError, Stalled, UnknownHostKey
from ..core.codec import Limits
from .sftp import SFTPSession

logger = logging.getLogger("sshpipe.ssh")

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


class _ChannelPipe(asyncssh.SSHClientSession[bytes]):
    """Feeds an SSH channel's bytes to an SFTPSession and writes its requests.

    It also tops the receive window up early. asyncssh grants more window only
    once half of it is used, so the server can have at most half a window in
    flight once the link's delay is longer than its own send time: a download
    ran at half of window / RTT. Granting again after each eighth keeps the
    whole window available, for one small WINDOW_ADJUST per eighth.
    """

    def __init__(self, window: int) -> None:
        self.sftp: SFTPSession | None = None
        self._chan: asyncssh.SSHClientChannel[bytes] | None = None
        self._window = window
        self._top_up_at = window - max(window // 8, 1)
        self._can_top_up = False

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self._chan = chan
        # Private attributes of asyncssh's SSHChannel: use them only if they fit.
        self._can_top_up = isinstance(getattr(chan, "_recv_window", None), int) and callable(
            getattr(chan, "send_packet", None)
        )

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype is None and self.sftp is not None:
            self.sftp.data_received(data)
        chan = self._chan
        if self._can_top_up and chan is not None:
            left: int = chan._recv_window
            if left < self._top_up_at and not chan.is_closing():
                chan.send_packet(MSG_CHANNEL_WINDOW_ADJUST, UInt32(self._window - left))
                chan._recv_window = self._window

    def connection_lost(self, exc: Exception | None) -> None:
        if self.sftp is not None:
            self.sftp.connection_lost(_broken(exc, "SFTP channel closed by the server"))

    @property
    def peer_window(self) -> int:
        """The send window the server granted (0 if asyncssh hides it)."""
        window = getattr(self._chan, "_send_window", 0)
        return window if isinstance(window, int) else 0

    def write(self, data: bytes) -> None:
        assert self._chan is not None
        self._chan.write(data)

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


class _HostKeyPolicy(asyncssh.SSHClient):
    """OpenSSH's StrictHostKeyChecking for keys known_hosts does not already trust.

    asyncssh calls ``validate_host_public_key`` only for a key that matched no
    known_hosts entry. If the host has *other* keys there, the key changed: that
    is refused whatever the policy (OpenSSH refuses it too, even with ``no``
    for anything but password-less logins). Otherwise the host is new: ``yes``
    refuses, ``accept-new`` and ``no`` accept and record it.
    """

    def __init__(self, policy: str, known_hosts: list[Path]) -> None:
        self.policy = policy
        self.known_hosts = known_hosts
        self.refusal: SSHPipeError | None = None

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        label = host if port == 22 else f"[{host}]:{port}"
        if _has_known_keys(self.known_hosts, host, addr, port):
            self.refusal = HostKeyMismatch(
                f"host key for {label} has changed ({key.get_fingerprint()}); "
                f"remove the old entry from {_files(self.known_hosts)} if the change is expected"
            )
            return False
        if self.policy == "yes":
            self.refusal = UnknownHostKey(
                f"host key for {label} is not known ({key.get_fingerprint()}) and "
                "StrictHostKeyChecking=yes; add it to known_hosts or use "
                "-o StrictHostKeyChecking=accept-new"
            )
            return False
        if self.known_hosts:
            _record_host_key(self.known_hosts[0], label, key)
        logger.warning(
            "Permanently added %s (%s) to the list of known hosts", label, key.get_fingerprint()
        )
        return True


def _files(paths: list[Path]) -> str:
    return ", ".join(str(p) for p in paths) or "known_hosts"


def _has_known_keys(paths: list[Path], host: str, addr: str, port: int) -> bool:
    for path in paths:
        try:
            entries = asyncssh.read_known_hosts(str(path))
        except (OSError, ValueError):
            continue
        trusted = entries.match(host, addr, port)[0]
        if trusted:
            return True
    return False


def _record_host_key(path: Path, label: str, key: asyncssh.SSHKey) -> None:
    line = f"{label} {key.export_public_key('openssh').decode().strip()}\n"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with path.open("a", encoding="ascii") as known:
            known.write(line)
    except OSError as exc:
        logger.warning("could not record host key in %s: %s", path, exc)


def _known_hosts_files(
    cfg: ConnectConfig, options: asyncssh.SSHClientConnectionOptions
) -> list[Path]:
    if cfg.known_hosts is not None:
        return [Path(p).expanduser() for p in cfg.known_hosts]
    from_config = options.known_hosts  # set by asyncssh from ssh_config's UserKnownHostsFile
    if isinstance(from_config, list | tuple) and from_config:
        return [Path(str(p)).expanduser() for p in from_config]
    return [Path(DEFAULT_KNOWN_HOSTS).expanduser()]


def _load_known_hosts(paths: list[Path]) -> asyncssh.SSHKnownHosts:
    text = ""
    for path in paths:
        try:
            text += path.read_text(encoding="utf-8", errors="replace") + "\n"
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConnectError(f"cannot read known_hosts file {path}: {exc}") from exc
    try:
        return asyncssh.import_known_hosts(text)
    except (ValueError, asyncssh.KeyImportError) as exc:
        raise ConnectError(f"malformed known_hosts ({_files(paths)}): {exc}") from exc


class _InputBuffer:
    """Stand-in for asyncssh's receive buffer with O(1) consumption from the front.

    asyncssh keeps received bytes in a ``bytes`` object and, for every SSH
    packet, re-slices the rest of it (``self._inpbuf = self._inpbuf[n:]``):
    with 256 KiB socket reads and OpenSSH's ~40 KiB packets every byte was
    copied about eight times, 14% of a download's CPU. A bytearray consumed
    with ``del buf[:n]`` (O(1) in CPython) supports the same operations:
    ``+=``, ``len``, truth, ``buf[:n]``/``buf[a:b]`` (copies, as before) and
    ``buf[n:]`` (consumes).
    """

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = bytearray(data)

    def __len__(self) -> int:
        return len(self._data)

    def __bool__(self) -> bool:
        return bool(self._data)

    def __iadd__(self, data: bytes) -> _InputBuffer:
        self._data += data
        return self

    def __getitem__(self, key: slice) -> Any:
        if key.stop is None and key.step is None:
            del self._data[: key.start or 0]
            return self
        return bytes(memoryview(self._data)[key])

    def find(self, sub: bytes, *args: int) -> int:
        return self._data.find(sub, *args)


def _coalesce_sends(conn: asyncssh.SSHClientConnection) -> None:
    """Hand the packets of one loop iteration to the transport in one ``writelines``.

    asyncssh writes every SSH packet separately (one send syscall each); an
    upload is cut into 32 KiB packets by OpenSSH's max packet size, so that is
    ~33,000 syscalls per GiB. Batching per loop iteration keeps order and adds
    no measurable latency.
    """
    loop = asyncio.get_running_loop()
    pending: list[bytes] = []

    def flush() -> None:
        transport = getattr(conn, "_transport", None)
        if transport is not None and not transport.is_closing():
            transport.writelines(pending)
        pending.clear()

    def send(data: bytes) -> None:
        if not pending:
            loop.call_soon(flush)
        pending.append(data)

    conn._send = send  # type: ignore[method-assign]


def _tune_connection(conn: asyncssh.SSHClientConnection) -> None:
    """Install the receive buffer and send batching above, if asyncssh still fits them."""
    if isinstance(getattr(conn, "_inpbuf", None), bytes):
        conn._inpbuf = _InputBuffer(conn._inpbuf)  # type: ignore[assignment]
    if callable(getattr(conn, "_send", None)):
        _coalesce_sends(conn)


SHELL_OPEN_TIMEOUT = 30.0
_DONE = "__sshpipe_done__"
_READ_CHUNK = 64 * 1024


async def _read_bounded(stream: asyncssh.SSHReader[str], max_output: int, what: str) -> str:
    """All of ``stream`` up to its end, refusing past ``max_output`` characters.

    Raises:
        ProtocolError: the server printed more than the command can (an
            endless or hostile output), instead of our memory growing with it.
    """
    parts: list[str] = []
    held = 0
    while chunk := await stream.read(_READ_CHUNK):
        held += len(chunk)
        if held > max_output:
            raise ProtocolError(f"{what} printed more than {max_output} bytes, refused")
        parts.append(chunk)
    return "".join(parts)


class RemoteShell:
    """Commands written to one ``sh`` on the server: one round trip each.

    ``conn.run`` opens a channel, execs, and waits for the exit status and the
    close: about six round trips (130 ms at 20 ms). A command written to a
    shell that is already there answers in one. Commands run one at a time;
    each is followed by a marker line carrying its exit status (its token is
    this shell's own, so no output can pass for it by accident).
    """

    def __init__(self, process: asyncssh.SSHClientProcess[str], label: str) -> None:
        self._process = process
        self._label = label  # the connection's, for messages
        self._lock = asyncio.Lock()
        self._gone = False
        self._marker = f"{_DONE}{secrets.token_hex(8)}"

    def __repr__(self) -> str:
        return f"<RemoteShell gone={self._gone}>"

    async def run(self, command: str, *, within: float, max_output: int) -> tuple[int, str] | None:
        """(exit status, stdout) of ``command``, or None once the shell is gone.

        Raises:
            ProtocolError: the output passed ``max_output`` (the shell is closed).
        """
        async with self._lock:
            if self._gone:
                return None
            try:
                # stdin is ours (the next commands): the command gets /dev/null.
                self._process.stdin.write(
                    f"{{ {command}\n}} </dev/null; s=$?; echo; echo {self._marker} $s\n"
                )
                async with asyncio.timeout(within):  # not wait_for: it can eat a cancel
                    return await self._result(max_output + len(self._marker) + 16)
            except ProtocolError:
                self.close()
                raise
            except (asyncssh.Error, OSError, ValueError, IndexError, TimeoutError) as exc:
                logger.debug("shell failed: %s", type(exc).__name__)
            self.close()  # EOF, garbage or silence: the shell is no use any more
            return None

    async def _result(self, max_output: int) -> tuple[int, str] | None:
        """Read up to this command's marker line; None if the shell ends first."""
        stdout = self._process.stdout
        end = "\n" + self._marker + " "
        text = ""
        while (found := text.find(end)) < 0 or "\n" not in text[found + len(end) :]:
            chunk = await stdout.read(_READ_CHUNK)
            if not chunk:
                return None
            text += chunk
            if len(text) > max_output:
                raise ProtocolError(
                    f"{self._label}: a command in the shell printed more than {max_output} "
                    "bytes, refused"
                )
        status = int(text[found + len(end) :].split("\n", 1)[0])
        return status, text[:found]  # less the echo's newline

    def close(self) -> None:
        self._gone = True
        self._process.close()


# Commands and their output as text whose undecodable bytes stay themselves
# (surrogates), as remote paths do (``_codec.wire``).
_TEXT: dict[str, Any] = {"encoding": "utf-8", "errors": "surrogateescape"}


class SSHLink:
    """One authenticated SSH connection, able to open SFTP channels."""

    def __init__(self, conn: asyncssh.SSHClientConnection, label: str) -> None:
        self._conn = conn
        self.label = label
        self.channels_opened = 0

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
        pipe = _ChannelPipe(window)
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
        self.channels_opened += 1
        sftp = SFTPSession(
            pipe,
            name=f"{self.label}#{self.channels_opened}",
            max_reply=max_reply,
            stall_timeout=stall_timeout,
        )
        sftp.recv_window = window
        sftp.server_version = str(self._conn.get_extra_info("server_version", ""))
        sftp.peer = self.label
        sftp.run_command = self.run
        sftp.open_shell = self.open_shell
        # Read before INIT is sent: nothing has used the server's grant yet.
        sftp.peer_window = pipe.peer_window
        pipe.sftp = sftp
        try:
            await sftp.start(known_limits=known_limits)
        except BaseException:
            sftp.close()
            raise
        return sftp

    @property
    def closed(self) -> bool:
        """The connection is gone (dropped, reset, or closed by us)."""
        return bool(self._conn.is_closed())

    def abort(self) -> None:
        """Drop the connection now (it stalled): every channel on it fails at once."""
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
                    command, stdin=asyncssh.DEVNULL, stderr=asyncssh.DEVNULL, **_TEXT
                )
                what = f"{self.label}: {command.split()[0]}"
                stdout = await _read_bounded(process.stdout, max_output, what)
                status = (await process.wait(check=False)).exit_status
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            logger.debug("%s: no command run (%s)", self.label, type(exc).__name__)
            return None
        finally:
            if process is not None:
                process.close()
        return (status if status is not None else -1), stdout

    async def open_shell(self) -> RemoteShell | None:
        """A ``sh`` kept open for many commands, or None if the server runs none."""
        try:
            async with asyncio.timeout(SHELL_OPEN_TIMEOUT):
                process = await self._conn.create_process("sh", stderr=asyncssh.DEVNULL, **_TEXT)
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            logger.debug("%s: no shell (%s)", self.label, type(exc).__name__)
            return None
        return RemoteShell(process, self.label)

    async def close(self) -> None:
        self._conn.close()
        # Closing a connection that already broke is not an error.
        with contextlib.suppress(asyncssh.Error, OSError):
            await self._conn.wait_closed()


async def open_link(cfg: ConnectConfig) -> SSHLink:
    """Connect and authenticate.

    Raises:
        UsageError: for options asyncssh rejects.
        ConnectError: DNS failure, refused, timeout, handshake failure.
        AuthenticationError, UnknownHostKey, HostKeyMismatch.
    """
    kwargs: dict[str, Any] = {
        "encryption_algs": list(cfg.ciphers),
        "compression_algs": ["zlib@openssh.com", "none"] if cfg.compression else ["none"],
        "connect_timeout": cfg.connect_timeout,
    }
    if cfg.port is not None:
        kwargs["port"] = cfg.port
    if cfg.username is not None:
        kwargs["username"] = cfg.username
    if cfg.identity_files:
        kwargs["client_keys"] = [os.path.expanduser(p) for p in cfg.identity_files]
    if cfg.password is not None:
        kwargs["password"] = cfg.password
    else:
        # No password given: never let asyncssh prompt or hang on one.
        kwargs["password_auth"] = False
        kwargs["kbdint_auth"] = False
    if cfg.ssh_config is not None:
        kwargs["config"] = [os.path.expanduser(p) for p in cfg.ssh_config]
    try:
        options = asyncssh.SSHClientConnectionOptions(host=cfg.host, **kwargs)
    except (ValueError, asyncssh.Error, OSError) as exc:
        raise ConnectError(f"{cfg.host}: invalid SSH options: {exc}") from exc

    known_files = _known_hosts_files(cfg, options)
    policy = _HostKeyPolicy(cfg.strict_host_key_checking, known_files)
    label = f"{cfg.host}:{cfg.port or 22}"
    try:
        conn = await asyncssh.connect(
            cfg.host,
            options=options,
            known_hosts=_load_known_hosts(known_files),
            client_factory=lambda: policy,
        )
    except asyncssh.HostKeyNotVerifiable as exc:
        raise (policy.refusal or UnknownHostKey(f"{label}: {exc.reason}")) from exc
    except asyncssh.PermissionDenied as exc:
        raise AuthenticationError(f"{label}: authentication failed: {exc.reason}") from exc
    except asyncssh.KeyImportError as exc:
        raise AuthenticationError(f"{label}: cannot load identity: {exc}") from exc
    except socket.gaierror as exc:
        raise ConnectError(f"{cfg.host}: cannot resolve host name: {exc.strerror}") from exc
    except ConnectionRefusedError as exc:
        raise ConnectError(f"{label}: connection refused") from exc
    except TimeoutError as exc:
        raise ConnectError(f"{label}: timed out after {cfg.connect_timeout:g} s") from exc
    except asyncssh.DisconnectError as exc:
        raise ConnectError(f"{label}: server disconnected: {exc.reason}") from exc
    except (asyncssh.Error, OSError) as exc:
        raise ConnectError(f"{label}: {exc}") from exc
    _tune_connection(conn)
    port = conn.get_extra_info("peername", (cfg.host, cfg.port or 22))[1]
    return SSHLink(conn, f"{conn.get_extra_info('username')}@{cfg.host}:{port}")
