"""fsspec filesystems over emulated WAN links: ``sshpipe://`` against sshfs and paramiko sftp.

One run, one local sshd (stock MaxSessions 10), each link setting an emulator
process in front of it (``python -m sshpipe.testing.linkemu``, _wan_link.py). Each
measurement is a fresh Python process doing one read (_fsspec_worker.py) and
is timed from its start to its exit: imports, log-in and the read itself.
The clients take turns (rotated each rep), every result is checked.

Operations: a whole-file ``get`` of 64 MiB; ``pyarrow.parquet.read_table``
of 2 columns of 10 from a ~60 MB file with several row groups;
``pandas.read_csv`` of a ~40 MB file through ``fs.open``.

Usage: python benchmarks/bench_fsspec.py [--reps 3] [--workdir /work/scratch/x]
       [--ops get,parquet,csv] [--links 0,1] [--out DIR]
Results: benchmarks/results/fsspec/latest.json and latest.txt (the README's table);
a run of some operations or links only writes to ``--out`` (required then), so
a partial run never replaces the full one's files.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _bench_common import (
    REPO_ROOT,
    machine_info,
    run_measured,
    scratch_dir,
    size_label,
    write_random_file,
)
from _wan_link import Link, LinkRecord, emulated_view

from sshpipe.testing.sshd import openssh_server

CLIENTS = ("sshpipe", "sshfs", "sftp")
OPERATIONS = ("get", "parquet", "csv")
LINKS = (
    Link("50 ms, 1 Gbit/s", 50.0, 1000.0),
    Link("50 ms, 200 Mbit/s", 50.0, 200.0),
)
GET_SIZE = 64 * 1024 * 1024
TIMEOUT_S = 600.0
WORKER = Path(__file__).with_name("_fsspec_worker.py")
RESULTS = REPO_ROOT / "benchmarks" / "results" / "fsspec"


@dataclass
class Result:
    link: str
    client: str
    operation: str
    rep: int
    wall_s: float
    cpu_s: float
    ok: bool
    error: str | None = None


def make_data(root: Path) -> dict[str, Any]:
    """The server's files, and what a correct read of each gives."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(17)
    data = root / "data.bin"
    digest = write_random_file(data, GET_SIZE)
    wide = pd.DataFrame({f"c{i}": rng.normal(size=750_000) for i in range(10)})
    wide.to_parquet(root / "wide.parquet", row_group_size=75_000, compression=None)
    rows = 1_000_000
    csv = pd.DataFrame(
        {
            "key": rng.integers(0, 1000, rows),
            "value": rng.normal(size=rows),
            "other": rng.normal(size=rows),
            "label": rng.choice(["alpha", "beta", "gamma"], rows),
        }
    )
    csv.to_csv(root / "data.csv", index=False)
    back = pd.read_csv(root / "data.csv")  # the sums as the text round trip gives them
    return {
        "get_source": str(data),
        "get_sha256": digest,
        "get_size": GET_SIZE,
        "parquet": str(root / "wide.parquet"),
        "parquet_size": (root / "wide.parquet").stat().st_size,
        "parquet_rows": len(wide),
        "parquet_sums": [float(wide["c3"].sum()), float(wide["c7"].sum())],
        "csv": str(root / "data.csv"),
        "csv_size": (root / "data.csv").stat().st_size,
        "csv_rows": len(back),
        "csv_sum": float(back["value"].sum()),
    }


def measure(
    client: str, operation: str, spec: dict[str, Any], logs: Path, label: str, rep: int
) -> Result:
    argv = [sys.executable, str(WORKER), client, operation, json.dumps(spec)]
    log = logs / f"{client}-{operation}-{rep}-{label.replace(' ', '_').replace('/', '_')}.log"
    measured = run_measured(argv, log, TIMEOUT_S)
    ok = measured.exit_code == 0 and not measured.timed_out
    error = None if ok else log.read_text(errors="replace")[-400:]
    print(f"  {client:8} {operation:8} {measured.wall_s:7.2f} s {'ok' if ok else 'FAILED'}",
          flush=True)  # fmt: skip
    return Result(label, client, operation, rep, measured.wall_s, measured.cpu_s, ok, error)


def table(results: list[Result], data: dict[str, Any]) -> str:
    sizes = {
        "get": size_label(data["get_size"]),
        "parquet": f"{data['parquet_size'] / 1e6:.0f} MB (2 of 10 columns)",
        "csv": f"{data['csv_size'] / 1e6:.0f} MB",
    }
    names = {"get": "get (whole file)", "parquet": "parquet read", "csv": "read_csv"}
    lines = [
        "| link | operation | file | sshpipe:// | sshfs | paramiko sftp | vs sshfs | vs sftp |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for link in LINKS:
        for op in OPERATIONS:
            if not any((r.link, r.operation) == (link.label, op) for r in results):
                continue  # not in this run (--ops, --links)
            med: dict[str, float | None] = {}
            for client in CLIENTS:
                walls = [
                    r.wall_s for r in results
                    if (r.link, r.client, r.operation) == (link.label, client, op) and r.ok
                ]  # fmt: skip
                med[client] = statistics.median(walls) if walls else None

            mine = med["sshpipe"]
            lines.append(
                f"| {link.label} | {names[op]} | {sizes[op]} | {_cell(mine)} "
                f"| {_cell(med['sshfs'])} | {_cell(med['sftp'])} | {_ratio(med['sshfs'], mine)} "
                f"| {_ratio(med['sftp'], mine)} |"
            )
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "failed" if value is None else f"{value:.2f} s"


def _ratio(other: float | None, mine: float | None) -> str:
    return "–" if mine is None or other is None else f"{other / mine:.1f}x"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--ops", default=",".join(OPERATIONS), help="of " + ",".join(OPERATIONS))
    parser.add_argument(
        "--links",
        default=",".join(str(i) for i in range(len(LINKS))),
        help="indexes into: " + "; ".join(f"{i}={link.label}" for i, link in enumerate(LINKS)),
    )
    parser.add_argument("--out", type=Path, default=None, help=f"default {RESULTS}")
    args = parser.parse_args(argv)
    clients = args.clients.split(",")
    operations = [op for op in args.ops.split(",") if op]
    links_run = [LINKS[int(i)] for i in args.links.split(",") if i]
    if unknown := set(operations) - set(OPERATIONS):
        parser.error(f"unknown operations: {', '.join(sorted(unknown))}")
    partial = operations != list(OPERATIONS) or links_run != list(LINKS)
    if partial and args.out is None:
        parser.error("a run of some operations or links only needs --out DIR")
    out = args.out or RESULTS
    results: list[Result] = []
    links: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    started = time.time()
    with scratch_dir(args.workdir) as scratch:
        logs = scratch / "logs"
        logs.mkdir()
        with openssh_server(scratch / "server", max_sessions=10) as srv:
            print("== making the files", flush=True)
            data = make_data(srv.root)
            for link in links_run:
                record = LinkRecord(link.label, link.rtt_ms, link.rate_mbit)
                with emulated_view(link, srv, None, scratch, logs, record) as view:
                    spec = {
                        **data,
                        "host": view.host,
                        "port": view.port,
                        "user": view.user,
                        "key": str(view.client_key),
                        "known_hosts": str(view.known_hosts),
                        "get_output": str(scratch / "got.bin"),
                    }
                    for rep in range(args.reps):
                        order = clients[rep % len(clients) :] + clients[: rep % len(clients)]
                        for client in order:
                            for op in operations:
                                results.append(measure(client, op, spec, logs, link.label, rep))
                links.append(asdict(record))
    text = table(results, data)
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    report = {
        "machine": machine_info(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "seconds": time.time() - started,
        "data": {k: v for k, v in data.items() if k.endswith(("_size", "_rows"))},
        "links": links,
        "results": [asdict(r) for r in results],
    }
    (out / "latest.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "latest.txt").write_text(
        f"{text}\n\nmedians of {args.reps}, whole command (python start to exit); "
        f"load average before {load_before[0]:.2f}, after {report['load_after'][0]:.2f}\n"
    )
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
