#!/usr/bin/env python3
"""Plot bench_wan.py's results: whole-command MB/s against RTT, one line per client and size.

One panel per (direction, link rate); the link rate is the dashed line; the
thin link is left out (it is one point). ``--net`` plots net of set-up
instead. Reads ``results.json`` (schema sshpipe-bench-whole/1) or, for the
older single-size files, their ``summary`` rows (net only). Needs matplotlib
(``pip install -e '.[bench]'``).

Run from the repo root:  python benchmarks/plot_wan.py
                         python benchmarks/plot_wan.py --net --out net.png
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
DEFAULT_JSON = RESULTS_DIR / "wan" / "results.json"
DEFAULT_PNG = RESULTS_DIR / "wan" / "throughput.png"
# Bigger files are drawn bolder: the line a size makes is read against its neighbours.
SIZE_STYLES = (":", "-.", "--", "-")
# Fixed per client, so a colour means the same thing in every plot.
STYLES: dict[str, dict[str, Any]] = {
    # Dotted and larger, so it still shows where it lies under sftp-tuned.
    "sftp-default": {"color": "#7f7f7f", "marker": "o", "markersize": 9, "linestyle": ":"},
    "sftp-tuned": {"color": "#1f77b4", "marker": "s"},
    "asyncssh": {"color": "#ff7f0e", "marker": "^"},
    "sshpipe": {"color": "#2ca02c", "marker": "D", "linewidth": 2.5},
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"(default {DEFAULT_JSON})")
    parser.add_argument("--out", type=Path, default=DEFAULT_PNG, help=f"(default {DEFAULT_PNG})")
    parser.add_argument(
        "--linear", action="store_true", help="linear axes (default: log-log, where a "
        "window-limited client, rate = window / RTT, is a straight line of slope -1)"
    )  # fmt: skip
    parser.add_argument("--net", action="store_true", help="net of set-up instead of whole command")
    return parser


def _title(document: dict[str, Any], metric: str) -> str:
    machine = document.get("machine", {})
    settings = document.get("settings", {})
    if not isinstance(settings, dict):  # the new schema lists settings; details are top-level
        settings = {}
    created = str(document.get("created", ""))[:10]
    reps = document.get("reps", settings.get("reps", "?"))
    sizes = f"median of {reps}; line style: file size"
    if document.get("mode") == "server":
        where = f"existing server {document.get('server', settings.get('server'))}"
    else:
        sessions = document.get("max_sessions", settings.get("max_sessions"))
        where = f"user-space emulator, sshd MaxSessions {sessions}"
    return (
        f"SFTP {metric} against RTT — {where}\n"
        f"{machine.get('cpu', '?')} ×{machine.get('nproc', '?')}, {machine.get('kernel', '')}, "
        f"{created}\n{sizes}"
    )


def _rows(document: dict[str, Any], net: bool) -> tuple[list[dict[str, Any]], str]:
    """(rows with "rtt_ms", "rate_mbit", "client", "direction", "size_bytes", "y"), metric."""
    if "rows" in document:
        key = "net_mb_per_s" if net else "whole_mb_per_s"
        metric = "net MB/s (of set-up)" if net else "whole-command MB/s"
        source = [r for r in document["rows"] if r.get("role") == "matrix"]
    else:
        key, metric, source = "net_mb_per_s", "net MB/s (of set-up)", document["summary"]
    rows = [
        {**r, "y": r.get(key)}
        for r in source
        if r.get("rtt_ms") is not None and r.get("rate_mbit") is not None
    ]
    return rows, metric


def plot(document: dict[str, Any], out: Path, *, linear: bool, net: bool) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    rows, metric = _rows(document, net)
    if not rows:
        print("nothing to plot: no row with a known RTT and rate", file=sys.stderr)
        return 1
    directions = [d for d in ("get", "put") if any(r["direction"] == d for r in rows)]
    rates = sorted({r["rate_mbit"] for r in rows}, reverse=True)
    clients = list(dict.fromkeys(r["client"] for r in rows))
    sizes = sorted({r["size_bytes"] for r in rows})
    rtts = sorted({r["rtt_ms"] for r in rows})
    fig, axes = plt.subplots(
        len(directions), len(rates), figsize=(max(7.5, 5.2 * len(rates)), 4.0 * len(directions)),
        squeeze=False, sharex=True, sharey=True,
    )  # fmt: skip
    for i, direction in enumerate(directions):
        for j, rate in enumerate(rates):
            ax = axes[i][j]
            link_mb = rate / 8
            ax.axhline(link_mb, color="black", linestyle="--", linewidth=1)
            ax.annotate(
                f"link {rate:g} Mbit/s = {link_mb:g} MB/s", (0.02, link_mb),
                xycoords=("axes fraction", "data"), xytext=(0, 3),
                textcoords="offset points", fontsize=8,
            )  # fmt: skip
            for client in clients:
                for k, size in enumerate(sizes):
                    points = sorted(
                        (r["rtt_ms"], r["y"])
                        for r in rows
                        if r["client"] == client and r["direction"] == direction
                        and r["rate_mbit"] == rate and r["size_bytes"] == size and r["y"]
                    )  # fmt: skip
                    if not points:
                        continue
                    xs, ys = zip(*points, strict=True)
                    style = dict(STYLES.get(client, {"marker": "x"}))
                    if len(sizes) > 1:
                        style["linestyle"] = SIZE_STYLES[max(0, k - len(sizes) + len(SIZE_STYLES))]
                    label = client if len(sizes) == 1 else f"{client} {size / 2**20:g} MiB"
                    ax.plot(xs, ys, label=label, **style)
            ax.set_title(f"{direction} at {rate:g} Mbit/s", fontsize=10)
            if not linear:
                ax.set_xscale("log")
                ax.set_yscale("log")
            ax.set_xticks(rtts)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            if not linear:
                # 2 and 5 between decades: MB/s is read off the axis, not guessed.
                ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
                ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.grid(True, which="major", alpha=0.3)
            if i == len(directions) - 1:
                ax.set_xlabel("round-trip time (ms)")
            if j == 0:
                ax.set_ylabel(f"{metric} (10^6 B/s)")
    if linear:
        axes[0][0].set_ylim(bottom=0)
    axes[0][0].legend(fontsize=8, loc="lower left")
    fig.suptitle(_title(document, metric), fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    document = json.loads(args.json.read_text())
    return plot(document, args.out, linear=args.linear, net=args.net)


if __name__ == "__main__":
    sys.exit(main())
