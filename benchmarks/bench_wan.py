#!/usr/bin/env python3
"""SFTP throughput against round-trip time: sshpipe vs OpenSSH sftp vs asyncssh over a slow link.

Starts one throwaway OpenSSH sshd (stock ``MaxSessions 10``) and, for every
(RTT, rate) setting, one user-space link emulator process
(``python -m sshpipe.linkemu``) in front of it. Every client connects to the
emulator's port. For each setting, client and direction it times a 1-byte
transfer (the set-up cost: process start, connect, authentication, open,
close) and a full transfer, rotating the client order every repetition, and
reports the rate net of set-up: size / (median wall - median set-up wall).
Every output is checked against its source's sha256.

With ``--server HOST:PORT`` it skips sshd and the emulator and measures one
existing server over whatever link lies between (e.g. kernel netem, see
docker-compose.yml).

Run from the repo root:  python benchmarks/bench_wan.py            (full matrix)
                         python benchmarks/bench_wan.py --quick    (smoke run)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
# Run as a file: the repo root (for tests.support) is not on sys.path by itself;
# this directory (for bench_loopback) is.
if str(BENCH_DIR.parent) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR.parent))

from bench_loopback import (  # noqa: E402
    GET_NAME,
    GIB,
    MIB,
    PUT_NAME,
    REPO_ROOT,
    Client,
    Paths,
    Sample,
    _indent,
    _tail,
    build_argv,
    machine_info,
    parse_size,
    positive_int,
    remove_output,
    rotated,
    run_measured,
    scratch_dir,
    verify_file,
    write_random_file,
)

from tests.support.openssh import SSHServerInfo, openssh_server  # noqa: E402

RESULTS_DIR = BENCH_DIR / "results"
DEFAULT_JSON = RESULTS_DIR / "wan-latest.json"
QUICK_JSON = RESULTS_DIR / "wan-quick.json"
ALL_CLIENTS = ("sftp-default", "sftp-tuned", "asyncssh", "sshpipe")
ALL_DIRECTIONS = ("get", "put")
RATIO_BASE = "sftp-default"
# As the brief for this benchmark: more requests and bigger blocks than stock,
# nothing else. 261120, not 262144: OpenSSH 9.2 advertises a 261120-byte max
# write in limits@openssh.com and fails uploads with larger blocks.
SFTP_TUNED_ARGS = ("-R", "256", "-B", "261120")
# Stock sshd's MaxSessions: the benchmark is about what a default server allows.
STOCK_MAX_SESSIONS = 10
SETUP_SIZE = 1
DEFAULTS: dict[str, Any] = {
    "rtts": (20.0, 100.0, 300.0),
    "rates": (1000.0, 400.0),
    "size": 256 * MIB,
    "baseline_size": 64 * MIB,
    "reps": 3,
}
QUICK: dict[str, Any] = {
    "rtts": (20.0, 100.0),
    "rates": (1000.0,),
    "size": 64 * MIB,
    "baseline_size": 16 * MIB,
    "reps": 1,
}
EMULATOR_START_TIMEOUT = 30.0
EMULATOR_STOP_TIMEOUT = 15.0
HOST_KEY_CHECK_TIMEOUT = 60.0
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


@dataclass
class WanSample(Sample):
    link: str = ""
    kind: str = "transfer"  # "setup" (1 byte) or "transfer"
    size_bytes: int = 0
    timeout_s: float = 0.0
    # sshpipe --json output, whatever keys it has.
    sshpipe_stats: dict[str, Any] | None = None


@dataclass
class WanSummary:
    link: str
    rtt_ms: float | None
    rate_mbit: float | None
    client: str
    direction: str
    size_bytes: int
    n_ok: int
    n_failed: int
    n_setup_failed: int = 0
    median_wall_s: float | None = None
    median_setup_wall_s: float | None = None
    net_mb_per_s: float | None = None
    net_min_mb_per_s: float | None = None
    net_max_mb_per_s: float | None = None
    gross_mb_per_s: float | None = None
    ratio_vs_base: float | None = None
    pct_of_link: float | None = None
    net_cpu_s_per_gib: float | None = None
    gross_cpu_s_per_gib: float | None = None
    median_maxrss_mib: float | None = None


@dataclass(frozen=True)
class Source:
    size: int
    sha256: str
    local: Path  # read by put
    remote: Path  # read by get; the same file when the server is on this machine


@dataclass
class WanRun:
    args: argparse.Namespace
    clients: list[Client]
    directions: list[str]
    links: list[Link]
    mode: str  # "emulator" or "server"
    links_done: list[LinkRecord] = field(default_factory=list)
    samples: list[WanSample] = field(default_factory=list)
    setup_errors: list[str] = field(default_factory=list)

    def size_for(self, client: Client) -> int:
        return int(self.args.size if client.kind == "sshpipe" else self.args.baseline_size)


# --------------------------------------------------------------------------- CLI


def float_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 20,100,300: {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers: {text!r}")
    return values


def name_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rtts", type=float_list, help="RTTs in ms (default 20,100,300)")
    parser.add_argument("--rates", type=float_list, help="link rates in Mbit/s (default 1000,400)")
    parser.add_argument(
        "--queue", type=parse_size, help="emulator queue in bytes (default: the emulator's own)"
    )
    parser.add_argument("--size", type=parse_size, help="sshpipe's file size (default 256M)")
    parser.add_argument(
        "--baseline-size",
        type=parse_size,
        help="file size for sftp-default, sftp-tuned and asyncssh (default 64M)",
    )
    parser.add_argument("--reps", type=positive_int, help="repetitions (default 3)")
    parser.add_argument(
        "--clients",
        type=name_list,
        default=list(ALL_CLIENTS),
        help=f"comma-separated subset of {','.join(ALL_CLIENTS)}",
    )
    parser.add_argument(
        "--directions", type=name_list, default=list(ALL_DIRECTIONS), help="get,put or one of them"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: rtts 20,100, rate 1000, sizes 64M/16M, 1 rep, results in "
        f"{QUICK_JSON.name} (explicit options still win)",
    )
    parser.add_argument(
        "--max-sessions",
        type=positive_int,
        default=STOCK_MAX_SESSIONS,
        help=f"sshd MaxSessions (default {STOCK_MAX_SESSIONS}, stock sshd's)",
    )
    parser.add_argument(
        "--timeout-base", type=float, default=60.0, help="seconds every transfer may take (60)"
    )
    parser.add_argument(
        "--timeout-rate",
        type=float,
        default=1.0,
        metavar="MB/S",
        help="plus size / this rate: a transfer slower than ~1 MB/s is killed (default 1)",
    )
    parser.add_argument("--workdir", type=Path, help="parent of the scratch dir (default: temp)")
    parser.add_argument(
        "--json",
        type=Path,
        help=f"raw results (default {DEFAULT_JSON}); the table goes next to it as .txt",
    )
    remote = parser.add_argument_group(
        "existing server (no local sshd, no emulator; one link setting)"
    )
    remote.add_argument("--server", type=host_port, metavar="HOST:PORT")
    remote.add_argument("--user", help="login name (default: $USER)")
    remote.add_argument("--identity", type=Path, metavar="KEY", help="private key file")
    remote.add_argument(
        "--known-hosts", type=Path, metavar="FILE", help="known_hosts with the server's key"
    )
    remote.add_argument(
        "--link-label", help='how the link is described, e.g. "netem 100ms 1000mbit"'
    )
    remote.add_argument(
        "--remote-dir",
        default="sshpipe-bench",
        help="scratch directory on the server, relative to the login's home "
        "(default sshpipe-bench; created and emptied of our files at the end)",
    )
    return parser


def resolve_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    preset = QUICK if args.quick else DEFAULTS
    for key in ("size", "baseline_size", "reps"):
        if getattr(args, key) is None:
            setattr(args, key, preset[key])
    if args.json is None:
        args.json = QUICK_JSON if args.quick else DEFAULT_JSON
    unknown = [c for c in args.clients if c not in ALL_CLIENTS]
    if unknown or not args.clients:
        parser.error(f"--clients: choose from {','.join(ALL_CLIENTS)}")
    bad = [d for d in args.directions if d not in ALL_DIRECTIONS]
    if bad or not args.directions:
        parser.error("--directions: get, put or get,put")
    if args.timeout_base <= 0 or args.timeout_rate <= 0:
        parser.error("--timeout-base and --timeout-rate must be positive")
    if args.server is None:
        for key in ("rtts", "rates"):
            if getattr(args, key) is None:
                setattr(args, key, preset[key])
        for flag in ("user", "identity", "known_hosts", "link_label"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag.replace('_', '-')} only goes with --server")
        return
    # --server: one setting; --rtts/--rates, if given, describe the link (for
    # "% of link" and the plot), they do not shape it.
    for key in ("rtts", "rates"):
        value = getattr(args, key)
        if value is not None and len(value) != 1:
            parser.error(f"with --server, --{key} takes one value describing the link")
    if args.identity is None or args.known_hosts is None:
        parser.error("--server needs --identity and --known-hosts (host keys stay checked)")
    if args.queue is not None:
        parser.error("--queue shapes the emulator; with --server there is none")
    for path in (args.identity, args.known_hosts):
        if not path.is_file():
            parser.error(f"no such file: {path}")


def select_clients(args: argparse.Namespace) -> list[Client]:
    available = {
        "sftp-default": Client("sftp-default", "sftp"),
        "sftp-tuned": Client("sftp-tuned", "sftp", SFTP_TUNED_ARGS),
        "asyncssh": Client("asyncssh", "asyncssh"),
        # --json after bench_loopback's -q: the stats object still prints.
        "sshpipe": Client("sshpipe", "sshpipe", ("--json",)),
    }
    return [available[name] for name in dict.fromkeys(args.clients)]


def make_links(args: argparse.Namespace) -> list[Link]:
    if args.server is not None:
        rtt = args.rtts[0] if args.rtts else None
        rate = args.rates[0] if args.rates else None
        described = rtt is not None and rate is not None
        default = f"{rtt:g} ms {rate:g} Mbit/s" if described else "{}:{}".format(*args.server)
        label = args.link_label or default
        return [Link(label=label, rtt_ms=rtt, rate_mbit=rate)]
    return [
        Link(label=f"{rtt:g} ms {rate:g} Mbit/s", rtt_ms=rtt, rate_mbit=rate)
        for rate in args.rates
        for rtt in args.rtts
    ]


# --------------------------------------------------------------------------- client config


def write_ssh_config(
    path: Path, host: str, port: int, user: str, key: Path, known_hosts: Path
) -> Path:
    """An ssh_config for ``sftp``/``ssh`` that reads nothing of the caller's.

    Host keys are checked strictly against ``known_hosts`` only.
    """
    for value in (key, known_hosts):
        if '"' in str(value):
            raise BenchError(f"unsupported character in path: {value}")
    lines = [
        "Host *",
        f"  HostName {host}",
        f"  Port {port}",
        f"  User {user}",
        f'  IdentityFile "{key}"',
        "  IdentitiesOnly yes",
        "  IdentityAgent none",
        f'  UserKnownHostsFile "{known_hosts}"',
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  UpdateHostKeys no",
        "  BatchMode yes",
        "  PreferredAuthentications publickey",
        "  ControlMaster no",
        "  ControlPath none",
        "  LogLevel ERROR",
    ]
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


def make_sources(run: WanRun, files: ServerFiles, scratch: Path) -> dict[int, Source]:
    sizes = sorted({SETUP_SIZE, *(run.size_for(c) for c in run.clients)})
    sources: dict[int, Source] = {}
    for size in sizes:
        print(f"writing {size} random bytes for the source ...", flush=True)
        sources[size] = files.create_source(size, f"source-{size}.bin", scratch)
    os.sync()
    return sources


# --------------------------------------------------------------------------- emulator


class Emulator:
    """``python -m sshpipe.linkemu`` in its own process, so its CPU is its own."""

    def __init__(self, link: Link, target: tuple[str, int], queue: int | None, log: Path) -> None:
        assert link.rtt_ms is not None and link.rate_mbit is not None
        self.argv = [
            sys.executable, "-m", "sshpipe.linkemu",
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


# --------------------------------------------------------------------------- measuring


@dataclass
class Context:
    run: WanRun
    server: SSHServerInfo  # as the clients see it (the emulator's port)
    files: ServerFiles
    sources: dict[int, Source]
    local: Path
    logs: Path


def timeout_for(args: argparse.Namespace, size: int) -> float:
    return float(args.timeout_base + size / (args.timeout_rate * 1e6))


def run_sample(
    ctx: Context, link: Link, client: Client, direction: str, kind: str, rep: int, position: int
) -> WanSample:
    size = SETUP_SIZE if kind == "setup" else ctx.run.size_for(client)
    source = ctx.sources[size]
    get_output = ctx.local / GET_NAME
    put_output = ctx.files.path(PUT_NAME)
    paths = Paths(
        source=source.remote if direction == "get" else source.local,
        get_output=get_output,
        put_output=put_output,
        logs=ctx.logs,
    )
    remove_output(get_output)
    argv = build_argv(client, direction, ctx.server, paths)
    timeout = timeout_for(ctx.run.args, size)
    sample = WanSample(
        rep=rep, position=position, client=client.name, direction=direction, argv=argv,
        link=link.label, kind=kind, size_bytes=size, timeout_s=timeout,
    )  # fmt: skip
    slug = re.sub(r"[^\w.-]+", "_", link.label)
    log_path = ctx.logs / f"{slug}-{client.name}-{direction}-{kind}-rep{rep}.log"
    measured = run_measured(argv, log_path, timeout)
    sample.wall_s = measured.wall_s
    sample.cpu_s = measured.cpu_s
    sample.maxrss_kib = measured.maxrss_kib
    sample.exit_code = measured.exit_code
    if client.kind == "sshpipe":
        sample.sshpipe_stats = last_json_object(_read(log_path))
    sample.output_tail = "\n".join(
        line for line in _tail(log_path).splitlines() if not line.startswith("{")
    )
    if measured.timed_out:
        sample.error = f"killed after the {timeout:g} s timeout"
    elif measured.exit_code != 0:
        sample.error = f"exit code {measured.exit_code}"
    elif direction == "get":
        sample.error = verify_file(get_output, size, source.sha256)
    else:
        sample.error = ctx.files.verify(put_output, size, source.sha256)
    sample.ok = sample.error is None
    sample.mb_per_s = size / 1e6 / measured.wall_s if sample.ok else 0.0
    remove_output(get_output)
    if direction == "put":
        ctx.files.remove(put_output)
    return sample


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def report_sample(sample: WanSample, reps: int) -> None:
    prefix = (
        f"[{sample.link}] [rep {sample.rep + 1}/{reps}] {sample.client:<12} "
        f"{sample.direction} {sample.kind:<8}"
    )
    if not sample.ok:
        print(f"{prefix}: FAILED: {sample.error}", file=sys.stderr, flush=True)
        print(f"    command: {shlex.join(sample.argv)}", file=sys.stderr)
        if sample.output_tail:
            print("    output:\n" + _indent(sample.output_tail), file=sys.stderr, flush=True)
        return
    rate = "" if sample.kind == "setup" else f"{sample.mb_per_s:8.1f} MB/s gross  "
    print(
        f"{prefix}: {rate}{sample.wall_s:7.2f} s  cpu {sample.cpu_s:6.2f} s  "
        f"rss {sample.maxrss_kib / 1024:6.1f} MiB",
        flush=True,
    )
    if sample.sshpipe_stats and sample.kind == "transfer":
        shown = {k: v for k, v in sample.sshpipe_stats.items() if k not in ("source", "target")}
        text = json.dumps(shown, separators=(",", ":"))
        print(f"    sshpipe: {text[:400]}{' ...' if len(text) > 400 else ''}", flush=True)
    if sample.output_tail:
        print(f"    (output: {sample.output_tail!r})", flush=True)


def run_link(ctx: Context, link: Link) -> None:
    run = ctx.run
    for rep in range(run.args.reps):
        for position, client in enumerate(rotated(run.clients, rep)):
            for direction in run.directions:
                # Set-up probe right before the transfer it is subtracted from.
                for kind in ("setup", "transfer"):
                    sample = run_sample(ctx, link, client, direction, kind, rep, position)
                    run.samples.append(sample)
                    report_sample(sample, run.args.reps)


def check_host_keys_enforced(ctx: Context, scratch: Path) -> None:
    """Every client must refuse the server when its key is not in known_hosts.

    Guards the benchmark's own plumbing: a wrong option that turned checking
    off would go unnoticed, since the right key is always offered.
    """
    empty = scratch / "known_hosts-empty"
    empty.write_text("")
    stranger = client_view(
        ctx.server, scratch, "empty", host=ctx.server.host, port=ctx.server.port,
        known_hosts=empty,
    )  # fmt: skip
    source = ctx.sources[SETUP_SIZE]
    output = ctx.local / "hostkey-check.bin"
    paths = Paths(source=source.remote, get_output=output, put_output=output, logs=ctx.logs)
    accepted = []
    for client in ctx.run.clients:
        argv = build_argv(client, "get", stranger, paths)
        log = ctx.logs / f"hostkey-check-{client.name}.log"
        measured = run_measured(argv, log, HOST_KEY_CHECK_TIMEOUT)
        if measured.exit_code == 0 or output.exists():
            accepted.append(client.name)
        output.unlink(missing_ok=True)
    if accepted:
        raise BenchError(f"host key checking is OFF for {accepted}: they accepted an unknown key")
    print(f"host keys: {len(ctx.run.clients)} client(s) refused an unknown key (good)\n")


# --------------------------------------------------------------------------- results


def summarize(run: WanRun) -> list[WanSummary]:
    rows: list[WanSummary] = []
    for link in run.links:
        for direction in run.directions:
            group = [_summarize_one(run, link, c, direction) for c in run.clients]
            base = next((r.net_mb_per_s for r in group if r.client == RATIO_BASE), None)
            for row in group:
                if base and row.net_mb_per_s is not None:
                    row.ratio_vs_base = row.net_mb_per_s / base
            rows.extend(group)
    return rows


def _summarize_one(run: WanRun, link: Link, client: Client, direction: str) -> WanSummary:
    def mine(kind: str) -> list[WanSample]:
        return [
            s
            for s in run.samples
            if s.link == link.label and s.client == client.name
            and s.direction == direction and s.kind == kind
        ]  # fmt: skip

    size = run.size_for(client)
    transfers, setups = mine("transfer"), mine("setup")
    good, good_setup = [s for s in transfers if s.ok], [s for s in setups if s.ok]
    row = WanSummary(
        link=link.label, rtt_ms=link.rtt_ms, rate_mbit=link.rate_mbit, client=client.name,
        direction=direction, size_bytes=size, n_ok=len(good),
        n_failed=len(transfers) - len(good), n_setup_failed=len(setups) - len(good_setup),
    )  # fmt: skip
    if not good:
        return row
    gib = size / GIB
    row.median_wall_s = statistics.median(s.wall_s for s in good)
    row.gross_mb_per_s = size / 1e6 / row.median_wall_s
    row.gross_cpu_s_per_gib = statistics.median(s.cpu_s for s in good) / gib
    row.median_maxrss_mib = statistics.median(s.maxrss_kib / 1024 for s in good)
    if not good_setup:
        return row
    setup_wall = statistics.median(s.wall_s for s in good_setup)
    setup_cpu = statistics.median(s.cpu_s for s in good_setup)
    row.median_setup_wall_s = setup_wall
    net = [size / 1e6 / (s.wall_s - setup_wall) for s in good if s.wall_s > setup_wall]
    if row.median_wall_s > setup_wall:
        row.net_mb_per_s = size / 1e6 / (row.median_wall_s - setup_wall)
        row.net_min_mb_per_s, row.net_max_mb_per_s = min(net), max(net)
        if link.rate_mb_per_s:
            row.pct_of_link = 100 * row.net_mb_per_s / link.rate_mb_per_s
    row.net_cpu_s_per_gib = max(0.0, statistics.median(s.cpu_s for s in good) - setup_cpu) / gib
    return row


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def format_table(rows: list[WanSummary]) -> str:
    header = (
        f"{'link':<22} {'client':<12} {'dir':<3} {'net MB/s':>8} {'min–max':>13} "
        f"{'gross':>7} {'vs ' + RATIO_BASE:>15} {'% link':>6} {'setup s':>7} "
        f"{'CPU s/GiB':>9} {'RSS MiB':>7} {'ok/runs':>7}"
    )
    lines = [header, "-" * len(header)]
    previous = None
    for r in rows:
        if previous is not None and (r.link, r.direction) != previous:
            lines.append("")
        previous = (r.link, r.direction)
        spread = (
            "-"
            if r.net_min_mb_per_s is None
            else f"{r.net_min_mb_per_s:.1f}–{r.net_max_mb_per_s:.1f}"
        )
        runs = f"{r.n_ok}/{r.n_ok + r.n_failed}" + ("*" if r.n_setup_failed else "")
        lines.append(
            f"{r.link:<22} {r.client:<12} {r.direction:<3} {_fmt(r.net_mb_per_s, '.1f'):>8} "
            f"{spread:>13} {_fmt(r.gross_mb_per_s, '.1f'):>7} "
            f"{_fmt(r.ratio_vs_base, '.2f', 'x'):>15} {_fmt(r.pct_of_link, '.0f', '%'):>6} "
            f"{_fmt(r.median_setup_wall_s, '.2f'):>7} {_fmt(r.net_cpu_s_per_gib, '.2f'):>9} "
            f"{_fmt(r.median_maxrss_mib, '.1f'):>7} {runs:>7}"
        )
    if any(r.n_setup_failed for r in rows):
        lines.append("* a 1-byte set-up probe failed too")
    return "\n".join(lines)


def format_links(records: list[LinkRecord]) -> str:
    lines = []
    for rec in records:
        if rec.emulator_argv is None:
            continue
        share = _fmt(None if rec.emulator_cpu_share is None else 100 * rec.emulator_cpu_share,
                     ".1f", "% of one core")  # fmt: skip
        stats = rec.emulator_stats or {}
        cpu, wall = stats.get("cpu_seconds"), stats.get("wall_seconds")
        numbers = isinstance(cpu, int | float) and isinstance(wall, int | float)
        detail = f" (cpu {cpu:.1f} s / wall {wall:.1f} s)" if numbers else ""
        lines.append(
            f"  {rec.label:<22} emulator CPU {share}{detail}"
            + (f"  ERROR: {rec.error}" if rec.error else "")
        )
    return ("emulator (its own process):\n" + "\n".join(lines)) if lines else ""


def format_header(machine: dict[str, str], run: WanRun) -> str:
    args = run.args
    lines = [f"{key + ':':<10} {value}" for key, value in machine.items()]
    if run.mode == "emulator":
        lines.append(
            f"{'links:':<10} user-space emulator (python -m sshpipe.linkemu) in front of one "
            f"sshd with MaxSessions {args.max_sessions}; RTT {_join(args.rtts)} ms × rate "
            f"{_join(args.rates)} Mbit/s, queue {args.queue or 'emulator default'}"
        )
    else:
        lines.append(f"{'links:':<10} existing server {args.server[0]}:{args.server[1]} "
                     f"({run.links[0].label}), no emulator")  # fmt: skip
    baseline_names = [c.name for c in run.clients if c.kind != "sshpipe"]
    sizes = []
    if any(c.kind == "sshpipe" for c in run.clients):
        sizes.append(f"sshpipe {args.size / MIB:g} MiB")
    if baseline_names:
        sizes.append(f"{', '.join(baseline_names)} {args.baseline_size / MIB:g} MiB")
    lines.append(f"{'sizes:':<10} {'; '.join(sizes)}; set-up probe {SETUP_SIZE} byte")
    lines.append(
        f"{'':<10} (OpenSSH and asyncssh are capped by a fixed 2 MiB window from the first "
        f"round trip, so a smaller file reaches their steady state)"
    )
    lines.append(f"{'reps:':<10} {args.reps}, client order rotated per rep; medians")
    lines.append(
        f"{'net MB/s:':<10} size / (median wall - median wall of a 1-byte transfer), 10^6 B/s; "
        f"CPU s/GiB likewise net of the 1-byte run's CPU"
    )
    for client in run.clients:
        if client.extra_args:
            lines.append(f"{'':<10} {client.name}: {shlex.join(client.extra_args)}")
    return "\n".join(lines)


def _join(values: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in values)


def write_results(
    path: Path, machine: dict[str, str], run: WanRun, rows: list[WanSummary], text: str
) -> None:
    args = run.args
    document = {
        "benchmark": "wan",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine,
        "mode": run.mode,
        "settings": {
            "rtts_ms": list(args.rtts) if args.rtts else None,
            "rates_mbit": list(args.rates) if args.rates else None,
            "queue_bytes": args.queue,
            "reps": args.reps,
            "size_bytes": args.size,
            "baseline_size_bytes": args.baseline_size,
            "setup_size_bytes": SETUP_SIZE,
            "max_sessions": args.max_sessions if run.mode == "emulator" else None,
            "server": None if args.server is None else f"{args.server[0]}:{args.server[1]}",
            "ratio_base": RATIO_BASE,
            "directions": run.directions,
            "timeout_base_s": args.timeout_base,
            "timeout_rate_mb_per_s": args.timeout_rate,
            "quick": args.quick,
        },
        "clients": [asdict(c) for c in run.clients],
        "links": [asdict(link) for link in run.links_done],
        "samples": [asdict(s) for s in run.samples],
        "summary": [asdict(r) for r in rows],
        "setup_errors": run.setup_errors,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    path.with_suffix(".txt").write_text(text + "\n")


# --------------------------------------------------------------------------- main


def benchmark_emulated(run: WanRun, scratch: Path, local: Path, logs: Path) -> None:
    args = run.args
    with openssh_server(scratch / "server", max_sessions=args.max_sessions) as srv:
        files = LocalServerFiles(srv.root)
        sources = make_sources(run, files, scratch)
        checked = False
        for link in run.links:
            record = LinkRecord(
                label=link.label, rtt_ms=link.rtt_ms, rate_mbit=link.rate_mbit,
                queue_bytes=args.queue,
            )  # fmt: skip
            run.links_done.append(record)
            slug = re.sub(r"[^\w.-]+", "_", link.label)
            emulator = Emulator(link, (srv.host, srv.port), args.queue, logs / f"emu-{slug}.log")
            record.emulator_argv = emulator.argv
            print(f"== {link.label}: starting {shlex.join(emulator.argv)}", flush=True)
            try:
                port = emulator.start()
                record.emulator_port = port
                kh = known_hosts_for(srv.known_hosts, srv.host, port, scratch / f"kh-{port}")
                view = client_view(srv, scratch, str(port), host=srv.host, port=port,
                                   known_hosts=kh)  # fmt: skip
                ctx = Context(run=run, server=view, files=files, sources=sources,
                              local=local, logs=logs)  # fmt: skip
                if not checked:
                    check_host_keys_enforced(ctx, scratch)
                    checked = True
                run_link(ctx, link)
                if not emulator.alive():
                    record.error = "the emulator died during the setting"
            finally:
                emulator.stop(record)
                if record.error:
                    print(f"emulator: ERROR: {record.error}\n{_indent(_tail(emulator.log))}",
                          file=sys.stderr)  # fmt: skip
            print(format_links([record]) + "\n", flush=True)


def benchmark_server(run: WanRun, scratch: Path, local: Path, logs: Path) -> None:
    args = run.args
    host, port = args.server
    user = args.user or os.environ.get("USER") or "root"
    key, kh = args.identity.resolve(), args.known_hosts.resolve()
    base = SSHServerInfo(
        host=host, port=port, user=user, client_key=key, known_hosts=kh,
        root=Path(args.remote_dir), ssh_config=Path(os.devnull), log_file=Path(os.devnull),
    )  # fmt: skip
    view = client_view(base, scratch, "server", host=host, port=port, known_hosts=kh)
    link = run.links[0]
    run.links_done.append(LinkRecord(label=link.label, rtt_ms=link.rtt_ms,
                                     rate_mbit=link.rate_mbit))  # fmt: skip
    files = RemoteServerFiles(view, args.remote_dir, logs)
    try:
        sources = make_sources(run, files, scratch)
        ctx = Context(run=run, server=view, files=files, sources=sources, local=local, logs=logs)
        check_host_keys_enforced(ctx, scratch)
        print(f"== {link.label}", flush=True)
        run_link(ctx, link)
    finally:
        files.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_args(args, parser)
    clients = select_clients(args)
    if shutil.which("sftp") is None and any(c.kind == "sftp" for c in clients):
        parser.error("OpenSSH sftp not found on PATH")
    if args.server is None and not (REPO_ROOT / "sshpipe" / "linkemu" / "__main__.py").exists():
        parser.error("sshpipe/linkemu is missing: the emulator is needed without --server")
    run = WanRun(
        args=args,
        clients=clients,
        directions=list(dict.fromkeys(args.directions)),
        links=make_links(args),
        mode="emulator" if args.server is None else "server",
    )
    machine = machine_info()
    print(format_header(machine, run) + "\n", flush=True)
    try:
        with scratch_dir(args.workdir) as scratch:
            local, logs = scratch / "local", scratch / "logs"
            local.mkdir()
            logs.mkdir()
            if run.mode == "emulator":
                benchmark_emulated(run, scratch, local, logs)
            else:
                benchmark_server(run, scratch, local, logs)
    except BenchError as exc:
        run.setup_errors.append(str(exc))
        print(f"\nbenchmark set-up FAILED: {exc}", file=sys.stderr)
    finally:
        # Partial results are still worth keeping after a crash or ^C.
        rows = summarize(run)
        text = "\n\n".join(
            part
            for part in (
                format_header(machine, run),
                format_table(rows),
                format_links(run.links_done),
            )
            if part
        )
        write_results(args.json, machine, run, rows, text)
    print("\n" + text)
    print(f"\nraw samples: {args.json}\ntable: {args.json.with_suffix('.txt')}")
    failed = [s for s in run.samples if not s.ok]
    link_errors = [rec for rec in run.links_done if rec.error]
    if failed or link_errors or run.setup_errors:
        print(f"\n{len(failed)} run(s) FAILED:" if failed else "", file=sys.stderr)
        for s in failed:
            print(
                f"  {s.link} rep {s.rep + 1} {s.client} {s.direction} {s.kind}: {s.error}",
                file=sys.stderr,
            )
        for rec in link_errors:
            print(f"  {rec.label}: emulator: {rec.error}", file=sys.stderr)
        for error in run.setup_errors:
            print(f"  set-up: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
