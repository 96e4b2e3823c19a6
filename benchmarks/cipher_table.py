#!/usr/bin/env python3
"""The README's cipher table from one or more ``bench_loopback.py --ciphers`` results, pooled.

Samples of every file given are pooled before the medians (two runs of 3 reps
give medians of 6); "cipher alone" is taken from the first file that has it.

Run from the repo root:
    python benchmarks/cipher_table.py results/ciphers/run1.json results/ciphers/run2.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

GIB = 1 << 30


def _short(cipher: str) -> str:
    return cipher.removesuffix("@openssh.com").replace("chacha20-poly1305", "chacha20")


def _cpu_per_gib(samples: list[dict[str, Any]], client: str, direction: str) -> tuple[str, str]:
    """(CPU-s/GiB net of set-up, whole s) medians for one client and direction, or dashes."""
    mine = [s for s in samples if s["client"] == client and s["direction"] == direction and s["ok"]]
    runs = [s for s in mine if s["kind"] == "transfer"]
    setups = [s["cpu_s"] for s in mine if s["kind"] == "setup"]
    if not runs or not setups:
        return "–", "–"
    sizes = {s["size_bytes"] for s in runs}
    if len(sizes) != 1:
        raise SystemExit(f"{client} {direction}: more than one size ({sorted(sizes)}); give one")
    cpu = statistics.median(s["cpu_s"] for s in runs) - statistics.median(setups)
    return f"{cpu * GIB / sizes.pop():.2f}", f"{statistics.median(s['wall_s'] for s in runs):.2f}"


def table(documents: list[dict[str, Any]]) -> str:
    samples = [s for doc in documents for s in doc["samples"]]
    alone: dict[str, list[float]] = next(
        (doc["cipher_alone_s_per_gib"] for doc in documents if doc.get("cipher_alone_s_per_gib")),
        {},
    )
    ciphers = list(dict.fromkeys(
        c["name"].removeprefix("sshpipe:") for doc in documents for c in doc["clients"]
        if c["name"].startswith("sshpipe:")
    ))  # fmt: skip
    full = {_short(c): c for c in alone}
    n = len({(s["rep"], id(doc)) for doc in documents for s in doc["samples"]})
    lines = [
        f"medians of {n} repetitions; CPU-s/GiB = (CPU s − 1-byte set-up CPU s) / size",
        "",
        "| cipher | sshpipe get | sshpipe put | cipher alone get / put | sftp get | sftp put "
        "| whole s sshpipe get / put | whole s sftp get / put |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in ["", *ciphers]:
        pipe = "sshpipe" + (f":{name}" if name else "")
        (pg, pgw), (pp, ppw) = (_cpu_per_gib(samples, pipe, d) for d in ("get", "put"))
        if not name:
            lines.append(
                f"| (default order) | **{pg}** | **{pp}** | – | – | – | {pgw} / {ppw} | – |"
            )
            continue
        (fg, fgw), (fp, fpw) = (_cpu_per_gib(samples, f"sftp:{name}", d) for d in ("get", "put"))
        cipher = full.get(name, name)
        own = alone.get(cipher)
        shown = "–" if own is None else f"{own[1]:.2f} / {own[0]:.2f}"
        lines.append(
            f"| `{cipher}` | **{pg}** | **{pp}** | {shown} | {fg} | {fp} | {pgw} / {ppw} "
            f"| {fgw} / {fpw} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="+", type=Path, help="results.json of --ciphers runs")
    args = parser.parse_args(argv)
    print(table([json.loads(path.read_text()) for path in args.results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
