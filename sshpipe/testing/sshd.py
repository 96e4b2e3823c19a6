"""Launch a throwaway, unprivileged-friendly OpenSSH server for tests and benchmarks.

The server listens on 127.0.0.1 only, accepts a single freshly generated
ed25519 user key for the current user, and serves SFTP via ``internal-sftp``.
It works both as root and as an ordinary user: a non-root ``sshd`` can only
authenticate the user it runs as, which is exactly the user we authorise.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "SSHServerError",
    "SSHServerInfo",
    "openssh_server",
    "sshd_path",
]

HOST = "127.0.0.1"

# Debian's root sshd refuses to start without its privilege-separation chroot.
_PRIVSEP_DIR = Path("/run/sshd")
_SHADOW = Path("/etc/shadow")
_SSHD_FALLBACKS = (Path("/usr/sbin/sshd"), Path("/usr/local/sbin/sshd"))
_START_TIMEOUT = 10.0
_STOP_TIMEOUT = 5.0
_POLL_INTERVAL = 0.05
# Another process may grab the port between our probe bind and sshd's bind.
_BIND_ATTEMPTS = 5
_LOG_TAIL_CHARS = 4000


class SSHServerError(RuntimeError):
    """The test sshd could not be set up, started, or reached."""


class _PortTakenError(SSHServerError):
    """sshd lost the race for the port we picked; retry with another one."""


@dataclass(frozen=True, kw_only=True)
class SSHServerInfo:
    """Everything a client needs to reach the test server."""

    host: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    root: Path
    ssh_config: Path
    log_file: Path

    def sftp_args(self) -> list[str]:
        """Arguments for OpenSSH ``sftp`` placed before the destination."""
        return ["-F", str(self.ssh_config), "-P", str(self.port)]

    def destination(self) -> str:
        return f"{self.user}@{self.host}"


@dataclass(frozen=True, kw_only=True)
class _Files:
    """Paths inside the server's work directory."""

    workdir: Path

    @property
    def host_key(self) -> Path:
        return self.workdir / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.workdir / "id_ed25519"

    @property
    def authorized_keys(self) -> Path:
        return self.workdir / "authorized_keys"

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

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

    @property
    def root(self) -> Path:
        return self.workdir / "root"


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
    workdir: Path, *, extra_config: Sequence[str] = (), max_sessions: int = 64
) -> Iterator[SSHServerInfo]:
    """Run sshd for the duration of the ``with`` block.

    ``extra_config`` lines are appended to sshd_config. sshd keeps the first
    value it reads for a keyword, so they can add keywords or ``Match``
    blocks but cannot override the launcher's own settings.
    ``max_sessions`` is sshd's ``MaxSessions`` (channels per connection): 64
    lets tests open many channels; stock sshd allows 10.
    """
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
    proc, port = _start_with_retries(sshd, files, user, extra_config, max_sessions)
    try:
        yield SSHServerInfo(
            host=HOST,
            port=port,
            user=user,
            client_key=files.client_key,
            known_hosts=files.known_hosts,
            root=files.root,
            ssh_config=files.ssh_config,
            log_file=files.log_file,
        )
    finally:
        _stop(proc)


def _current_user() -> str:
    # The effective uid decides whom a non-root sshd can log in, not $USER.
    return pwd.getpwuid(os.geteuid()).pw_name


def _prepare_files(files: _Files) -> None:
    files.workdir.mkdir(parents=True, exist_ok=True)
    files.root.mkdir(exist_ok=True)
    _keygen(files.host_key, comment="sshpipe-test-host")
    _keygen(files.client_key, comment="sshpipe-test-client")
    files.authorized_keys.write_text(_public_key(files.client_key) + "\n")


def _keygen(path: Path, *, comment: str) -> None:
    keygen = shutil.which("ssh-keygen")
    if keygen is None:
        raise SSHServerError("ssh-keygen not found (install openssh-client)")
    # ssh-keygen prompts before overwriting, which would hang a reused workdir.
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".pub").unlink(missing_ok=True)
    _run([keygen, "-q", "-N", "", "-t", "ed25519", "-C", comment, "-f", str(path)])


def _public_key(private_key: Path) -> str:
    """``type base64`` of a key pair, without the comment."""
    fields = private_key.with_name(private_key.name + ".pub").read_text().split()
    return f"{fields[0]} {fields[1]}"


def _run(argv: list[str]) -> None:
    result = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SSHServerError(
            f"{argv[0]} failed with exit code {result.returncode}: {result.stderr}"
        )


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


def _quote(path: Path) -> str:
    """Quote a path for ssh(d)_config, which split unquoted values on spaces."""
    text = str(path)
    if '"' in text or "%" in text:
        # '%' would be expanded as a token by AuthorizedKeysFile and friends.
        raise SSHServerError(f"unsupported character in path: {text!r}")
    return f'"{text}"'


def _sshd_config_lines(
    files: _Files, port: int, user: str, extra_config: Sequence[str], max_sessions: int
) -> list[str]:
    return [
        f"ListenAddress {HOST}",
        f"Port {port}",
        f"HostKey {_quote(files.host_key)}",
        f"PidFile {_quote(files.pid_file)}",
        f"AuthorizedKeysFile {_quote(files.authorized_keys)}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        # PAM needs root and tends to break in containers (pam_loginuid).
        "UsePAM no",
        # Only consulted when running as root; harmless otherwise.
        "PermitRootLogin prohibit-password",
        # The workdir lives in a temp tree whose permissions we do not control.
        "StrictModes no",
        "Subsystem sftp internal-sftp",
        # VERBOSE so auth failures are explained and readiness is visible.
        "LogLevel VERBOSE",
        "MaxStartups 100",
        f"MaxSessions {max_sessions}",
        "UseDNS no",
        "PrintMotd no",
        f"AllowUsers {user}",
        *extra_config,
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
        f"  IdentityFile {_quote(client_key)}",
        "  IdentitiesOnly yes",
        # An ssh-agent in the caller's environment must not add keys.
        "  IdentityAgent none",
        f"  UserKnownHostsFile {_quote(known_hosts)}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  UpdateHostKeys no",
        "  BatchMode yes",
        "  PreferredAuthentications publickey",
        "  ControlMaster no",
        "  ControlPath none",
        "  LogLevel ERROR",
    ]


def _write_port_dependent_files(
    files: _Files, port: int, user: str, extra_config: Sequence[str], max_sessions: int
) -> None:
    lines = _sshd_config_lines(files, port, user, extra_config, max_sessions)
    files.sshd_config.write_text("\n".join(lines) + "\n")
    lines = ssh_config_lines(
        host=HOST, port=port, user=user, client_key=files.client_key, known_hosts=files.known_hosts
    )
    files.ssh_config.write_text("\n".join(lines) + "\n")
    host_entry = f"[{HOST}]:{port} {_public_key(files.host_key)}\n"
    files.known_hosts.write_text(host_entry)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _start_with_retries(
    sshd: Path, files: _Files, user: str, extra_config: Sequence[str], max_sessions: int
) -> tuple[subprocess.Popen[bytes], int]:
    for _ in range(_BIND_ATTEMPTS):
        port = _free_port()
        _write_port_dependent_files(files, port, user, extra_config, max_sessions)
        proc = _spawn(sshd, files)
        try:
            _wait_until_ready(proc, port, files.log_file)
        except _PortTakenError:
            _stop(proc)
            continue
        except BaseException:
            _stop(proc)
            raise
        return proc, port
    raise SSHServerError(
        f"sshd could not bind a free port in {_BIND_ATTEMPTS} attempts:\n"
        + _log_tail(files.log_file)
    )


def _spawn(sshd: Path, files: _Files) -> subprocess.Popen[bytes]:
    # sshd re-execs itself per connection and insists on an absolute path.
    argv = [str(sshd), "-D", "-e", "-f", str(files.sshd_config)]
    with files.log_file.open("wb") as log:
        # Popen dups the descriptor, so closing ours right away is fine.
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)


def _wait_until_ready(proc: subprocess.Popen[bytes], port: int, log_file: Path) -> None:
    """Block until *our* sshd serves SSH on ``port``.

    The "Server listening" log line proves that this sshd owns the port, so a
    banner from some process that won a bind race is never mistaken for ours.
    """
    listening = f"Server listening on {HOST} port {port}."
    deadline = time.monotonic() + _START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _raise_exited(proc, log_file)
        if listening in _read_log(log_file) and _has_ssh_banner(port):
            return
        time.sleep(_POLL_INTERVAL)
    raise SSHServerError(
        f"sshd did not become ready on {HOST}:{port} within {_START_TIMEOUT:g}s:\n"
        + _log_tail(log_file)
    )


def _raise_exited(proc: subprocess.Popen[bytes], log_file: Path) -> None:
    log = _read_log(log_file)
    if "Address already in use" in log:
        raise _PortTakenError(log)
    raise SSHServerError(f"sshd exited with code {proc.returncode}:\n" + _log_tail(log_file))


def _has_ssh_banner(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as sock:
            # Identify ourselves so sshd logs a clean disconnect, not a
            # banner-exchange error, for every readiness probe.
            sock.sendall(b"SSH-2.0-sshpipe_probe\r\n")
            return sock.makefile("rb").readline(256).startswith(b"SSH-2.0-")
    except OSError:
        return False


def _read_log(log_file: Path) -> str:
    try:
        return log_file.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _log_tail(log_file: Path) -> str:
    log = _read_log(log_file)
    return log[-_LOG_TAIL_CHARS:] if log else "(sshd log is empty)"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
