"""What every benchmark script shares: clients and their command lines, one measured
process (wall, CPU, peak RSS through ``os.wait4``), random sources and their sha256
check, the machine description.

Imported by bench_loopback.py, bench_wan.py and bench_tree.py (run as files, so this
directory is on sys.path); sshpipe itself must be installed (``pip install -e .``).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import hashlib
import importlib.metadata
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sshpipe.testing.sshd import SSHServerInfo

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent

MIB = 1 << 20
GIB = 1 << 30
DIRECTIONS = ("get", "put")
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
    # sshpipe run from this other checkout (another commit, compared in the same run).
    checkout: str = ""


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
class Measured:
    wall_s: float
    cpu_s: float
    maxrss_kib: int
    exit_code: int
    timed_out: bool


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


def size_list(text: str) -> tuple[int, ...]:
    """``8M,64M,1G`` -> sizes in bytes, in the order given, without repeats."""
    sizes = tuple(dict.fromkeys(parse_size(part) for part in text.split(",") if part.strip()))
    if not sizes:
        raise argparse.ArgumentTypeError(f"expected sizes like 8M,64M: {text!r}")
    return sizes


def size_label(size: int) -> str:
    """1 B, 12 MiB, 1 GiB: how a size is named in tables."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


def _parse_variant(text: str) -> tuple[str, tuple[str, ...]]:
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=ARGS, got {text!r}")
    return name, tuple(shlex.split(rest))


def add_variant_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--variant NAME=ARGS``, repeatable: an extra sshpipe client NAME run with
    ARGS (shell-split); ``args.variant`` is a list of (NAME, ARGS). ``what``
    ends the help: where the client's other arguments come from."""
    parser.add_argument(
        "--variant",
        action="append",
        type=_parse_variant,
        default=[],
        metavar="NAME=ARGS",
        help=f"extra sshpipe client NAME run with ARGS, {what} "
        '(e.g. --variant sshpipe:no="-o Compression=no"); may repeat',
    )


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return value


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


def compile_bytecode(root: Path = REPO_ROOT) -> str:
    """Write sshpipe's bytecode (``__pycache__``) before any timed run, as ``pip install`` does.

    Where PYTHONDONTWRITEBYTECODE is set (this VM's environment sets it) a
    checkout's modules are never cached, so every measured process compiled
    sshpipe's ~110 modules again: 75 ms of CPU of a 1-byte get's 0.28 s, which
    no installed copy pays. Called by ``machine_info``, which every benchmark
    calls first; a module edited later is compiled in the run as before.
    """
    quiet = compileall.compile_dir(root / "sshpipe", quiet=1)
    return "compiled ahead" if quiet else "compiled ahead, with errors"


def machine_info() -> dict[str, str]:
    return {
        "bytecode": compile_bytecode(),
        # The machine is shared: what else ran as this run began.
        "load average at the start": " ".join(f"{load:.2f}" for load in os.getloadavg()),
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


def scp_argv(
    client: Client, direction: str, srv: SSHServerInfo, src: Path, dst: Path, *, recursive: bool
) -> list[str]:
    """scp ``src`` to the new name ``dst`` (the remote one a path on ``srv``)."""
    remote = f"{srv.destination()}:"
    operands = (
        [remote + str(src), str(dst)] if direction == "get" else [str(src), remote + str(dst)]
    )
    scp = shutil.which("scp") or "scp"
    flags = ["-q", *(["-r"] if recursive else [])]
    return [scp, *flags, *client.extra_args, *srv.sftp_args(), *operands]


def sshpipe_argv(client: Client, direction: str, srv: SSHServerInfo, paths: Paths) -> list[str]:
    remote_prefix = f"{srv.user}@{srv.host}:"
    if direction == "get":
        operands = [remote_prefix + str(paths.source), str(paths.get_output)]
    else:
        operands = [str(paths.source), remote_prefix + str(paths.put_output)]
    python = [sys.executable]
    if client.checkout:
        # -P: the other checkout's sshpipe, not the one in the cwd (this checkout).
        python = ["env", f"PYTHONPATH={client.checkout}", sys.executable, "-P"]
    return [
        *python, "-m", "sshpipe", direction, "-q",
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


def _indent(text: str) -> str:
    return "\n".join("      " + line for line in text.splitlines())


def print_failure(prefix: str, status: str, error: str | None, argv: Sequence[str],
                  output_tail: str) -> None:  # fmt: skip
    """A failed sample on stderr: what failed, the command to rerun it, its output's end."""
    print(f"{prefix}: {status}: {error}", file=sys.stderr, flush=True)
    print(f"    command: {shlex.join(argv)}", file=sys.stderr)
    if output_tail:
        print("    output:\n" + _indent(output_tail), file=sys.stderr, flush=True)


def rotated(items: Sequence[Client], shift: int) -> list[Client]:
    # Rotating, not shuffling, so each client sits in each slot equally often
    # when reps is a multiple of the client count.
    shift %= len(items)
    return [*items[shift:], *items[:shift]]
