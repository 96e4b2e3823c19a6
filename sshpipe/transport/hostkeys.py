"""Host keys the OpenSSH way: known_hosts files read and recorded, StrictHostKeyChecking.

``open_link`` hands asyncssh the keys known_hosts trusts and this policy for
every key it does not: a changed key is refused whatever the policy, a new
host is refused or recorded as ``StrictHostKeyChecking`` says. A
``known_hosts`` callable instead judges every key alone (no file is read).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import asyncssh

from ..core.config import ConnectConfig
from ..core.errors import ConnectError, HostKeyError, HostKeyMismatch, SSHPipeError, UnknownHostKey
from ..core.keys import HostKey, HostKeyCheck
from .asyncssh_patches import auth_method, prepare_handshake, watch_key_exchange
from .keys import host_key_of

logger = logging.getLogger("sshpipe.ssh")

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


class HostKeyPolicy(asyncssh.SSHClient):
    """OpenSSH's StrictHostKeyChecking for keys known_hosts does not already trust.

    asyncssh calls ``validate_host_public_key`` only for a key that matched no
    known_hosts entry. If the host has *other* keys there, the key changed: that
    is refused whatever the policy (OpenSSH refuses it too, even with ``no``
    for anything but password-less logins). Otherwise the host is new: ``yes``
    refuses, ``accept-new`` and ``no`` accept and record it. With ``check``
    (a known_hosts callable) there are no files: it is asked about every key.

    Args:
        host: the host as the user named it, for the errors and ``check``.
    """

    def __init__(
        self,
        policy: str,
        known_hosts: list[Path],
        *,
        host: str,
        check: HostKeyCheck | None = None,
    ) -> None:
        self.policy = policy
        self.known_hosts = known_hosts
        self.host = host
        self.check = check
        self.refusal: SSHPipeError | None = None
        self.handshake_patches: frozenset[str] = frozenset()
        # When the TCP connection was made, the log-in began and it ended
        # (time.monotonic): the connection's set-up phases.
        self.connected_at = self.auth_began_at = self.auth_ended_at = 0.0
        self.lost: Exception | None = None  # see ``connection_lost``
        # The last line the server sent before its version (sshd past its
        # MaxStartups: "Exceeded MaxStartups"), decoded as a name is.
        self.said_before_version: str | None = None
        # What asyncssh negotiated and does not tell: "kex", "auth" (for -v).
        self.negotiated: dict[str, str] = {}
        self._conn: asyncssh.SSHClientConnection | None = None

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        self.connected_at = time.monotonic()
        # Before the key exchange: the log-in's round trips are cut from here.
        self.handshake_patches = frozenset(prepare_handshake(conn, heard=self._heard))
        self._conn = conn
        self.negotiated = watch_key_exchange(conn)

    def _heard(self, line: bytes) -> None:
        self.said_before_version = line.decode("utf-8", "surrogateescape")

    def begin_auth(self, username: str) -> None:
        self.auth_began_at = time.monotonic()

    def connection_lost(self, exc: Exception | None) -> None:
        # Why asyncssh ended the connection (None: closed on purpose): a channel
        # open it fails meanwhile says only "SSH connection closed".
        self.lost = exc

    def auth_completed(self) -> None:
        self.auth_ended_at = time.monotonic()
        method = auth_method(self._conn) if self._conn is not None else None
        if method is not None:
            self.negotiated["auth"] = method

    def validate_host_public_key(
        self, host: str, addr: str, port: int, key: asyncssh.SSHKey
    ) -> bool:
        label = host if port == 22 else f"[{host}]:{port}"
        seen = host_key_of(key)
        shown = f"{seen.type} {seen.fingerprint}"
        if self.check is not None:
            return self._checked(self.check, port, seen, f"host key for {label} ({shown})")
        if _has_known_keys(self.known_hosts, host, addr, port):
            self._refuse(
                HostKeyMismatch,
                f"host key for {label} has changed ({shown}); remove the old entry "
                f"from {_files(self.known_hosts)} if the change is expected",
                port,
                seen,
            )
            return False
        if self.policy == "yes":
            self._refuse(
                UnknownHostKey,
                f"host key for {label} is not known ({shown}); add it to "
                f"{_files(self.known_hosts)}, or allow new hosts "
                "(strict_host_key_checking='accept-new' in the API, "
                "-o StrictHostKeyChecking=accept-new on the command line)",
                port,
                seen,
            )
            return False
        if self.known_hosts:
            _record_host_key(self.known_hosts[0], label, key)
        logger.warning(
            "Permanently added %s (%s) to the list of known hosts", label, key.get_fingerprint()
        )
        return True

    def _checked(self, check: HostKeyCheck, port: int, seen: HostKey, what: str) -> bool:
        """The known_hosts callable's verdict: a true one trusts the key."""
        try:
            trusted = check(self.host, port, seen)
        except Exception as exc:  # the user's code: its error becomes the refusal's cause
            self._refuse(
                HostKeyError,
                f"{what}: the known_hosts callable raised {type(exc).__name__}: {exc}",
                port,
                seen,
            ).__cause__ = exc
            return False
        if trusted:
            return True
        self._refuse(HostKeyError, f"{what} refused by the known_hosts callable", port, seen)
        return False

    def _refuse(
        self, kind: type[HostKeyError], message: str, port: int, seen: HostKey
    ) -> HostKeyError:
        refusal = kind(
            message, host=self.host, port=port, fingerprint=seen.fingerprint, key_type=seen.type
        )
        self.refusal = refusal
        return refusal


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


def known_hosts_files(
    cfg: ConnectConfig, options: asyncssh.SSHClientConnectionOptions
) -> list[Path]:
    """The known_hosts files to trust: the configured ones, ssh_config's, or the default
    (none for a known_hosts callable)."""
    if callable(cfg.known_hosts):
        return []
    if cfg.known_hosts is not None:
        return [Path(p).expanduser() for p in cfg.known_hosts]
    from_config = options.known_hosts  # set by asyncssh from ssh_config's UserKnownHostsFile
    if isinstance(from_config, list | tuple) and from_config:
        return [Path(str(p)).expanduser() for p in from_config]
    return [Path(DEFAULT_KNOWN_HOSTS).expanduser()]


def load_known_hosts(
    paths: list[Path], *, host: str | None = None, port: int | None = None
) -> asyncssh.SSHKnownHosts:
    """Every entry of ``paths`` (missing files are empty).

    Args:
        host, port: the connection's, named by the error.

    Raises:
        ConnectError: a file cannot be read or is malformed.
    """
    text = ""
    for path in paths:
        try:
            text += path.read_text(encoding="utf-8", errors="replace") + "\n"
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConnectError(
                f"cannot read known_hosts file {path}: {exc}", host=host, port=port
            ) from exc
    try:
        return asyncssh.import_known_hosts(text)
    except (ValueError, asyncssh.KeyImportError) as exc:
        raise ConnectError(
            f"malformed known_hosts ({_files(paths)}): {exc}", host=host, port=port
        ) from exc
