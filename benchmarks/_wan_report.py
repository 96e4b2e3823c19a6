"""bench_wan.py's results: samples and summaries, progress lines, the table and the JSON."""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _wan_link import Link, LinkRecord
from bench_loopback import GIB, MIB, Client, Sample, _indent

RATIO_BASE = "sftp-default"
SETUP_SIZE = 1


# --------------------------------------------------------------------------- data


@dataclass
class WanSample(Sample):
    link: str = ""
    kind: str = "transfer"  # "setup" (1 byte) or "transfer"
    size_bytes: int = 0
    timeout_s: float = 0.0
    # sshpipe --json output, whatever keys it has.
    sshpipe_stats: dict[str, Any] | None = None


@dataclass
class WanSummary:
    link: str
    rtt_ms: float | None
    rate_mbit: float | None
    client: str
    direction: str
    size_bytes: int
    n_ok: int
    n_failed: int
    n_setup_failed: int = 0
    median_wall_s: float | None = None
    median_setup_wall_s: float | None = None
    net_mb_per_s: float | None = None
    net_min_mb_per_s: float | None = None
    net_max_mb_per_s: float | None = None
    gross_mb_per_s: float | None = None
    ratio_vs_base: float | None = None
    pct_of_link: float | None = None
    net_cpu_s_per_gib: float | None = None
    gross_cpu_s_per_gib: float | None = None
    median_maxrss_mib: float | None = None


@dataclass
class WanRun:
    args: argparse.Namespace
    clients: list[Client]
    directions: list[str]
    links: list[Link]
    mode: str  # "emulator" or "server"
    links_done: list[LinkRecord] = field(default_factory=list)
    samples: list[WanSample] = field(default_factory=list)
    setup_errors: list[str] = field(default_factory=list)

    def size_for(self, client: Client) -> int:
        return int(self.args.size if client.kind == "sshpipe" else self.args.baseline_size)


# --------------------------------------------------------------------------- results


def report_sample(sample: WanSample, reps: int) -> None:
    prefix = (
        f"[{sample.link}] [rep {sample.rep + 1}/{reps}] {sample.client:<12} "
        f"{sample.direction} {sample.kind:<8}"
    )
    if not sample.ok:
        print(f"{prefix}: FAILED: {sample.error}", file=sys.stderr, flush=True)
        print(f"    command: {shlex.join(sample.argv)}", file=sys.stderr)
        if sample.output_tail:
            print("    output:\n" + _indent(sample.output_tail), file=sys.stderr, flush=True)
        return
    rate = "" if sample.kind == "setup" else f"{sample.mb_per_s:8.1f} MB/s gross  "
    print(
        f"{prefix}: {rate}{sample.wall_s:7.2f} s  cpu {sample.cpu_s:6.2f} s  "
        f"rss {sample.maxrss_kib / 1024:6.1f} MiB",
        flush=True,
    )
    if sample.sshpipe_stats and sample.kind == "transfer":
        shown = {k: v for k, v in sample.sshpipe_stats.items() if k not in ("source", "target")}
        text = json.dumps(shown, separators=(",", ":"))
        print(f"    sshpipe: {text[:400]}{' ...' if len(text) > 400 else ''}", flush=True)
    if sample.output_tail:
        print(f"    (output: {sample.output_tail!r})", flush=True)


def summarize(run: WanRun) -> list[WanSummary]:
    rows: list[WanSummary] = []
    for link in run.links:
        for direction in run.directions:
            group = [_summarize_one(run, link, c, direction) for c in run.clients]
            base = next((r.net_mb_per_s for r in group if r.client == RATIO_BASE), None)
            for row in group:
                if base and row.net_mb_per_s is not None:
                    row.ratio_vs_base = row.net_mb_per_s / base
            rows.extend(group)
    return rows


def _summarize_one(run: WanRun, link: Link, client: Client, direction: str) -> WanSummary:
    def mine(kind: str) -> list[WanSample]:
        return [
            s
            for s in run.samples
            if s.link == link.label and s.client == client.name
            and s.direction == direction and s.kind == kind
        ]  # fmt: skip

    size = run.size_for(client)
    transfers, setups = mine("transfer"), mine("setup")
    good, good_setup = [s for s in transfers if s.ok], [s for s in setups if s.ok]
    row = WanSummary(
        link=link.label, rtt_ms=link.rtt_ms, rate_mbit=link.rate_mbit, client=client.name,
        direction=direction, size_bytes=size, n_ok=len(good),
        n_failed=len(transfers) - len(good), n_setup_failed=len(setups) - len(good_setup),
    )  # fmt: skip
    if not good:
        return row
    gib = size / GIB
    row.median_wall_s = statistics.median(s.wall_s for s in good)
    row.gross_mb_per_s = size / 1e6 / row.median_wall_s
    row.gross_cpu_s_per_gib = statistics.median(s.cpu_s for s in good) / gib
    row.median_maxrss_mib = statistics.median(s.maxrss_kib / 1024 for s in good)
    if not good_setup:
        return row
    setup_wall = statistics.median(s.wall_s for s in good_setup)
    setup_cpu = statistics.median(s.cpu_s for s in good_setup)
    row.median_setup_wall_s = setup_wall
    net = [size / 1e6 / (s.wall_s - setup_wall) for s in good if s.wall_s > setup_wall]
    if row.median_wall_s > setup_wall:
        row.net_mb_per_s = size / 1e6 / (row.median_wall_s - setup_wall)
        row.net_min_mb_per_s, row.net_max_mb_per_s = min(net), max(net)
        if link.rate_mb_per_s:
            row.pct_of_link = 100 * row.net_mb_per_s / link.rate_mb_per_s
    row.net_cpu_s_per_gib = max(0.0, statistics.median(s.cpu_s for s in good) - setup_cpu) / gib
    return row


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def format_table(rows: list[WanSummary]) -> str:
    header = (
        f"{'link':<22} {'client':<12} {'dir':<3} {'net MB/s':>8} {'min–max':>13} "
        f"{'gross':>7} {'vs ' + RATIO_BASE:>15} {'% link':>6} {'setup s':>7} "
        f"{'CPU s/GiB':>9} {'RSS MiB':>7} {'ok/runs':>7}"
    )
    lines = [header, "-" * len(header)]
    previous = None
    for r in rows:
        if previous is not None and (r.link, r.direction) != previous:
            lines.append("")
        previous = (r.link, r.direction)
        spread = (
            "-"
            if r.net_min_mb_per_s is None
            else f"{r.net_min_mb_per_s:.1f}–{r.net_max_mb_per_s:.1f}"
        )
        runs = f"{r.n_ok}/{r.n_ok + r.n_failed}" + ("*" if r.n_setup_failed else "")
        lines.append(
            f"{r.link:<22} {r.client:<12} {r.direction:<3} {_fmt(r.net_mb_per_s, '.1f'):>8} "
            f"{spread:>13} {_fmt(r.gross_mb_per_s, '.1f'):>7} "
            f"{_fmt(r.ratio_vs_base, '.2f', 'x'):>15} {_fmt(r.pct_of_link, '.0f', '%'):>6} "
            f"{_fmt(r.median_setup_wall_s, '.2f'):>7} {_fmt(r.net_cpu_s_per_gib, '.2f'):>9} "
            f"{_fmt(r.median_maxrss_mib, '.1f'):>7} {runs:>7}"
        )
    if any(r.n_setup_failed for r in rows):
        lines.append("* a 1-byte set-up probe failed too")
    return "\n".join(lines)


def format_links(records: list[LinkRecord]) -> str:
    lines = []
    for rec in records:
        if rec.emulator_argv is None:
            continue
        share = _fmt(None if rec.emulator_cpu_share is None else 100 * rec.emulator_cpu_share,
                     ".1f", "% of one core")  # fmt: skip
        stats = rec.emulator_stats or {}
        cpu, wall = stats.get("cpu_seconds"), stats.get("wall_seconds")
        numbers = isinstance(cpu, int | float) and isinstance(wall, int | float)
        detail = f" (cpu {cpu:.1f} s / wall {wall:.1f} s)" if numbers else ""
        lines.append(
            f"  {rec.label:<22} emulator CPU {share}{detail}"
            + (f"  ERROR: {rec.error}" if rec.error else "")
        )
    return ("emulator (its own process):\n" + "\n".join(lines)) if lines else ""


def format_header(machine: dict[str, str], run: WanRun) -> str:
    args = run.args
    lines = [f"{key + ':':<10} {value}" for key, value in machine.items()]
    if run.mode == "emulator":
        lines.append(
            f"{'links:':<10} user-space emulator (python -m sshpipe.linkemu) in front of one "
            f"sshd with MaxSessions {args.max_sessions}; RTT {_join(args.rtts)} ms × rate "
            f"{_join(args.rates)} Mbit/s, queue {args.queue or 'emulator default'}"
        )
    else:
        lines.append(f"{'links:':<10} existing server {args.server[0]}:{args.server[1]} "
                     f"({run.links[0].label}), no emulator")  # fmt: skip
    baseline_names = [c.name for c in run.clients if c.kind != "sshpipe"]
    sizes = []
    if any(c.kind == "sshpipe" for c in run.clients):
        sizes.append(f"sshpipe {args.size / MIB:g} MiB")
    if baseline_names:
        sizes.append(f"{', '.join(baseline_names)} {args.baseline_size / MIB:g} MiB")
    lines.append(f"{'sizes:':<10} {'; '.join(sizes)}; set-up probe {SETUP_SIZE} byte")
    lines.append(
        f"{'':<10} (OpenSSH and asyncssh are capped by a fixed 2 MiB window from the first "
        f"round trip, so a smaller file reaches their steady state)"
    )
    lines.append(f"{'reps:':<10} {args.reps}, client order rotated per rep; medians")
    lines.append(
        f"{'net MB/s:':<10} size / (median wall - median wall of a 1-byte transfer), 10^6 B/s; "
        f"CPU s/GiB likewise net of the 1-byte run's CPU"
    )
    for client in run.clients:
        if client.extra_args:
            lines.append(f"{'':<10} {client.name}: {shlex.join(client.extra_args)}")
    return "\n".join(lines)


def _join(values: Sequence[float]) -> str:
    return ",".join(f"{v:g}" for v in values)


def write_results(
    path: Path, machine: dict[str, str], run: WanRun, rows: list[WanSummary], text: str
) -> None:
    args = run.args
    document = {
        "benchmark": "wan",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine,
        "mode": run.mode,
        "settings": {
            "rtts_ms": list(args.rtts) if args.rtts else None,
            "rates_mbit": list(args.rates) if args.rates else None,
            "queue_bytes": args.queue,
            "reps": args.reps,
            "size_bytes": args.size,
            "baseline_size_bytes": args.baseline_size,
            "setup_size_bytes": SETUP_SIZE,
            "max_sessions": args.max_sessions if run.mode == "emulator" else None,
            "server": None if args.server is None else f"{args.server[0]}:{args.server[1]}",
            "ratio_base": RATIO_BASE,
            "directions": run.directions,
            "timeout_base_s": args.timeout_base,
            "timeout_rate_mb_per_s": args.timeout_rate,
            "quick": args.quick,
        },
        "clients": [asdict(c) for c in run.clients],
        "links": [asdict(link) for link in run.links_done],
        "samples": [asdict(s) for s in run.samples],
        "summary": [asdict(r) for r in rows],
        "setup_errors": run.setup_errors,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    path.with_suffix(".txt").write_text(text + "\n")
