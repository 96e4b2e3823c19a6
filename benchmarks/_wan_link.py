"""The way to the server for bench_wan.py and bench_tree.py: the emulator process, the
clients' ssh config and host keys, and the server-side files (local sshd, or an existing
``--server``).

Imported by those scripts (run as files, so this directory is on sys.path).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from _bench_common import (
    PUT_NAME,
    REPO_ROOT,
    _indent,
    _tail,
    remove_output,
    verify_file,
    write_random_file,
)

from sshpipe.testing.sshd import SSHServerError, SSHServerInfo, ssh_config_lines

# As the brief for this benchmark: more requests and bigger blocks than stock,
# nothing else. 261120, not 262144: OpenSSH 9.2 advertises a 261120-byte max
# write in limits@openssh.com and fails uploads with larger blocks.
SFTP_TUNED_ARGS = ("-R", "256", "-B", "261120")
EMULATOR_START_TIMEOUT = 30.0
EMULATOR_STOP_TIMEOUT = 15.0
_LISTENING_RE = re.compile(r"^listening on (\S+):(\d+)\s*$")


class BenchError(RuntimeError):
    """The benchmark's own set-up failed (not a measured transfer)."""


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Link:
    """One link setting: an emulator configuration, or the path to --server."""

    label: str
    rtt_ms: float | None
    rate_mbit: float | None

    @property
    def rate_mb_per_s(self) -> float | None:
        return None if self.rate_mbit is None else self.rate_mbit / 8


@dataclass
class LinkRecord:
    """What the JSON keeps about one setting, emulator CPU included."""

    label: str
    rtt_ms: float | None
    rate_mbit: float | None
    queue_bytes: int | None = None
    emulator_argv: list[str] | None = None
    emulator_port: int | None = None
    # The emulator's own JSON stats line (cpu_seconds, wall_seconds, ...).
    emulator_stats: dict[str, Any] | None = None
    # wait4's view of the same process, as a cross-check.
    emulator_rusage_cpu_s: float | None = None
    emulator_wall_s: float | None = None
    # cpu_seconds / wall_seconds: 0.5 = half of one core while the setting ran.
    emulator_cpu_share: float | None = None
    emulator_exit_code: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class Source:
    size: int
    sha256: str
    local: Path  # read by put
    remote: Path  # read by get; the same file when the server is on this machine


# --------------------------------------------------------------------------- client config


def write_ssh_config(
    path: Path, host: str, port: int, user: str, key: Path, known_hosts: Path
) -> Path:
    """An ssh_config for ``sftp``/``ssh`` that reads nothing of the caller's.

    Host keys are checked strictly against ``known_hosts`` only.
    """
    try:
        lines = ssh_config_lines(
            host=host, port=port, user=user, client_key=key, known_hosts=known_hosts
        )
    except SSHServerError as exc:
        raise BenchError(str(exc)) from exc
    path.write_text("\n".join(lines) + "\n")
    return path


def client_view(
    base: SSHServerInfo, dir_: Path, name: str, *, host: str, port: int, known_hosts: Path
) -> SSHServerInfo:
    """``base`` as the clients must see it at ``host:port`` (e.g. an emulator)."""
    config = write_ssh_config(
        dir_ / f"ssh_config-{name}", host, port, base.user, base.client_key, known_hosts
    )
    return replace(base, host=host, port=port, known_hosts=known_hosts, ssh_config=config)


def known_hosts_for(source: Path, host: str, port: int, dest: Path) -> Path:
    """Re-key ``source``'s host keys to ``host:port`` (the emulator's address).

    The emulator forwards bytes untouched, so the server proves the same key;
    only the name it is filed under changes. Checking stays strict.
    """
    pattern = host if port == 22 else f"[{host}]:{port}"
    entries = []
    for line in source.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and not line.lstrip().startswith("#"):
            entries.append(f"{pattern} {fields[1]} {fields[2]}")
    if not entries:
        raise BenchError(f"no host key in {source}")
    dest.write_text("\n".join(entries) + "\n")
    return dest


# --------------------------------------------------------------------------- server-side files


class LocalServerFiles:
    """The server's root is on this machine: create and check files directly."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, name: str) -> Path:
        return self.root / name

    def create_source(self, size: int, name: str, scratch: Path) -> Source:
        path = self.path(name)
        digest = write_random_file(path, size)
        return Source(size=size, sha256=digest, local=path, remote=path)

    def verify(self, path: Path, size: int, sha256: str) -> str | None:
        return verify_file(path, size, sha256)

    def remove(self, path: Path) -> None:
        remove_output(path)

    def cleanup(self) -> None:
        """The sshd workdir goes with the scratch dir."""


class RemoteServerFiles:
    """The server is elsewhere: ``ssh`` runs mkdir/sha256sum/rm, ``sftp`` uploads."""

    def __init__(self, server: SSHServerInfo, remote_dir: str, logs: Path) -> None:
        self.server = server
        self.dir = Path(remote_dir)
        self.logs = logs
        self.created: list[Path] = []
        self._ssh("mkdir -p -- " + shlex.quote(str(self.dir)))

    def path(self, name: str) -> Path:
        return self.dir / name

    def _ssh(self, command: str) -> str:
        ssh = shutil.which("ssh") or "ssh"
        argv = [ssh, "-F", str(self.server.ssh_config), "-p", str(self.server.port)]
        argv += [self.server.destination(), command]
        result = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise BenchError(
                f"ssh {command!r} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result.stdout

    def create_source(self, size: int, name: str, scratch: Path) -> Source:
        local = scratch / name
        digest = write_random_file(local, size)
        remote = self.path(name)
        batch = self.logs / f"upload-{name}.batch"
        batch.write_text(f'put "{local}" "{remote}"\n')
        sftp = shutil.which("sftp") or "sftp"
        argv = [sftp, "-q", "-b", str(batch), *self.server.sftp_args(), *SFTP_TUNED_ARGS]
        print(f"uploading {name} ({size} bytes) to the server (untimed) ...", flush=True)
        result = subprocess.run(
            [*argv, self.server.destination()],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise BenchError(f"uploading {name} failed: {result.stdout}{result.stderr}")
        self.created.append(remote)
        problem = self.verify(remote, size, digest)
        if problem:
            raise BenchError(f"uploaded {name}: {problem}")
        return Source(size=size, sha256=digest, local=local, remote=remote)

    def verify(self, path: Path, size: int, sha256: str) -> str | None:
        quoted = shlex.quote(str(path))
        try:
            out = self._ssh(f"stat -c %s -- {quoted} && sha256sum -- {quoted}").split()
        except BenchError as exc:
            return f"remote check failed: {exc}"
        if len(out) < 2 or not out[0].isdigit():
            return f"unexpected remote check output {out!r}"
        if int(out[0]) != size:
            return f"output size {out[0]} != source size {size}"
        if out[1] != sha256:
            return f"sha256 mismatch: {out[1]} != {sha256}"
        return None

    def remove(self, path: Path) -> None:
        self._ssh("rm -f -- " + shlex.quote(str(path)))

    def cleanup(self) -> None:
        names = " ".join(shlex.quote(str(p)) for p in [*self.created, self.path(PUT_NAME)])
        # rmdir, not rm -r: only ever delete what we made.
        self._ssh(f"rm -f -- {names}; rmdir -- {shlex.quote(str(self.dir))} 2>/dev/null; true")


ServerFiles = LocalServerFiles | RemoteServerFiles


# --------------------------------------------------------------------------- emulator


class Emulator:
    """``python -m sshpipe.testing.linkemu`` in its own process, so its CPU is its own."""

    def __init__(self, link: Link, target: tuple[str, int], queue: int | None, log: Path) -> None:
        assert link.rtt_ms is not None and link.rate_mbit is not None
        self.argv = [
            sys.executable, "-m", "sshpipe.testing.linkemu",
            "--listen", "127.0.0.1:0",
            "--target", f"{target[0]}:{target[1]}",
            "--rtt", f"{link.rtt_ms:g}",
            "--rate", f"{link.rate_mbit:g}",
        ]  # fmt: skip
        if queue is not None:
            self.argv += ["--queue", str(queue)]
        self.log = log
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._started = 0.0
        self._stdout = b""

    def start(self) -> int:
        with self.log.open("wb") as log:
            self._started = time.perf_counter()
            self._proc = subprocess.Popen(
                self.argv,
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        line = self._read_line(EMULATOR_START_TIMEOUT)
        match = _LISTENING_RE.match(line.decode(errors="replace"))
        if match is None:
            self.kill()
            raise BenchError(
                f"emulator did not say 'listening on HOST:PORT' (got {line!r}); "
                f"log:\n{_indent(_tail(self.log))}"
            )
        self.port = int(match.group(2))
        return self.port

    def _read_line(self, timeout: float) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        buffer = b""
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buffer += chunk
        line, _, rest = buffer.partition(b"\n")
        self._stdout = rest
        return line

    def alive(self) -> bool:
        """Without reaping it: its rusage is collected at stop()."""
        if self._proc is None:
            return False
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, self._proc.pid, flags) is None

    def stop(self, record: LinkRecord) -> None:
        """SIGTERM, collect the stats line and rusage into ``record``."""
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        assert proc.stdout is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + EMULATOR_STOP_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                record.error = f"emulator did not exit within {EMULATOR_STOP_TIMEOUT:g} s"
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                break
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._stdout += chunk
        status, usage = _reap(proc.pid, deadline)
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
        record.emulator_exit_code = proc.returncode
        record.emulator_rusage_cpu_s = usage.ru_utime + usage.ru_stime
        record.emulator_wall_s = time.perf_counter() - self._started
        record.emulator_stats = last_json_object(self._stdout.decode(errors="replace"))
        if record.emulator_stats is None:
            record.error = record.error or (
                f"no JSON stats line from the emulator (exit {proc.returncode}); "
                f"stdout {self._stdout[-500:]!r}"
            )
        elif proc.returncode != 0:
            record.error = record.error or f"emulator exit code {proc.returncode}"
        stats = record.emulator_stats or {}
        cpu, wall = stats.get("cpu_seconds"), stats.get("wall_seconds")
        if isinstance(cpu, int | float) and isinstance(wall, int | float) and wall > 0:
            record.emulator_cpu_share = cpu / wall
        elif record.emulator_wall_s:
            record.emulator_cpu_share = record.emulator_rusage_cpu_s / record.emulator_wall_s

    def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def emulated_view(
    link: Link, srv: SSHServerInfo, queue: int | None, scratch: Path, logs: Path,
    record: LinkRecord,
) -> Iterator[SSHServerInfo]:  # fmt: skip
    """An emulator for ``link`` in front of ``srv``, and ``srv`` as clients see it there.

    Its command, port, stats and CPU land in ``record``; it is stopped on the way out.
    """
    slug = re.sub(r"[^\w.-]+", "_", link.label)
    emulator = Emulator(link, (srv.host, srv.port), queue, logs / f"emu-{slug}.log")
    record.emulator_argv = emulator.argv
    print(f"== {link.label}: starting {shlex.join(emulator.argv)}", flush=True)
    try:
        port = emulator.start()
        record.emulator_port = port
        kh = known_hosts_for(srv.known_hosts, srv.host, port, scratch / f"kh-{port}")
        yield client_view(srv, scratch, str(port), host=srv.host, port=port, known_hosts=kh)
        if not emulator.alive():
            record.error = "the emulator died during the setting"
    finally:
        emulator.stop(record)
        if record.error:
            print(f"emulator: ERROR: {record.error}\n{_indent(_tail(emulator.log))}",
                  file=sys.stderr)  # fmt: skip


def _reap(pid: int, deadline: float) -> tuple[int, Any]:
    """wait4 ``pid``, killing its group once ``deadline`` has passed."""
    while True:
        reaped, status, usage = os.wait4(pid, os.WNOHANG)
        if reaped:
            return status, usage
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return status, usage
        time.sleep(0.05)


def last_json_object(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object, if any."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict):
                    return value
    return None
