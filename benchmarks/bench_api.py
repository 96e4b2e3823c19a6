#!/usr/bin/env python3
"""The async API in one process: memory of many gets, cancel latency, event-loop stalls.

Each subcommand starts its own throwaway OpenSSH sshd on 127.0.0.1 (stock
``MaxSessions 10``), keeps its files in a scratch dir under ``--workdir``,
prints a markdown table headed by the machine, and writes ``OUT/results.md``
and ``OUT/results.json``:

- ``concurrent``: peak RSS growth (``VmHWM``) of ``--transfers`` concurrent
  ``client.get`` (or ``--direction put``: ``client.put``) calls on one client,
  every file checked by sha256.
- ``cancel``: through the link emulator (``--rtt`` ms, ``--rate`` Mbit/s), the
  time from an ``asyncio.timeout`` deadline to the exception for stream, get,
  put, tree get and tree put; then the pool's settling, what is left (sshd's
  open files under the root, temp files, local leftovers) and whether the next
  transfer is byte-identical.
- ``stall``: the largest gap of a 10 ms ticker during ``connect()`` and a first
  get, each run in a fresh interpreter (the first connect imports asyncssh).

Run from the repo root:  python benchmarks/bench_api.py concurrent --transfers 200 --size 4M
                         python benchmarks/bench_api.py concurrent --direction put --size 1M
                         python benchmarks/bench_api.py cancel --rounds 2
                         python benchmarks/bench_api.py stall --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from _bench_common import (
    BENCH_DIR,
    MIB,
    machine_info,
    parse_size,
    positive_int,
    scratch_dir,
    sha256_file,
    size_label,
    write_random_file,
)

import sshpipe
from sshpipe.testing.sshd import SSHServerInfo, openssh_server

STOCK_MAX_SESSIONS = 10  # what a stock sshd allows, as in bench_loopback.py
TICK = 0.01  # the stall ticker's period, seconds
Row = dict[str, Any]


# --------------------------------------------------------------------------- shared


def connect(
    srv: SSHServerInfo,
    *,
    port: int | None = None,
    known_hosts: Path | None = None,
    config: sshpipe.TransferConfig | None = None,
) -> sshpipe.Client:
    return sshpipe.connect(
        srv.destination(),
        port=port or srv.port,
        identity_files=[str(srv.client_key)],
        known_hosts=[str(known_hosts or srv.known_hosts)],
        ssh_config=[],
        config=config,
    )


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def report(args: argparse.Namespace, title: str, markdown: str, document: dict[str, Any]) -> None:
    machine = machine_info()
    head = f"## {title}\n\n" + "; ".join(f"{key} {value}" for key, value in machine.items())
    text = f"{head}\n\n{markdown}"
    print("\n" + text)
    out: Path = args.out or BENCH_DIR / "results" / f"api-{args.command}"
    out.mkdir(parents=True, exist_ok=True)
    document = {"benchmark": f"api-{args.command}", "machine": machine,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **document}  # fmt: skip
    (out / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "results.md").write_text(text + "\n")
    print(f"\nresults: {out / 'results.md'}, {out / 'results.json'}")


# --------------------------------------------------------------------------- concurrent


def rss_kib(field: str) -> int:
    """``field`` (VmRSS, VmHWM) of this process, KiB, from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak_rss() -> int:
    """Start the peak (VmHWM) afresh at what the process holds now; that, in KiB.

    Writing 5 to clear_refs resets the high-water mark (Linux >= 4.0), so the
    growth measured is the transfers' alone, not the files written before them.
    """
    Path("/proc/self/clear_refs").write_text("5")
    return rss_kib("VmRSS")


def concurrent(args: argparse.Namespace) -> int:
    # Loaded before the baseline, so the growth is the transfers', not the
    # import of asyncssh and cryptography (which connect() would do lazily).
    import sshpipe.client.client

    with (
        scratch_dir(args.workdir) as scratch,
        openssh_server(scratch / "sshd", max_sessions=args.max_sessions) as srv,
    ):
        here, there = scratch / "local", srv.root / "remote"
        src, dst = (there, here) if args.direction == "get" else (here, there)
        src.mkdir()
        dst.mkdir()
        # Written in 1 MiB pieces, so the baseline never held a file's worth.
        digests = [write_random_file(src / f"f{i}.bin", args.size) for i in range(args.transfers)]
        config = sshpipe.TransferConfig(max_bytes_in_flight=args.in_flight)
        before = reset_peak_rss()
        seconds, connections = asyncio.run(
            _concurrent(srv, src, dst, args.transfers, args.direction, config)
        )
        peak = rss_kib("VmHWM")
        bad = [i for i, d in enumerate(digests) if sha256_file(dst / f"f{i}.bin") != d]
    row = {"direction": args.direction, "transfers": args.transfers, "size_bytes": args.size,
           "in_flight_bytes": args.in_flight, "baseline_mib": before / 1024,
           "peak_mib": peak / 1024, "growth_mib": (peak - before) / 1024, "seconds": seconds,
           "connections": connections, "verified": args.transfers - len(bad)}  # fmt: skip
    markdown = table(
        ["direction", "transfers", "size", "budget", "baseline MiB", "peak MiB", "growth MiB",
         "s", "connections", "sha256 ok"],
        [[args.direction, args.transfers, size_label(args.size), size_label(args.in_flight),
          f"{row['baseline_mib']:.1f}", f"{row['peak_mib']:.1f}", f"{row['growth_mib']:.1f}",
          f"{seconds:.2f}", connections, f"{row['verified']}/{args.transfers}"]],
    )  # fmt: skip
    markdown += (
        "\n\nOne run; growth = VmHWM after the transfers minus VmRSS before connect(), the "
        f"peak reset there (clear_refs); sshd MaxSessions {args.max_sessions}."
    )
    report(args, f"Concurrent {args.direction}s on one client: peak RSS", markdown, {"row": row})
    return 1 if bad else 0


async def _concurrent(
    srv: SSHServerInfo,
    src: Path,
    dst: Path,
    n: int,
    direction: str,
    config: sshpipe.TransferConfig,
) -> tuple[float, int]:
    started = time.monotonic()
    async with connect(srv, config=config) as client:
        move = client.get if direction == "get" else client.put
        async with asyncio.timeout(600), asyncio.TaskGroup() as group:
            for i in range(n):
                group.create_task(move(str(src / f"f{i}.bin"), str(dst / f"f{i}.bin")))
        connections = client.connections
    return time.monotonic() - started, connections


# --------------------------------------------------------------------------- cancel

OPS = ("stream", "get", "put", "tree-get", "tree-put")


def sshd_open_files(root: Path) -> int:
    """Most descriptors under ``root`` any one sshd process holds now (internal-sftp
    runs inside sshd), read from /proc; processes we may not read count 0."""
    prefix, most = str(root.resolve()) + os.sep, 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "sshd":
                continue
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        most = max(most, sum(link.startswith(prefix) for link in links))
    return most


def temp_names(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if "sshpipe-" in p.name or ".partial" in p.name)


async def wait_settled(client: sshpipe.Client, within: float) -> int:
    """Until the channels a cancel gave back owe no reply; how many had to be closed.

    No public API exposes this wait (``aclose`` does it with a short deadline),
    so this is the one place that reaches into the pool's private ``_settling``.
    """
    pool = client._pool
    return 0 if pool is None else await pool._settling.wait(within)


def cancel(args: argparse.Namespace) -> int:
    with (
        scratch_dir(args.workdir) as scratch,
        openssh_server(scratch / "sshd", max_sessions=args.max_sessions) as srv,
    ):
        samples = asyncio.run(_cancel(args, srv, scratch))
    rows, failed = [], False
    for op in OPS:
        mine = [s for s in samples if s["op"] == op]
        late = [s["late_ms"] for s in mine if s["late_ms"] is not None]
        clean = all(not s["server_fds"] and not s["remote_temps"] and not s["local_leftovers"]
                    and not s["closed_unsettled"] and s["next_ok"] for s in mine)  # fmt: skip
        failed |= not clean or len(late) < len(mine)
        rows.append([op, f"{median(late):.0f}", f"{max(late, default=float('nan')):.0f}",
                     f"{median([s['settle_ms'] for s in mine]):.0f}",
                     max(s["server_fds"] for s in mine),
                     sum(len(s["remote_temps"]) + len(s["local_leftovers"]) for s in mine),
                     "yes" if all(s["next_ok"] for s in mine) else "NO",
                     f"{len(late)}/{len(mine)}"])  # fmt: skip
    close = samples[-1]
    markdown = table(
        ["op", "late ms (median)", "late ms (max)", "settle ms (median)", "sshd fds left",
         "temps/leftovers", "next byte-identical", "timed out"], rows,
    )  # fmt: skip
    markdown += (
        f"\n\nDeadline {args.deadline:g} s; link {args.rtt:g} ms RTT, {args.rate:g} Mbit/s "
        f"(link emulator) in front of sshd (MaxSessions {args.max_sessions}); {args.rounds} "
        f"round(s). late = exception time - deadline; settle = wait for the channels given "
        f"back to owe no reply. aclose: {close['aclose_ms']:.0f} ms, left_temps "
        f"{close['left_temps']}."
    )
    report(args, "Cancel: deadline to exception, and what is left", markdown,
           {"deadline_s": args.deadline, "rtt_ms": args.rtt, "rate_mbit": args.rate,
            "rounds": args.rounds, "samples": samples})  # fmt: skip
    return 1 if failed or close["left_temps"] else 0


async def _cancel(args: argparse.Namespace, srv: SSHServerInfo, work: Path) -> list[Row]:
    from sshpipe.testing.linkemu import LinkEmulator, LinkSpec

    root, ltree, local = srv.root / "m", work / "ltree", work / "local"
    for path in (root, root / "tree", ltree, local):
        path.mkdir()
    write_random_file(root / "big.bin", args.size)
    small = root / "small.bin"
    write_random_file(small, MIB)
    up = work / "up.bin"
    write_random_file(up, args.size)
    # Many small files and a few large ones, the same on both sides.
    for name, size in [*((f"s{i:03}.bin", 64 << 10) for i in range(200)),
                       *((f"b{i}.bin", 16 * MIB) for i in range(3))]:  # fmt: skip
        write_random_file(ltree / name, size)
        (root / "tree" / name).write_bytes((ltree / name).read_bytes())
    expected = small.read_bytes()

    async def do_stream(client: sshpipe.Client) -> None:
        async for _ in client.stream(str(root / "big.bin")):
            pass

    ops: dict[str, Callable[[sshpipe.Client], Awaitable[object]]] = {
        "stream": do_stream,
        "get": lambda c: c.get(str(root / "big.bin"), str(local / "got.bin")),
        "put": lambda c: c.put(str(up), str(root / "put.bin")),
        "tree-get": lambda c: c.get(str(root / "tree"), str(local / "tget"), recursive=True),
        "tree-put": lambda c: c.put(str(ltree), str(root / "tput"), recursive=True),
    }
    loop = asyncio.get_running_loop()
    samples: list[Row] = []
    spec = LinkSpec(rtt=args.rtt / 1000, rate=args.rate * 1e6)
    async with LinkEmulator(srv.host, srv.port, spec) as emu:
        # The same host key, known under the emulator's port: checking stays on.
        known = work / "known_hosts_link"
        known.write_text(srv.known_hosts.read_text().replace(f"]:{srv.port} ", f"]:{emu.port} "))
        client = connect(srv, port=emu.port, known_hosts=known)
        try:
            await client.open()
            tasks_at_start = len(asyncio.all_tasks())
            for round_ in range(args.rounds):
                for op in OPS:
                    sample = await _cancel_one(args, client, ops[op], root, local, expected)
                    # Tasks beyond those after open(): information only (a tree op may
                    # open more connections, each with its own tasks).
                    extra = len(asyncio.all_tasks()) - tasks_at_start
                    sample |= {"round": round_, "op": op, "tasks_vs_start": extra}
                    samples.append(sample)
                    print(json.dumps(sample), flush=True)
        finally:
            t = loop.time()
            await client.aclose()
        samples.append({"op": "aclose", "aclose_ms": (loop.time() - t) * 1000,
                        "left_temps": list(client.left_temps)})  # fmt: skip
    return samples


async def _cancel_one(
    args: argparse.Namespace,
    client: sshpipe.Client,
    op: Callable[[sshpipe.Client], Awaitable[object]],
    root: Path,
    local: Path,
    expected: bytes,
) -> Row:
    """One operation under the deadline, then what it left behind."""
    loop = asyncio.get_running_loop()
    start, late = loop.time(), None
    try:
        async with asyncio.timeout(args.deadline):
            await op(client)
    except TimeoutError:
        late = (loop.time() - start - args.deadline) * 1000
    leftovers = sorted(p.name for p in local.rglob("*")
                       if ".partial" in p.name or p.name == "got.bin")  # fmt: skip
    t = loop.time()
    closed = await wait_settled(client, 30.0)
    settle = (loop.time() - t) * 1000
    fds = sshd_open_files(root)
    got = b"".join([piece async for piece in client.stream(str(root / "small.bin"))])
    return {"late_ms": late, "settle_ms": settle, "closed_unsettled": closed, "server_fds": fds,
            "remote_temps": temp_names(root), "local_leftovers": leftovers,
            "next_ok": got == expected}  # fmt: skip


# --------------------------------------------------------------------------- stall


def stall(args: argparse.Namespace) -> int:
    runs: list[Row] = []
    with (
        scratch_dir(args.workdir) as scratch,
        openssh_server(scratch / "sshd", max_sessions=args.max_sessions) as srv,
    ):
        src = srv.root / "src.bin"
        digest = write_random_file(src, args.size)
        for run in range(args.runs):
            dst = scratch / f"dst{run}.bin"
            job = {"host": srv.host, "port": srv.port, "user": srv.user,
                   "key": str(srv.client_key), "known_hosts": str(srv.known_hosts),
                   "src": str(src), "dst": str(dst)}  # fmt: skip
            # A fresh interpreter per run: the first connect() imports asyncssh.
            child = subprocess.run(
                [sys.executable, __file__, "_stall-child", json.dumps(job)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if child.returncode != 0:
                print(child.stdout + child.stderr, file=sys.stderr)
                return 1
            result = json.loads(child.stdout.splitlines()[-1])
            result["sha256_ok"] = sha256_file(dst) == digest
            runs.append(result)
            print(json.dumps(result), flush=True)
    markdown = table(
        ["runs", "max stall ms (median)", "max stall ms (worst)", "connect+get ms (median)",
         "sha256 ok"],
        [[len(runs), f"{median([r['max_stall_ms'] for r in runs]):.1f}",
          f"{max(r['max_stall_ms'] for r in runs):.1f}",
          f"{median([r['total_ms'] for r in runs]):.0f}",
          f"{sum(r['sha256_ok'] for r in runs)}/{len(runs)}"]],
    )  # fmt: skip
    markdown += (
        f"\n\nA {TICK * 1000:g} ms ticker's largest lateness during `connect()` + a first get "
        f"of {size_label(args.size)}, sshd on 127.0.0.1 (MaxSessions {args.max_sessions}); "
        "each run a fresh interpreter with sshpipe imported, asyncssh not yet."
    )
    report(args, "Event-loop stall: connect() and the first get", markdown, {"runs": runs})
    return 0 if all(r["sha256_ok"] for r in runs) else 1


async def _stall_child(job: dict[str, Any]) -> Row:
    preloaded = "asyncssh" in sys.modules
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(TICK)
            now = time.perf_counter()
            gaps.append(now - last - TICK)
            last = now

    async with asyncio.TaskGroup() as group:
        group.create_task(ticker())
        await asyncio.sleep(0.05)  # the ticker's own start-up is not the client's
        gaps.clear()
        started = time.perf_counter()
        try:
            async with sshpipe.connect(
                f"{job['user']}@{job['host']}", port=job["port"], identity_files=[job["key"]],
                known_hosts=[job["known_hosts"]], ssh_config=[],
            ) as client:  # fmt: skip
                await client.get(job["src"], job["dst"])
            total = time.perf_counter() - started
        finally:
            stop.set()
    gaps.sort(reverse=True)
    return {"max_stall_ms": gaps[0] * 1000, "top3_ms": [g * 1000 for g in gaps[:3]],
            "total_ms": total * 1000, "asyncssh_preloaded": preloaded}  # fmt: skip


# --------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--workdir",
        type=Path,
        help="parent of the scratch dir (default: system temp; use the checkout's file "
        "system, e.g. ../bench-scratch); the scratch dir is removed",
    )
    common.add_argument(
        "--out",
        type=Path,
        help="directory for results.json and results.md (default benchmarks/results/api-COMMAND)",
    )
    common.add_argument(
        "--max-sessions",
        type=positive_int,
        default=STOCK_MAX_SESSIONS,
        help=f"sshd MaxSessions (default {STOCK_MAX_SESSIONS}, stock sshd's)",
    )
    p = sub.add_parser("concurrent", parents=[common], help="peak RSS of N concurrent transfers")
    p.add_argument("--direction", choices=("get", "put"), default="get")
    p.add_argument("--transfers", type=positive_int, default=200)
    p.add_argument("--size", type=parse_size, default=4 * MIB, help="each file (default 4M)")
    p.add_argument("--in-flight", type=parse_size, default=64 * MIB,
                   help="the client's max_bytes_in_flight (default 64M, the default)")  # fmt: skip
    p = sub.add_parser("cancel", parents=[common], help="deadline to exception, and clean-up")
    p.add_argument("--rounds", type=positive_int, default=2)
    p.add_argument("--rtt", type=float, default=40.0, help="round trip, ms (default 40)")
    p.add_argument("--rate", type=float, default=20.0, help="link rate, Mbit/s (default 20)")
    p.add_argument("--deadline", type=float, default=1.0, help="asyncio.timeout, s (default 1)")
    p.add_argument("--size", type=parse_size, default=64 * MIB,
                   help="the single file of stream/get/put (default 64M)")  # fmt: skip
    p = sub.add_parser("stall", parents=[common], help="event-loop stall of connect + get")
    p.add_argument("--runs", type=positive_int, default=5)
    p.add_argument("--size", type=parse_size, default=MIB, help="the file got (default 1M)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["_stall-child"]:  # one run of ``stall``, in its own interpreter
        print(json.dumps(asyncio.run(_stall_child(json.loads(argv[1])))))
        return 0
    args = build_parser().parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "concurrent": concurrent, "cancel": cancel, "stall": stall,
    }  # fmt: skip
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
