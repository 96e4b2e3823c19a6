#!/usr/bin/env python3
"""Client CPU per GiB and peak RSS from a bench_loopback.py run's results.json.

    python benchmarks/cpu_table.py benchmarks/results/cpu/loopback/results.json

One row per size, direction and client: the whole command's medians (wall,
client CPU user + system, including its ssh for sftp), CPU-s per GiB of file,
that against ``sftp-tuned``'s in the same run (the issue's bar: at most
1.25×), and the peak RSS. CPU-s are less noisy than wall time on a shared
machine: compare these ratios, not seconds across runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

GIB = 1024**3
BASE = "sftp-tuned"


def _size(size: int) -> str:
    return f"{size // GIB} GiB" if size >= GIB else f"{size // (1024 * 1024)} MiB"


def table(rows: list[dict[str, Any]]) -> list[str]:
    base = {
        (r["size_bytes"], r["direction"]): r["cpu_s"]
        for r in rows
        if r["client"] == BASE and r.get("cpu_s")
    }
    out = [
        f"| size | dir | client | whole s | CPU s | CPU-s/GiB | vs {BASE} CPU | peak RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (r["direction"], r["size_bytes"])):
        cpu = r.get("cpu_s")
        if cpu is None or r.get("whole_s") is None:
            continue
        per_gib = cpu * GIB / r["size_bytes"]
        ref = base.get((r["size_bytes"], r["direction"]))
        ratio = f"{cpu / ref:.2f}×" if ref else "–"
        name = f"**{r['client']}**" if r["client"].startswith("sshpipe") else r["client"]
        out.append(
            f"| {_size(r['size_bytes'])} | {r['direction']} | {name} | {r['whole_s']:.2f} | "
            f"{cpu:.2f} | {per_gib:.2f} | {ratio} | {r['maxrss_mib']:.1f} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a bench_loopback.py results.json")
    args = parser.parse_args()
    document = json.loads(args.results.read_text())
    print("\n".join(table(document["rows"])))


if __name__ == "__main__":
    main()
