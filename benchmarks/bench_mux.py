"""Connection reuse's latency: a later command's whole get through a mux master, over a WAN.

For each RTT, a local sshd behind the link emulator: an empty (or --size)
file's ``sshpipe get`` timed from process start to exit, directly and as a
later command of ``-o ControlMaster=auto`` (the master started by a first
command that is not counted), medians of --runs; the target is
3 RTT + 0.35 s for the later command's empty-file get (issue 16).

    python benchmarks/bench_mux.py --rtt 100 300 --runs 5
    python benchmarks/bench_mux.py --rtt 100 --size 64M --runs 3 --rate 1000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sshpipe.core.argtypes import size_at_least  # noqa: E402
from sshpipe.testing.sshd import openssh_server  # noqa: E402

_LISTENING = re.compile(r"listening on (\S+):(\d+)")


@contextlib.contextmanager
def emulated(target_port: int, rtt_ms: float, rate: float | None) -> Iterator[int]:
    argv = [sys.executable, "-m", "sshpipe.testing.linkemu", "--target", f"127.0.0.1:{target_port}"]
    argv += ["--rtt", str(rtt_ms)] + (["--rate", str(rate)] if rate else [])
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout is not None
        match = _LISTENING.search(proc.stdout.readline())
        if match is None:
            raise RuntimeError("the link emulator did not start")
        yield int(match.group(2))
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def timed(argv: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("SSHPIPE_DEBUG", None)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])}...: {done.stderr.strip()}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rtt", type=float, nargs="+", default=[100.0, 300.0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=size_at_least(0), default=0)
    parser.add_argument("--rate", type=float, default=None, help="Mbit/s per direction")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-mux-"))
    sockets = Path(tempfile.mkdtemp(prefix="mux-", dir="/tmp"))
    try:
        with openssh_server(work / "sshd") as info:
            source = info.root / "bench.bin"
            with source.open("wb") as out:
                out.write(os.urandom(args.size))
            for rtt in args.rtt:
                with emulated(info.port, rtt, args.rate) as port:
                    known = work / "known_hosts_link"
                    text = info.known_hosts.read_text()
                    known.write_text(text.replace(f"]:{info.port} ", f"]:{port} "))
                    base = [sys.executable, "-m", "sshpipe", "get", "-q", "-P", str(port)]
                    base += ["-i", str(info.client_key), "-F", "/dev/null"]
                    base += ["-o", f"UserKnownHostsFile={known}"]
                    mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={sockets}/%C"]
                    mux += ["-o", "ControlPersist=60"]
                    remote = f"{info.user}@127.0.0.1:{source}"
                    local = str(work / "got.bin")
                    direct = [timed([*base, remote, local]) for _ in range(args.runs)]
                    first = timed([*base, *mux, remote, local])
                    later, floor = [], []
                    for _ in range(args.runs):  # interleaved: the same load on both
                        later.append(timed([*base, *mux, remote, local]))
                        floor.append(timed([sys.executable, "-m", "sshpipe", "--version"]))
                    assert Path(local).read_bytes() == source.read_bytes()
                    check = [sys.executable, "-m", "sshpipe", "-O", "exit", "-P", str(port)]
                    timed([*check, *mux, f"{info.user}@127.0.0.1"])
                    target = 3 * rtt / 1000 + 0.35
                    print(
                        f"rtt {rtt:g} ms, {args.size} bytes: direct median "
                        f"{statistics.median(direct):.3f} s, first with master {first:.3f} s, "
                        f"later median {statistics.median(later):.3f} s "
                        f"(runs {', '.join(f'{s:.3f}' for s in later)}); "
                        f"'sshpipe --version' median {statistics.median(floor):.3f} s; "
                        f"target 3 RTT + 0.35 s = {target:.3f} s",
                        flush=True,
                    )
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


if __name__ == "__main__":
    main()
