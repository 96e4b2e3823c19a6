#!/usr/bin/env python3
"""Worker processes (``--workers``) on loopback: does a second client core help?

One throwaway sshd on 127.0.0.1 (not pinned: it runs where the kernel puts
it), one random source; per repetition and per client CPU set (``taskset -c``
on the client command only), every client copies it, get and put, each a
whole command (process start to exit, CPU from wait4: the client and the
processes it reaped, its workers included), the client order rotated. Every
output is checked against the source's sha256. Clients: OpenSSH sftp tuned,
sshpipe in one process, sshpipe with ``--workers 2``.

Run from the repo root:
    python benchmarks/bench_workers.py --workdir ../scratch --size 512M --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from _bench_common import (
    BENCH_DIR,
    Client,
    Paths,
    build_argv,
    parse_size,
    positive_int,
    remove_output,
    run_measured,
    scratch_dir,
    size_label,
    verify_file,
    write_random_file,
)

from sshpipe.testing.sshd import openssh_server

SFTP_TUNED = ("-R", "256", "-B", "261120", "-c", "aes128-gcm@openssh.com")
CLIENTS = (
    Client("sftp-tuned", "sftp", SFTP_TUNED),
    Client("sshpipe", "sshpipe", ("--json",)),
    Client("sshpipe-w2", "sshpipe", ("--workers", "2", "--json")),
)


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=parse_size, default=parse_size("512M"))
    parser.add_argument("--reps", type=positive_int, default=2)
    parser.add_argument(
        "--cpus", action="append", help="a client CPU list for taskset -c (may repeat)"
    )
    parser.add_argument("--workdir", type=Path, help="parent of the scratch dir")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "workers")
    args = parser.parse_args(argv)
    cpu_sets = args.cpus or ["0", "0,1"]
    if shutil.which("taskset") is None:
        parser.error("taskset not found")
    rows: list[dict[str, object]] = []
    loads = {"start": _load()}
    print(f"load average at start: {loads['start']}", flush=True)
    with scratch_dir(args.workdir) as scratch:
        (scratch / "logs").mkdir()
        (scratch / "local").mkdir()
        with openssh_server(scratch / "server") as srv:
            source = srv.root / "src.bin"
            digest = write_random_file(source, args.size)
            paths = Paths(
                source=source,
                get_output=scratch / "local" / "got.bin",
                put_output=srv.root / "up.bin",
                logs=scratch / "logs",
            )
            for rep in range(args.reps):
                for cpus in cpu_sets:
                    order = CLIENTS[rep % len(CLIENTS) :] + CLIENTS[: rep % len(CLIENTS)]
                    for client in order:
                        for direction in ("get", "put"):
                            output = paths.get_output if direction == "get" else paths.put_output
                            remove_output(output)
                            command = [
                                "taskset",
                                "-c",
                                cpus,
                                *build_argv(client, direction, srv, paths),
                            ]
                            log = paths.logs / f"{client.name}-{direction}.log"
                            measured = run_measured(command, log, 600.0)
                            problem = verify_file(output, args.size, digest)
                            ok = measured.exit_code == 0 and problem is None
                            row = {
                                "rep": rep + 1, "cpus": cpus, "client": client.name,
                                "direction": direction, "wall_s": round(measured.wall_s, 3),
                                "cpu_s": round(measured.cpu_s, 3),
                                "mb_s": round(args.size / measured.wall_s / 1e6, 1),
                                "ok": ok, "load": _load(),
                            }  # fmt: skip
                            if not ok:
                                row["error"] = problem or log.read_text()[-300:]
                            rows.append(row)
                            print(json.dumps(row), flush=True)
            remove_output(paths.get_output)
            remove_output(paths.put_output)
    loads["end"] = _load()
    print(f"load average at end: {loads['end']}", flush=True)
    markdown = _table(rows, args.size, loads)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(markdown)
    (args.out / "results.json").write_text(json.dumps({"rows": rows, "load": loads}, indent=1))
    print("\n" + markdown)
    return 0 if all(row["ok"] for row in rows) else 1


def _table(rows: list[dict[str, object]], size: int, loads: dict[str, str]) -> str:
    """Medians of the repetitions per (cpus, client, direction): wall s, client CPU s."""
    reps = max((int(str(row["rep"])) for row in rows), default=0)
    lines = [
        f"## --workers on loopback, {size_label(size)}, whole command (medians of {reps})",
        "",
        f"load average (1, 5, 15 min): {loads['start']} at start, {loads['end']} at end; "
        f"{os.cpu_count()} cores; sshd unpinned, the client pinned with taskset -c",
        "",
        "| client cpus | client | get s (CPU s) | get MB/s | put s (CPU s) | put MB/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    keys = dict.fromkeys((row["cpus"], row["client"]) for row in rows)
    for cpus, client in keys:
        cells = []
        for direction in ("get", "put"):
            done = [
                row
                for row in rows
                if (row["cpus"], row["client"], row["direction"]) == (cpus, client, direction)
                and row["ok"]
            ]
            if not done:
                cells += ["failed", ""]
                continue
            wall = statistics.median(float(str(row["wall_s"])) for row in done)
            cpu = statistics.median(float(str(row["cpu_s"])) for row in done)
            cells += [f"{wall:.2f} ({cpu:.2f})", f"{size / wall / 1e6:.0f}"]
        lines.append(f"| {cpus} | {client} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
