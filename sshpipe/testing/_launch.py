"""What every throwaway SSH server launcher needs: keys, a free port, readiness, a clean stop.

``sshd`` and ``proftpd`` start different programs with different configs, but
both generate keys with ssh-keygen, pick a free loopback port (and retry when
another process wins the race for it), wait for an SSH banner, and show the
tail of the server's log when something goes wrong. Those steps live here once.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "HOST",
    "PortTakenError",
    "SSHServerError",
    "WorkFiles",
    "free_port",
    "has_ssh_banner",
    "keygen",
    "log_tail",
    "public_key",
    "quote",
    "read_log",
    "start_on_free_port",
    "stop",
    "wait_until_ready",
]

HOST = "127.0.0.1"

_STOP_TIMEOUT = 5.0
_POLL_INTERVAL = 0.05
# Another process may grab the port between our probe bind and the server's bind.
_BIND_ATTEMPTS = 5
_LOG_TAIL_CHARS = 4000


@dataclass(frozen=True, kw_only=True)
class WorkFiles:
    """The paths every launched server keeps in its work directory (each adds its own)."""

    workdir: Path

    @property
    def host_key(self) -> Path:
        return self.workdir / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.workdir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.workdir / "known_hosts"

    @property
    def root(self) -> Path:
        return self.workdir / "root"


class SSHServerError(RuntimeError):
    """The test server could not be set up, started, or reached."""


class PortTakenError(SSHServerError):
    """The server lost the race for the port we picked; retry with another one."""


def keygen(path: Path, *, comment: str, key_type: str = "ed25519") -> None:
    """A fresh passphrase-less key pair at ``path`` and ``path.pub``."""
    program = shutil.which("ssh-keygen")
    if program is None:
        raise SSHServerError("ssh-keygen not found (install openssh-client)")
    # ssh-keygen prompts before overwriting, which would hang a reused workdir.
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".pub").unlink(missing_ok=True)
    run_checked([program, "-q", "-N", "", "-t", key_type, "-C", comment, "-f", str(path)])


def public_key(private_key: Path) -> str:
    """``type base64`` of a key pair, without the comment."""
    fields = private_key.with_name(private_key.name + ".pub").read_text().split()
    return f"{fields[0]} {fields[1]}"


def run_checked(argv: list[str]) -> str:
    """Run a helper program to completion; its stdout, or SSHServerError with its stderr."""
    result = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SSHServerError(
            f"{argv[0]} failed with exit code {result.returncode}: {result.stderr}"
        )
    return result.stdout


def quote(path: Path) -> str:
    """Quote a path for ssh(d)_config and proftpd.conf, which split unquoted values on spaces."""
    text = str(path)
    if '"' in text or "%" in text:
        # '%' would be expanded as a token by AuthorizedKeysFile and friends.
        raise SSHServerError(f"unsupported character in path: {text!r}")
    return f'"{text}"'


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def start_on_free_port(
    name: str,
    configure: Callable[[int], None],
    spawn: Callable[[], subprocess.Popen[bytes]],
    ready: Callable[[subprocess.Popen[bytes], int], None],
    log_file: Path,
) -> tuple[subprocess.Popen[bytes], int]:
    """Pick a port, write the config for it, start the server, wait for it.

    ``ready`` raises PortTakenError when the server lost the port, and the
    whole sequence runs again on another one.
    """
    for _ in range(_BIND_ATTEMPTS):
        port = free_port()
        configure(port)
        proc = spawn()
        try:
            ready(proc, port)
        except PortTakenError:
            stop(proc)
            continue
        except BaseException:
            stop(proc)
            raise
        return proc, port
    raise SSHServerError(
        f"{name} could not bind a free port in {_BIND_ATTEMPTS} attempts:\n" + log_tail(log_file)
    )


def wait_until_ready(
    name: str,
    proc: subprocess.Popen[bytes],
    port: int,
    log_file: Path,
    *,
    timeout: float,
    listening: Callable[[str], bool],
    port_taken: Callable[[str], bool],
    banner: bytes = b"SSH-2.0-",
) -> None:
    """Block until *our* server serves SSH on ``port``.

    ``listening(log)`` must see the server's own word that it bound the port,
    so that a banner from some process that won a bind race is never mistaken
    for ours; ``port_taken(log)`` recognises a lost race once the server exited.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log = read_log(log_file)
            if port_taken(log):
                raise PortTakenError(log)
            raise SSHServerError(
                f"{name} exited with code {proc.returncode}:\n" + log_tail(log_file)
            )
        if listening(read_log(log_file)) and has_ssh_banner(port, banner):
            return
        time.sleep(_POLL_INTERVAL)
    raise SSHServerError(
        f"{name} did not become ready on {HOST}:{port} within {timeout:g}s:\n" + log_tail(log_file)
    )


def has_ssh_banner(port: int, prefix: bytes = b"SSH-2.0-") -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as sock:
            # Identify ourselves so the server logs a clean disconnect, not a
            # banner-exchange error, for every readiness probe.
            sock.sendall(b"SSH-2.0-sshpipe_probe\r\n")
            return sock.makefile("rb").readline(256).startswith(prefix)
    except OSError:
        return False


def read_log(log_file: Path) -> str:
    try:
        return log_file.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def log_tail(*log_files: Path) -> str:
    """The last few KiB of each log, named; "(empty)" for one with nothing in it."""
    parts = []
    for log_file in log_files:
        log = read_log(log_file)
        text = log[-_LOG_TAIL_CHARS:] if log else "(empty)"
        parts.append(text if len(log_files) == 1 else f"--- {log_file.name}:\n{text}")
    return "\n".join(parts)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=_STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
