"""bench_wan.py's and bench_loopback.py's results: markdown tables and the JSON.

``DIR/results.md`` holds the tables as the project README quotes them;
``DIR/results.json`` holds every sample and every row behind them (schema
``SCHEMA``), enough for a script to rebuild the tables without re-running.

Imported by those scripts (run as files, so this directory is on sys.path).
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from _bench_common import size_label
from _whole import (
    FLOOR_RTTS,
    FLOOR_START_S,
    RATIO_BASE,
    SETUP_SIZE,
    Matrix,
    Row,
    Setting,
)

SCHEMA = "sshpipe-bench-whole/1"
# Issue 13's bar for the thin link: whole command at least sftp's, net near the link.
THIN_MIN_RATIO = 1.0
THIN_MIN_PCT_LINK = 90.0


def cell(value: float | None, spec: str, suffix: str = "") -> str:
    """A table cell: the value formatted, or a dash where none was measured."""
    return "–" if value is None else format(value, spec) + suffix


def markdown_table(header: Sequence[str], lines: list[list[str]]) -> list[str]:
    """A markdown table's lines (the other benchmark reports build theirs with it)."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return out


def format_header(machine: dict[str, str], matrix: Matrix, where: str) -> str:
    lines = [f"- **{key}**: {value}" for key, value in machine.items()]
    lines.append(f"- **where**: {where}")
    lines.append(
        f"- **reps**: {matrix.reps}, client order rotated per repetition; medians; "
        f"clients: {', '.join(c.name for c in matrix.clients)}"
    )
    for client in matrix.clients:
        if client.extra_args:
            lines.append(f"  - {client.name}: `{shlex.join(client.extra_args)}`")
    for setting in matrix.settings:
        sizes = ", ".join(size_label(s) for s in setting.sizes)
        lines.append(f"- **{setting.label}**: {sizes} ({setting.data})")
    lines.append(
        "- **whole s**, **MB/s**: the whole command, process start to exit "
        "(MB/s = size / whole s, 10^6 B/s); **vs sftp**: MB/s over "
        f"`{RATIO_BASE}`'s, same size and direction, same run"
    )
    lines.append(
        f"- **net MB/s**: size / (whole s − set-up s), the set-up being a {SETUP_SIZE}-byte "
        "file's whole command (same client, direction and link); **% link** is net MB/s "
        "against the link rate; – when the file took no longer than its set-up (noise)"
    )
    if any(s.rtt_ms is not None and s.rate_mbit is not None for s in matrix.settings):
        lines.append(
            f"- **floor** (sshpipe rows) = {FLOOR_RTTS} RTT + size / link rate + "
            f"{FLOOR_START_S:g} s; **whole/floor** = whole s / floor"
        )
    lines.append("- every output (set-up files too) checked against its source's sha256")
    return "\n".join(lines)


def format_tables(rows: list[Row], setups: list[Row], matrix: Matrix) -> str:
    parts: list[str] = []
    for setting in matrix.settings:
        mine = [r for r in rows if r.setting == setting.label]
        parts.append("\n".join(_setting_table(setting, mine)))
    parts.append("\n".join(_setup_table(setups)))
    return "\n\n".join(parts)


def _setting_heading(setting: Setting) -> str:
    sizes = ", ".join(size_label(s) for s in setting.sizes)
    if setting.role == "thin":
        return (
            f"### Thin link: {setting.label}, {sizes} file, get and put "
            f"(bar: ≥ {THIN_MIN_RATIO:.1f}× sftp whole command, net ≥ {THIN_MIN_PCT_LINK:g} % "
            "of the link)"
        )
    return f"### {setting.label}: {sizes}"


def _setting_table(setting: Setting, rows: list[Row]) -> list[str]:
    linked = setting.rate_mbit is not None
    header = ["size", "dir", "client", "whole s", "min–max s", "MB/s", "vs sftp", "net MB/s"]
    if linked:
        header += ["% link", "floor s", "whole/floor"]
    header.append("ok/runs")
    lines = []
    for r in rows:
        sshpipe = r.client.startswith("sshpipe")
        spread = "–" if r.whole_min_s is None else f"{r.whole_min_s:.2f}–{r.whole_max_s or 0:.2f}"
        cells = [
            size_label(r.size_bytes),
            r.direction,
            f"**{r.client}**" if sshpipe else r.client,
            cell(r.whole_s, ".2f"),
            spread,
            cell(r.whole_mb_per_s, ".1f"),
            cell(r.ratio_vs_base, ".2f", "×"),
            cell(r.net_mb_per_s, ".1f"),
        ]
        if linked:
            cells.append(cell(r.pct_of_link_net, ".0f", " %"))
            cells.append(cell(r.floor_s if sshpipe else None, ".2f"))
            cells.append(cell(r.whole_over_floor if sshpipe else None, ".2f", "×"))
        cells.append(f"{r.n_ok}/{r.n_ok + r.n_failed}")
        lines.append(cells)
    out = [_setting_heading(setting), "", *markdown_table(header, lines)]
    if setting.role == "thin":
        out += ["", *_thin_verdicts(rows)]
    return out


def _thin_verdicts(rows: list[Row]) -> list[str]:
    verdicts = []
    for r in rows:
        if not r.client.startswith("sshpipe"):
            continue
        if r.ratio_vs_base is None or r.pct_of_link_net is None:
            verdicts.append(f"- {r.client} {r.direction}: not measured")
            continue
        ok = r.ratio_vs_base >= THIN_MIN_RATIO and r.pct_of_link_net >= THIN_MIN_PCT_LINK
        verdicts.append(
            f"- {r.client} {r.direction} {size_label(r.size_bytes)}: {r.ratio_vs_base:.2f}× sftp, "
            f"net {r.pct_of_link_net:.0f} % of the link: {'meets' if ok else 'MISSES'} the bar"
        )
    return verdicts


def _setup_table(setups: list[Row]) -> list[str]:
    header = ["link", "dir", "client", "set-up s", "min–max s", "CPU s", "RSS MiB", "ok/runs"]
    lines = []
    for r in setups:
        spread = "–" if r.whole_min_s is None else f"{r.whole_min_s:.2f}–{r.whole_max_s or 0:.2f}"
        lines.append([
            r.setting, r.direction, r.client, cell(r.whole_s, ".2f"), spread,
            cell(r.cpu_s, ".2f"), cell(r.maxrss_mib, ".1f"), f"{r.n_ok}/{r.n_ok + r.n_failed}",
        ])  # fmt: skip
    heading = f"### Set-up: a {SETUP_SIZE}-byte file's whole command"
    return [heading, "", *markdown_table(header, lines)]


def write_results(
    out_dir: Path, benchmark: str, machine: dict[str, str], matrix: Matrix, rows: list[Row],
    setups: list[Row], markdown: str, extra: dict[str, Any],
) -> None:  # fmt: skip
    """``results.json`` (everything) and ``results.md`` (the tables) in ``out_dir``."""
    document = {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine,
        "reps": matrix.reps,
        "ratio_base": RATIO_BASE,
        "setup_size_bytes": SETUP_SIZE,
        "floor": {"rtts": FLOOR_RTTS, "start_s": FLOOR_START_S},
        "directions": matrix.directions,
        "clients": [asdict(c) for c in matrix.clients],
        "settings": [asdict(s) for s in matrix.settings],
        **extra,
        "rows": [asdict(r) for r in rows],
        "setup_rows": [asdict(r) for r in setups],
        "samples": [asdict(s) for s in matrix.samples],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(document, indent=2) + "\n")
    (out_dir / "results.md").write_text(markdown + "\n")
