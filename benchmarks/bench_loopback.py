#!/usr/bin/env python3
"""Loopback SFTP throughput: sshpipe vs OpenSSH sftp vs plain asyncssh, in one run.

Starts a throwaway OpenSSH sshd on 127.0.0.1, writes a random source file
into its root, then times whole-command get and put transfers for every
client, each in its own process, rotating the client order every
repetition. Every output is checked against the source's sha256.

Run from the repo root:  python benchmarks/bench_loopback.py --size 1G --reps 3
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sshpipe.testing.sshd import SSHServerInfo, openssh_server

# sshpipe (with its sshd launcher) must be installed: scripts/test.sh does pip install -e .
BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

MIB = 1 << 20
GIB = 1 << 30
DIRECTIONS = ("get", "put")
BASELINE = "sftp-tuned"
BUILTIN_CLIENTS = ("sftp-default", "sftp-tuned", "asyncssh", "sshpipe")
# 261120, not 262144: OpenSSH 9.2 advertises a 261120-byte max write in
# limits@openssh.com and fails uploads with larger blocks.
SFTP_TUNED_ARGS = ("-R", "256", "-B", "261120", "-c", "aes128-gcm@openssh.com")
DEFAULT_JSON = BENCH_DIR / "results" / "loopback-latest.json"
SOURCE_NAME = "source.bin"
PUT_NAME = "put-output.bin"
GET_NAME = "get-output.bin"
LOG_TAIL_CHARS = 2000
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": MIB, "g": GIB, "t": 1 << 40}


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Client:
    """One benchmarked command line family; ``kind`` picks the argv builder."""

    name: str
    kind: str  # "sftp", "asyncssh" or "sshpipe"
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Paths:
    """Where the source lives and where each direction writes its output."""

    source: Path  # in the server root; also the local source for put
    get_output: Path  # local
    put_output: Path  # remote, but on this machine, so verifiable directly
    logs: Path


@dataclass
class Sample:
    rep: int
    position: int  # index of this client in the rep's rotated order
    client: str
    direction: str
    argv: list[str]
    wall_s: float = 0.0
    cpu_s: float = 0.0
    maxrss_kib: int = 0
    exit_code: int | None = None
    ok: bool = False
    error: str | None = None
    output_tail: str = ""
    mb_per_s: float = 0.0


@dataclass
class Summary:
    client: str
    direction: str
    n_ok: int
    n_failed: int
    median_mb_per_s: float | None = None
    min_mb_per_s: float | None = None
    max_mb_per_s: float | None = None
    ratio_vs_baseline: float | None = None
    median_cpu_s_per_gib: float | None = None
    median_maxrss_mib: float | None = None


@dataclass
class Measured:
    wall_s: float
    cpu_s: float
    maxrss_kib: int
    exit_code: int
    timed_out: bool


@dataclass
class Run:
    args: argparse.Namespace
    clients: list[Client]
    size: int
    source_sha256: str = ""
    samples: list[Sample] = field(default_factory=list)


# --------------------------------------------------------------------------- CLI


def parse_size(text: str) -> int:
    """``1G``, ``256M``, ``512MiB``, ``4096`` -> bytes (binary multiples)."""
    match = _SIZE_RE.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (try 64M, 1G)")
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return size


def parse_variant(text: str) -> tuple[str, tuple[str, ...]]:
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=ARGS, got {text!r}")
    return name, tuple(shlex.split(rest))


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=parse_size, default=GIB, help="file size (default 1G)")
    parser.add_argument("--reps", type=positive_int, default=3, help="repetitions (default 3)")
    parser.add_argument(
        "--clients",
        action="append",
        help="comma-separated subset of clients (may repeat); default: all, "
        f"i.e. {', '.join(BUILTIN_CLIENTS)} and every --variant",
    )
    parser.add_argument(
        "--sshpipe-arg",
        action="append",
        default=[],
        metavar="ARGS",
        help="extra options for every sshpipe client, shell-split "
        "(e.g. --sshpipe-arg='-R 64'); may repeat",
    )
    parser.add_argument(
        "--variant",
        action="append",
        type=parse_variant,
        default=[],
        metavar="NAME=ARGS",
        help="extra sshpipe client NAME run with ARGS on top of --sshpipe-arg "
        '(e.g. --variant sshpipe-2ch="--channels 2"); may repeat',
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="parent of the scratch dir (default: system temp); the scratch dir is removed",
    )
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"raw results (default {DEFAULT_JSON})"
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="kill a transfer after this many s"
    )
    return parser


def select_clients(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Client]:
    sshpipe_common = tuple(arg for chunk in args.sshpipe_arg for arg in shlex.split(chunk))
    available: dict[str, Client] = {
        "sftp-default": Client("sftp-default", "sftp"),
        "sftp-tuned": Client("sftp-tuned", "sftp", SFTP_TUNED_ARGS),
        "asyncssh": Client("asyncssh", "asyncssh"),
        "sshpipe": Client("sshpipe", "sshpipe", sshpipe_common),
    }
    for name, extra in args.variant:
        if name in available:
            parser.error(f"--variant name {name!r} is already taken")
        available[name] = Client(name, "sshpipe", sshpipe_common + extra)
    if not args.clients:
        return list(available.values())
    wanted = [name.strip() for chunk in args.clients for name in chunk.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in available]
    if unknown:
        parser.error(f"unknown client(s) {unknown}; choose from {list(available)}")
    return [available[name] for name in dict.fromkeys(wanted)]


# --------------------------------------------------------------------------- machine info


def _command_output(argv: Sequence[str]) -> str:
    try:
        result = subprocess.run(
            argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        return f"unavailable ({exc})"
    # ssh -V prints to stderr.
    return (result.stdout + result.stderr).strip()


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    return platform.processor() or "unknown"


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _sshpipe_version() -> str:
    # Others edit sshpipe/ while benchmarks run, so the commit and whether the
    # tree was dirty matter more than the package version.
    version = _package_version("sshpipe")
    head = _command_output(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"])
    dirty = _command_output(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--", "sshpipe"])
    return f"{version} (git {head}{', sshpipe/ modified' if dirty else ''})"


def machine_info() -> dict[str, str]:
    return {
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": _cpu_model(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "openssh": _command_output(["ssh", "-V"]),
        "asyncssh": _package_version("asyncssh"),
        "sshpipe": _sshpipe_version(),
    }


# --------------------------------------------------------------------------- files


def write_random_file(path: Path, size: int) -> str:
    """Write ``size`` random bytes in 1 MiB pieces; return their sha256."""
    digest = hashlib.sha256()
    with path.open("wb") as out:
        remaining = size
        while remaining:
            piece = os.urandom(min(MIB, remaining))
            digest.update(piece)
            out.write(piece)
            remaining -= len(piece)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    with path.open("rb") as src:
        return hashlib.file_digest(src, "sha256").hexdigest()


def remove_output(path: Path) -> None:
    path.unlink(missing_ok=True)
    # Flush other dirty pages now so writeback does not land inside the
    # next client's timed run.
    os.sync()


@contextlib.contextmanager
def scratch_dir(parent: Path | None) -> Iterator[Path]:
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sshpipe-bench-", dir=parent) as tmp:
        yield Path(tmp)


# --------------------------------------------------------------------------- argv builders


def _sftp_quote(path: Path) -> str:
    """Quote a path for an sftp batch file, which splits on whitespace."""
    text = str(path)
    if '"' in text or "\\" in text:
        raise SystemExit(f"unsupported character in path: {text!r}")
    return f'"{text}"'


def sftp_argv(
    client: Client, direction: str, srv: SSHServerInfo, paths: Paths, *, recursive: bool = False
) -> list[str]:
    verb = f"{direction} -r" if recursive else direction
    if direction == "get":
        command = f"{verb} {_sftp_quote(paths.source)} {_sftp_quote(paths.get_output)}"
    else:
        command = f"{verb} {_sftp_quote(paths.source)} {_sftp_quote(paths.put_output)}"
    batch = paths.logs / f"{client.name}-{direction}.batch"
    batch.write_text(command + "\n")
    sftp = shutil.which("sftp") or "sftp"
    return [sftp, "-q", "-b", str(batch), *srv.sftp_args(), *client.extra_args, srv.destination()]


def asyncssh_argv(
    direction: str, srv: SSHServerInfo, paths: Paths, *, recursive: bool = False
) -> list[str]:
    src, dst = (
        (paths.source, paths.get_output) if direction == "get" else (paths.source, paths.put_output)
    )
    return [
        sys.executable,
        str(BENCH_DIR / "_asyncssh_client.py"),
        *(["-r"] if recursive else []),
        direction,
        srv.host,
        str(srv.port),
        srv.user,
        str(srv.client_key),
        str(srv.known_hosts),
        str(src),
        str(dst),
    ]


def sshpipe_argv(client: Client, direction: str, srv: SSHServerInfo, paths: Paths) -> list[str]:
    remote_prefix = f"{srv.user}@{srv.host}:"
    if direction == "get":
        operands = [remote_prefix + str(paths.source), str(paths.get_output)]
    else:
        operands = [str(paths.source), remote_prefix + str(paths.put_output)]
    return [
        sys.executable, "-m", "sshpipe", direction, "-q",
        "-P", str(srv.port),
        "-i", str(srv.client_key),
        "-o", f"UserKnownHostsFile={srv.known_hosts}",
        "-F", "/dev/null",
        *client.extra_args,
        *operands,
    ]  # fmt: skip


def build_argv(client: Client, direction: str, srv: SSHServerInfo, paths: Paths) -> list[str]:
    if client.kind == "sftp":
        return sftp_argv(client, direction, srv, paths)
    if client.kind == "asyncssh":
        return asyncssh_argv(direction, srv, paths)
    return sshpipe_argv(client, direction, srv, paths)


# --------------------------------------------------------------------------- measuring


def _kill_group(pgid: int, fired: threading.Event) -> None:
    fired.set()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run_measured(argv: list[str], log_path: Path, timeout: float) -> Measured:
    """Run ``argv`` to completion and report wall time and the child's rusage.

    wait4's rusage covers the child plus the descendants it reaped (sftp
    reaps its ssh), so CPU is whole-command; ru_maxrss is the largest single
    process in that tree, not the sum.
    """
    with log_path.open("wb") as log:
        start = time.perf_counter()
        # Own session so a timeout can kill sftp's ssh child too.
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        fired = threading.Event()
        timer = threading.Timer(timeout, _kill_group, (proc.pid, fired))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
    exit_code = os.waitstatus_to_exitcode(status)
    # Tell Popen the child is reaped so it never waits on a recycled pid.
    proc.returncode = exit_code
    return Measured(
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        maxrss_kib=usage.ru_maxrss,
        exit_code=exit_code,
        timed_out=fired.is_set(),
    )


def _tail(path: Path) -> str:
    """End of a child's output, minus sftp's echo of its batch commands."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if not line.startswith("sftp> ")]
    return "\n".join(lines)[-LOG_TAIL_CHARS:].strip()


def verify(output: Path, run: Run) -> str | None:
    """None when ``output`` matches the source, else why not."""
    return verify_file(output, run.size, run.source_sha256)


def verify_file(output: Path, size: int, sha256: str) -> str | None:
    """None when ``output`` has ``size`` bytes hashing to ``sha256``, else why not."""
    if not output.exists():
        return f"output {output} does not exist"
    actual_size = output.stat().st_size
    if actual_size != size:
        return f"output size {actual_size} != source size {size}"
    digest = sha256_file(output)
    if digest != sha256:
        return f"sha256 mismatch: {digest} != {sha256}"
    return None


def run_one(
    run: Run, client: Client, direction: str, rep: int, position: int,
    srv: SSHServerInfo, paths: Paths,
) -> Sample:  # fmt: skip
    output = paths.get_output if direction == "get" else paths.put_output
    remove_output(output)
    argv = build_argv(client, direction, srv, paths)
    sample = Sample(rep=rep, position=position, client=client.name, direction=direction, argv=argv)
    log_path = paths.logs / f"{client.name}-{direction}-rep{rep}.log"
    measured = run_measured(argv, log_path, run.args.timeout)
    sample.wall_s = measured.wall_s
    sample.cpu_s = measured.cpu_s
    sample.maxrss_kib = measured.maxrss_kib
    sample.exit_code = measured.exit_code
    sample.output_tail = _tail(log_path)
    if measured.timed_out:
        sample.error = f"killed after the {run.args.timeout:g} s timeout"
    elif measured.exit_code != 0:
        sample.error = f"exit code {measured.exit_code}"
    else:
        sample.error = verify(output, run)
    sample.ok = sample.error is None
    sample.mb_per_s = run.size / 1e6 / measured.wall_s if sample.ok else 0.0
    remove_output(output)
    return sample


def report_sample(sample: Sample, total_reps: int) -> None:
    prefix = f"[rep {sample.rep + 1}/{total_reps}] {sample.client:<16} {sample.direction}"
    if sample.ok:
        print(
            f"{prefix}: {sample.mb_per_s:8.1f} MB/s  {sample.wall_s:7.2f} s  "
            f"cpu {sample.cpu_s:6.2f} s  rss {sample.maxrss_kib / 1024:6.1f} MiB",
            flush=True,
        )
        if sample.output_tail:
            print(f"    (output: {sample.output_tail!r})", flush=True)
        return
    print(f"{prefix}: FAILED: {sample.error}", file=sys.stderr, flush=True)
    print(f"    command: {shlex.join(sample.argv)}", file=sys.stderr)
    if sample.output_tail:
        print("    output:\n" + _indent(sample.output_tail), file=sys.stderr, flush=True)


def _indent(text: str) -> str:
    return "\n".join("      " + line for line in text.splitlines())


def rotated(items: Sequence[Client], shift: int) -> list[Client]:
    # Rotating, not shuffling, so each client sits in each slot equally often
    # when reps is a multiple of the client count.
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


def run_all(run: Run, srv: SSHServerInfo, paths: Paths) -> None:
    for rep in range(run.args.reps):
        for position, client in enumerate(rotated(run.clients, rep)):
            for direction in DIRECTIONS:
                sample = run_one(run, client, direction, rep, position, srv, paths)
                run.samples.append(sample)
                report_sample(sample, run.args.reps)


# --------------------------------------------------------------------------- results


def summarize(run: Run) -> list[Summary]:
    summaries: list[Summary] = []
    for direction in DIRECTIONS:
        for client in run.clients:
            summaries.append(_summarize_one(run, client.name, direction))
    baselines = {
        s.direction: s.median_mb_per_s
        for s in summaries
        if s.client == BASELINE and s.median_mb_per_s
    }
    for summary in summaries:
        base = baselines.get(summary.direction)
        if base and summary.median_mb_per_s is not None:
            summary.ratio_vs_baseline = summary.median_mb_per_s / base
    return summaries


def _summarize_one(run: Run, client: str, direction: str) -> Summary:
    mine = [s for s in run.samples if s.client == client and s.direction == direction]
    good = [s for s in mine if s.ok]
    summary = Summary(client=client, direction=direction, n_ok=len(good),
                      n_failed=len(mine) - len(good))  # fmt: skip
    if not good:
        return summary
    speeds = [s.mb_per_s for s in good]
    summary.median_mb_per_s = statistics.median(speeds)
    summary.min_mb_per_s = min(speeds)
    summary.max_mb_per_s = max(speeds)
    summary.median_cpu_s_per_gib = statistics.median(s.cpu_s / (run.size / GIB) for s in good)
    summary.median_maxrss_mib = statistics.median(s.maxrss_kib / 1024 for s in good)
    return summary


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_table(summaries: list[Summary]) -> str:
    header = (
        f"{'client':<16} {'dir':<3} {'MB/s':>8} {'min–max':>15} "
        f"{'vs ' + BASELINE:>14} {'CPU s/GiB':>9} {'RSS MiB':>8} {'ok/runs':>7}"
    )
    lines = [header, "-" * len(header)]
    for s in summaries:
        spread = "-" if s.min_mb_per_s is None else f"{s.min_mb_per_s:.1f}–{s.max_mb_per_s:.1f}"
        ratio = "-" if s.ratio_vs_baseline is None else f"{s.ratio_vs_baseline:.2f}x"
        lines.append(
            f"{s.client:<16} {s.direction:<3} {_fmt(s.median_mb_per_s, '.1f'):>8} "
            f"{spread:>15} {ratio:>14} {_fmt(s.median_cpu_s_per_gib, '.2f'):>9} "
            f"{_fmt(s.median_maxrss_mib, '.1f'):>8} {s.n_ok}/{s.n_ok + s.n_failed:<5}"
        )
    return "\n".join(lines)


def format_header(machine: dict[str, str], run: Run) -> str:
    lines = [f"{key + ':':<10} {value}" for key, value in machine.items()]
    lines.append(f"{'size:':<10} {run.size} bytes ({run.size / MIB:g} MiB), reps: {run.args.reps}")
    lines.append(f"{'clients:':<10} {', '.join(c.name for c in run.clients)} (rotated per rep)")
    for client in run.clients:
        if client.extra_args:
            lines.append(f"{'':<10} {client.name}: {shlex.join(client.extra_args)}")
    return "\n".join(lines)


def write_json(path: Path, machine: dict[str, str], run: Run, summaries: list[Summary]) -> None:
    document = {
        "benchmark": "loopback",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine,
        "size_bytes": run.size,
        "reps": run.args.reps,
        "source_sha256": run.source_sha256,
        "baseline": BASELINE,
        "clients": [asdict(c) for c in run.clients],
        "samples": [asdict(s) for s in run.samples],
        "summary": [asdict(s) for s in summaries],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


# --------------------------------------------------------------------------- main


def benchmark(run: Run, machine: dict[str, str]) -> None:
    with scratch_dir(run.args.workdir) as scratch:
        local = scratch / "local"
        logs = scratch / "logs"
        local.mkdir()
        logs.mkdir()
        with openssh_server(scratch / "server") as srv:
            paths = Paths(
                source=srv.root / SOURCE_NAME,
                get_output=local / GET_NAME,
                put_output=srv.root / PUT_NAME,
                logs=logs,
            )
            print(f"writing {run.size} random bytes to {paths.source} ...", flush=True)
            run.source_sha256 = write_random_file(paths.source, run.size)
            os.sync()
            print(f"source sha256 {run.source_sha256}\n", flush=True)
            print(format_header(machine, run) + "\n", flush=True)
            run_all(run, srv, paths)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = Run(args=args, clients=select_clients(args, parser), size=args.size)
    if shutil.which("sftp") is None and any(c.kind == "sftp" for c in run.clients):
        parser.error("OpenSSH sftp not found on PATH")
    machine = machine_info()
    try:
        benchmark(run, machine)
    finally:
        # Partial results are still worth keeping after a crash or ^C.
        summaries = summarize(run)
        write_json(args.json, machine, run, summaries)
    print()
    print(format_header(machine, run))
    print()
    print(format_table(summaries))
    print(f"\nraw samples: {args.json}")
    failed = [s for s in run.samples if not s.ok]
    if failed:
        print(f"\n{len(failed)} run(s) FAILED:", file=sys.stderr)
        for s in failed:
            print(f"  rep {s.rep + 1} {s.client} {s.direction}: {s.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
