"""results.json and results.md: medians per (scenario, item, direction, client)."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _bench_common import size_label

from .runner import Run, SuiteSample

SCHEMA = "sshpipe-bench-suite/1"
BASE = "sftp-default"


@dataclass
class Row:
    scenario: str
    rtt_ms: float | None
    rate_mbit: float | None
    data: str
    kind: str
    item: str
    size_bytes: int
    files: int
    direction: str
    client: str
    n_ok: int
    n_failed: int
    n_timeout: int
    whole_s: float | None = None
    mb_per_s: float | None = None
    files_per_s: float | None = None
    vs_sftp: float | None = None
    setup_s: float | None = None
    net_mb_per_s: float | None = None
    cpu_s: float | None = None
    cpu_s_per_gib: float | None = None
    maxrss_mib: float | None = None
    problem: str | None = None


def summarize(run: Run) -> list[Row]:
    rows: list[Row] = []
    for scenario in run.scenarios:
        mine = [s for s in run.samples if s.scenario == scenario.label]
        keys = dict.fromkeys((s.kind, s.item, s.direction) for s in mine)
        for kind, item, direction in keys:
            group = []
            for client in run.clients:
                samples = [s for s in mine if (s.kind, s.item, s.direction, s.client)
                           == (kind, item, direction, client.name)]  # fmt: skip
                if samples:
                    group.append(_row(scenario, samples))
            base = next((r for r in group if r.client == BASE and r.mb_per_s), None)
            for row in group:
                if base and row.mb_per_s and base.mb_per_s:
                    row.vs_sftp = row.mb_per_s / base.mb_per_s
            rows.extend(group)
    setups = {(r.scenario, r.direction, r.client): r.whole_s for r in rows if r.kind == "setup"}
    for row in rows:
        setup = setups.get((row.scenario, row.direction, row.client))
        if row.kind != "setup" and setup is not None and row.whole_s:
            row.setup_s = setup
            if row.whole_s > setup:
                row.net_mb_per_s = row.size_bytes / 1e6 / (row.whole_s - setup)
    return rows


def _row(scenario: Any, samples: list[SuiteSample]) -> Row:
    first = samples[0]
    good = [s for s in samples if s.ok]
    bad = [s for s in samples if s.status in ("failed", "timeout")]
    row = Row(
        scenario=scenario.label, rtt_ms=scenario.rtt_ms, rate_mbit=scenario.rate_mbit,
        data=scenario.data, kind=first.kind, item=first.item, size_bytes=first.size_bytes,
        files=first.files, direction=first.direction, client=first.client, n_ok=len(good),
        n_failed=sum(s.status == "failed" for s in samples),
        n_timeout=sum(s.status == "timeout" for s in samples),
    )  # fmt: skip
    if bad:
        row.problem = f"{bad[0].status}: {bad[0].error}"
    if not good:
        return row
    row.whole_s = statistics.median(s.wall_s for s in good)
    row.mb_per_s = row.size_bytes / 1e6 / row.whole_s
    row.files_per_s = row.files / row.whole_s if row.kind == "tree" else None
    row.cpu_s = statistics.median(s.cpu_s for s in good)
    if row.size_bytes > 1:
        row.cpu_s_per_gib = row.cpu_s * (1 << 30) / row.size_bytes
    row.maxrss_mib = statistics.median(s.maxrss_kib / 1024 for s in good)
    return row


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def markdown_table(header: Sequence[str], lines: list[list[str]]) -> list[str]:
    """A markdown table's lines, numbers right-aligned (``combine`` builds its tables with it)."""
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
        *("| " + " | ".join(line) + " |" for line in lines),
    ]


def format_md(run: Run, rows: list[Row], meta: dict[str, Any]) -> str:
    out = [
        "# sshpipe benchmark suite", "",
        f"Measured {meta['date']} on {meta['machine']['cpu']} ({meta['machine']['nproc']} cores, "
        f"{meta['machine']['kernel']}), sshpipe {meta['machine']['sshpipe']}, "
        f"preset `{meta['preset']}`, {run.reps} rep(s), command `{meta['command']}`.", "",
        "Whole command (process start to exit), medians; MB/s = 10^6 B/s of the whole "
        "command; vs sftp = that over OpenSSH sftp (defaults) on the same row's item; "
        "net = size / (whole - the client's 1-byte set-up); CPU-s and peak RSS of the "
        "client's process tree (wait4). Every output checked by sha256.", "",
        "## Clients", "",
    ]  # fmt: skip
    client_lines = [
        [c["name"], c["describe"], c["version"] or "—", c["skip"] or "ran"] for c in meta["clients"]
    ]
    out += markdown_table(["client", "what", "version", "status"], client_lines)
    for scenario in run.scenarios:
        mine = [r for r in rows if r.scenario == scenario.label]
        if not mine:
            continue
        where = ("loopback (no emulator)" if scenario.rtt_ms is None else
                 f"RTT {scenario.rtt_ms:g} ms, {scenario.rate_mbit:g} Mbit/s")  # fmt: skip
        out += ["", f"## {scenario.label}: {where}, {scenario.data} data", ""]
        lines = []
        for r in mine:
            what = "set-up (1 B)" if r.kind == "setup" else (
                f"tree {r.item} ({r.files} files, {size_label(r.size_bytes)})"
                if r.kind == "tree" else r.item)  # fmt: skip
            rate = _fmt(r.files_per_s, ".0f") + " files/s" if r.kind == "tree" else _fmt(
                r.mb_per_s, ".1f") if r.kind != "setup" else ""  # fmt: skip
            lines.append([
                what, r.direction, r.client, _fmt(r.whole_s, ".2f"), rate,
                _fmt(r.vs_sftp, ".2f") if r.kind != "setup" else "",
                _fmt(r.net_mb_per_s, ".1f"), _fmt(r.cpu_s, ".2f"), _fmt(r.maxrss_mib, ".0f"),
                r.problem or f"{r.n_ok} ok",
            ])  # fmt: skip
        out += markdown_table(["item", "dir", "client", "whole s", "MB/s", "vs sftp", "net MB/s",
                       "CPU-s", "RSS MiB", "samples"], lines)  # fmt: skip
    return "\n".join(out) + "\n"


def write(out_dir: Path, run: Run, rows: list[Row], meta: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    document = {
        "schema": SCHEMA, **meta,
        "scenarios": [asdict(s) for s in run.scenarios],
        "links": [asdict(link) for link in run.links],
        "rows": [asdict(r) for r in rows],
        "samples": [asdict(s) for s in run.samples],
    }  # fmt: skip
    (out_dir / "results.json").write_text(json.dumps(document, indent=1, default=str) + "\n")
    (out_dir / "results.md").write_text(format_md(run, rows, meta))
