"""Launch a throwaway, unprivileged-friendly OpenSSH server for tests and benchmarks.

The server listens on 127.0.0.1 only, accepts a single freshly generated
ed25519 user key for the current user, and serves SFTP via ``internal-sftp`` (or
another server named by ``sftp_subsystem``, such as Green End's).
It works both as root and as an ordinary user: a non-root ``sshd`` can only
authenticate the user it runs as, which is exactly the user we authorise.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._launch import (
    HOST,
    SSHServerError,
    WorkFiles,
    keygen,
    public_key,
    quote,
    start_on_free_port,
    stop,
    wait_until_ready,
)

__all__ = [
    "HOST",
    "RestartableSSHD",
    "SSHServerError",
    "SSHServerInfo",
    "openssh_server",
    "restartable_openssh_server",
    "sshd_path",
]

# Debian's root sshd refuses to start without its privilege-separation chroot.
_PRIVSEP_DIR = Path("/run/sshd")
_SHADOW = Path("/etc/shadow")
_SSHD_FALLBACKS = (Path("/usr/sbin/sshd"), Path("/usr/local/sbin/sshd"))
_START_TIMEOUT = 10.0


@dataclass(frozen=True, kw_only=True)
class SSHServerInfo:
    """Everything a client needs to reach the test server.

    ``authorized_keys`` holds ``client_key``'s public half; sshd reads it at
    each log-in, so a test may write other keys there (with options such as
    ``command=``) while the server runs.
    """

    host: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    root: Path
    ssh_config: Path
    log_file: Path
    authorized_keys: Path

    def sftp_args(self) -> list[str]:
        """Arguments for OpenSSH ``sftp`` placed before the destination."""
        return ["-F", str(self.ssh_config), "-P", str(self.port)]

    def destination(self) -> str:
        return f"{self.user}@{self.host}"


@dataclass(frozen=True, kw_only=True)
class _Settings:
    """What the caller chose for sshd_config."""

    user: str
    extra_config: tuple[str, ...]
    max_sessions: int
    max_startups: str
    sftp_subsystem: str


@dataclass(frozen=True, kw_only=True)
class _Files(WorkFiles):
    """sshd's own paths inside its work directory."""

    @property
    def authorized_keys(self) -> Path:
        return self.workdir / "authorized_keys"

    @property
    def sshd_config(self) -> Path:
        return self.workdir / "sshd_config"

    @property
    def ssh_config(self) -> Path:
        return self.workdir / "ssh_config"

    @property
    def pid_file(self) -> Path:
        return self.workdir / "sshd.pid"

    @property
    def log_file(self) -> Path:
        return self.workdir / "sshd.log"


def sshd_path() -> Path | None:
    """Absolute path of ``sshd``, or None when it is not installed.

    ``/usr/sbin`` is often missing from an ordinary user's PATH, hence the
    fallbacks.
    """
    found = shutil.which("sshd")
    if found is not None:
        return Path(found).absolute()
    for candidate in _SSHD_FALLBACKS:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@contextlib.contextmanager
def openssh_server(
    workdir: Path,
    *,
    extra_config: Sequence[str] = (),
    max_sessions: int = 64,
    max_startups: str = "100",
    sftp_subsystem: str = "internal-sftp",
) -> Iterator[SSHServerInfo]:
    """Run sshd for the duration of the ``with`` block.

    ``extra_config`` lines are appended to sshd_config. sshd keeps the first
    value it reads for a keyword, so they can add keywords or ``Match``
    blocks but cannot override the launcher's own settings.
    ``max_sessions`` is sshd's ``MaxSessions`` (channels per connection): 64
    lets tests open many channels; stock sshd allows 10.
    ``max_startups`` is sshd's ``MaxStartups``: 100 lets many tests log in at
    once; stock sshd's ``10:30:100`` drops unauthenticated connections at
    random past 10 (what a throttled server does to a burst of clients).
    ``sftp_subsystem`` is the command of ``Subsystem sftp``: another SFTP
    server (Green End's ``/usr/libexec/gesftpserver``) behind the same sshd.
    """
    with restartable_openssh_server(
        workdir,
        extra_config=extra_config,
        max_sessions=max_sessions,
        max_startups=max_startups,
        sftp_subsystem=sftp_subsystem,
    ) as server:
        yield server.info


class RestartableSSHD:
    """An sshd a fault test kills outright and starts again, as a crashed server is.

    ``kill`` is SIGKILL of the listener and of every session it forked (each
    client's connection ends as the kernel closes it); ``start`` runs it again
    on the same port with the same configuration, and the same host key
    unless ``new_host_key`` (a reinstalled server: a client that knew the old
    one must refuse it). ``info`` stays true across restarts but for the key.
    """

    def __init__(
        self, sshd: Path, files: _Files, info: SSHServerInfo, proc: subprocess.Popen[bytes]
    ) -> None:
        self.info = info
        self._sshd = sshd
        self._files = files
        self._proc: subprocess.Popen[bytes] | None = proc

    def __repr__(self) -> str:
        state = "down" if self._proc is None else f"pid {self._proc.pid}"
        return f"<RestartableSSHD {self.info.host}:{self.info.port} {state}>"

    @property
    def running(self) -> bool:
        return self._proc is not None

    def host_key_line(self, port: int | None = None) -> str:
        """A known_hosts line for the host key it has now, under ``port`` (default its own)."""
        return f"[{self.info.host}]:{port or self.info.port} {public_key(self._files.host_key)}\n"

    def kill(self) -> None:
        """SIGKILL the listener and every process it forked; safe when it is down."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        doomed = [proc.pid, *_descendants(proc.pid)]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()

    def close(self) -> None:
        """Stop the listener as ``openssh_server`` does (its sessions end with their clients)."""
        if self._proc is not None:
            proc, self._proc = self._proc, None
            stop(proc)

    def start(self, *, new_host_key: bool = False) -> None:
        """Run it again on its port (the one it had), the host key renewed if asked."""
        if self._proc is not None:
            raise SSHServerError("sshd is running already")
        if new_host_key:
            keygen(self._files.host_key, comment="sshpipe-test-host")
        proc = _spawn(self._sshd, self._files)
        try:
            _wait_until_ready(proc, self.info.port, self._files.log_file)
        except BaseException:
            stop(proc)
            raise
        self._proc = proc


@contextlib.contextmanager
def restartable_openssh_server(
    workdir: Path,
    *,
    extra_config: Sequence[str] = (),
    max_sessions: int = 64,
    max_startups: str = "100",
    sftp_subsystem: str = "internal-sftp",
) -> Iterator[RestartableSSHD]:
    """``openssh_server``, handing out the server to kill and start again."""
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
    sshd = sshd_path()
    if sshd is None:
        raise SSHServerError("sshd not found (install openssh-server)")
    files = _Files(workdir=workdir.resolve())
    user = _current_user()
    _prepare_files(files)
    if os.geteuid() == 0:
        _ensure_privsep_dir()
        _ensure_not_locked(user)
    settings = _Settings(
        user=user,
        extra_config=tuple(extra_config),
        max_sessions=max_sessions,
        max_startups=max_startups,
        sftp_subsystem=sftp_subsystem,
    )
    proc, port = start_on_free_port(
        "sshd",
        lambda port: _write_port_dependent_files(files, port, settings),
        lambda: _spawn(sshd, files),
        lambda proc, port: _wait_until_ready(proc, port, files.log_file),
        files.log_file,
    )
    info = SSHServerInfo(
        host=HOST,
        port=port,
        user=user,
        client_key=files.client_key,
        known_hosts=files.known_hosts,
        root=files.root,
        ssh_config=files.ssh_config,
        log_file=files.log_file,
        authorized_keys=files.authorized_keys,
    )
    server = RestartableSSHD(sshd, files, info, proc)
    try:
        yield server
    finally:
        server.close()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first found, then theirs), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat_file:
                # "pid (comm) state ppid ...": comm may hold spaces, so after the last ')'.
                fields = stat_file.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    waiting = [pid]
    while waiting:
        below = children.get(waiting.pop(), [])
        found += below
        waiting += below
    return found


def _current_user() -> str:
    # The effective uid decides whom a non-root sshd can log in, not $USER.
    return pwd.getpwuid(os.geteuid()).pw_name


def _prepare_files(files: _Files) -> None:
    files.workdir.mkdir(parents=True, exist_ok=True)
    files.root.mkdir(exist_ok=True)
    keygen(files.host_key, comment="sshpipe-test-host")
    keygen(files.client_key, comment="sshpipe-test-client")
    files.authorized_keys.write_text(public_key(files.client_key) + "\n")


def _ensure_privsep_dir() -> None:
    # sshd rejects a privsep dir that is group/world writable, so pin 0755.
    if not _PRIVSEP_DIR.is_dir():
        _PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        _PRIVSEP_DIR.chmod(0o755)


def _ensure_not_locked(user: str) -> None:
    """Fail early instead of with an opaque "Permission denied" later.

    Without PAM, a root sshd refuses accounts whose shadow hash starts with
    '!' even for key logins; a non-root sshd cannot read /etc/shadow and so
    never notices.
    """
    try:
        lines = _SHADOW.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        name, _, rest = line.partition(":")
        if name == user and rest.startswith("!"):
            raise SSHServerError(
                f"account {user!r} is locked ('!' in {_SHADOW}) and sshd runs "
                f"with UsePAM no, so it would reject every login; unlock it "
                f"with: usermod -p '*' {user}"
            )


def _sshd_config_lines(files: _Files, port: int, settings: _Settings) -> list[str]:
    return [
        f"ListenAddress {HOST}",
        f"Port {port}",
        f"HostKey {quote(files.host_key)}",
        f"PidFile {quote(files.pid_file)}",
        f"AuthorizedKeysFile {quote(files.authorized_keys)}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        # PAM needs root and tends to break in containers (pam_loginuid).
        "UsePAM no",
        # Only consulted when running as root; harmless otherwise.
        "PermitRootLogin prohibit-password",
        # The workdir lives in a temp tree whose permissions we do not control.
        "StrictModes no",
        f"Subsystem sftp {settings.sftp_subsystem}",
        # VERBOSE so auth failures are explained and readiness is visible.
        "LogLevel VERBOSE",
        f"MaxStartups {settings.max_startups}",
        f"MaxSessions {settings.max_sessions}",
        "UseDNS no",
        "PrintMotd no",
        f"AllowUsers {settings.user}",
        *settings.extra_config,
    ]


def ssh_config_lines(
    *, host: str, port: int, user: str, client_key: Path, known_hosts: Path
) -> list[str]:
    """An ssh_config for ``ssh``/``sftp`` that reads nothing of the caller's.

    Host keys are checked strictly against ``known_hosts`` alone.
    """
    return [
        "Host *",
        f"  HostName {host}",
        f"  Port {port}",
        f"  User {user}",
        f"  IdentityFile {quote(client_key)}",
        "  IdentitiesOnly yes",
        # An ssh-agent in the caller's environment must not add keys.
        "  IdentityAgent none",
        f"  UserKnownHostsFile {quote(known_hosts)}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  UpdateHostKeys no",
        "  BatchMode yes",
        "  PreferredAuthentications publickey",
        "  ControlMaster no",
        "  ControlPath none",
        "  LogLevel ERROR",
    ]


def _write_port_dependent_files(files: _Files, port: int, settings: _Settings) -> None:
    lines = _sshd_config_lines(files, port, settings)
    files.sshd_config.write_text("\n".join(lines) + "\n")
    lines = ssh_config_lines(
        host=HOST,
        port=port,
        user=settings.user,
        client_key=files.client_key,
        known_hosts=files.known_hosts,
    )
    files.ssh_config.write_text("\n".join(lines) + "\n")
    host_entry = f"[{HOST}]:{port} {public_key(files.host_key)}\n"
    files.known_hosts.write_text(host_entry)


def _spawn(sshd: Path, files: _Files) -> subprocess.Popen[bytes]:
    # sshd re-execs itself per connection and insists on an absolute path.
    argv = [str(sshd), "-D", "-e", "-f", str(files.sshd_config)]
    with files.log_file.open("wb") as log:
        # Popen dups the descriptor, so closing ours right away is fine.
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)


def _wait_until_ready(proc: subprocess.Popen[bytes], port: int, log_file: Path) -> None:
    # "Server listening" proves that this sshd, not a bind-race winner, owns the port.
    listening = f"Server listening on {HOST} port {port}."
    wait_until_ready(
        "sshd",
        proc,
        port,
        log_file,
        timeout=_START_TIMEOUT,
        listening=lambda log: listening in log,
        port_taken=lambda log: "Address already in use" in log,
    )
