"""bench_tree.py's results: samples and summaries, progress lines, the tables and the JSON."""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _bench_common import Client, Sample, _indent
from _tree_files import Tree, TreeSpec
from _wan_link import Link, LinkRecord
from _wan_report import _fmt

RATIO_BASE = "sftp-r"
PROBE = "probe"


# --------------------------------------------------------------------------- data


@dataclass
class TreeSample(Sample):
    link: str = ""
    tree: str = ""  # the spec's name; PROBE for the set-up run
    moved: str = ""  # the tree actually moved: "small" or a subset, "small-first100"
    kind: str = "transfer"  # "setup" (an empty directory) or "transfer"
    files: int = 0
    size_bytes: int = 0
    timeout_s: float = 0.0
    files_per_s: float = 0.0  # gross, like mb_per_s
    # sshpipe --json output, whatever keys it has.
    sshpipe_stats: dict[str, Any] | None = None
    # A verified copy whose client said something odd (sshpipe's own counts).
    warning: str | None = None


@dataclass
class TreeSummary:
    tree: str
    link: str
    rtt_ms: float | None
    rate_mbit: float | None
    client: str
    direction: str
    moved: str
    files: int
    size_bytes: int
    n_ok: int
    n_failed: int
    n_setup_failed: int = 0
    median_wall_s: float | None = None
    median_setup_wall_s: float | None = None
    net_files_per_s: float | None = None
    net_files_min: float | None = None
    net_files_max: float | None = None
    net_mb_per_s: float | None = None
    gross_files_per_s: float | None = None
    gross_mb_per_s: float | None = None
    ratio_vs_base: float | None = None  # net files/s over sftp-r's
    pct_of_link: float | None = None
    median_cpu_s: float | None = None
    median_maxrss_mib: float | None = None
    # sshpipe's own clock (--json "seconds": scan and copy, without start-up and connect).
    median_sshpipe_seconds: float | None = None
    sshpipe_mb_per_s: float | None = None


@dataclass
class TreeRun:
    args: argparse.Namespace
    clients: list[Client]
    directions: list[str]
    links: list[Link]
    specs: list[TreeSpec]
    baseline_files: dict[str, int]  # link label -> small files a baseline moves
    trees: dict[tuple[str, int], Tree] = field(default_factory=dict)  # (spec, files) -> tree
    links_done: list[LinkRecord] = field(default_factory=list)
    samples: list[TreeSample] = field(default_factory=list)
    setup_errors: list[str] = field(default_factory=list)

    def count_for(self, spec: TreeSpec, link: Link, client: Client) -> int:
        """Small files ``client`` moves: sshpipe all of them, the others a subset."""
        if client.kind == "sshpipe":
            return spec.files
        return min(spec.files, self.baseline_files[link.label])

    def tree_for(self, spec: TreeSpec, link: Link, client: Client) -> Tree:
        return self.trees[(spec.name, self.count_for(spec, link, client))]

    @property
    def probe(self) -> Tree:
        """The set-up run's tree: one empty directory."""
        return self.trees[(PROBE, 0)]


# --------------------------------------------------------------------------- progress


class Progress:
    """Counts runs against a model's estimate and rescales what is left by how far
    the runs so far were off it."""

    def __init__(self, estimates: list[float]) -> None:
        self.total = len(estimates)
        self.left = sum(estimates)
        self.done = 0
        self.estimated_done = 0.0
        self.started = time.monotonic()

    def step(self, estimate: float) -> str:
        self.done += 1
        self.left -= estimate
        self.estimated_done += estimate
        elapsed = time.monotonic() - self.started
        scale = elapsed / self.estimated_done if self.estimated_done > 0 else 1.0
        return (
            f"[{self.done}/{self.total} {_clock(elapsed)} elapsed, "
            f"~{_clock(max(0.0, self.left) * scale)} left]"
        )


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


def report_sample(sample: TreeSample, reps: int, progress: str) -> None:
    prefix = (
        f"{progress} [{sample.link}] [rep {sample.rep + 1}/{reps}] {sample.tree:<6} "
        f"{sample.client:<9} {sample.direction} {sample.kind:<8}"
    )
    if not sample.ok:
        print(f"{prefix}: FAILED: {sample.error}", file=sys.stderr, flush=True)
        print(f"    command: {shlex.join(sample.argv)}", file=sys.stderr)
        if sample.output_tail:
            print("    output:\n" + _indent(sample.output_tail), file=sys.stderr, flush=True)
        return
    rate = (
        ""
        if sample.kind == "setup"
        else f"{sample.files:6} files {sample.files_per_s:8.1f} files/s {sample.mb_per_s:7.1f} "
        "MB/s gross  "
    )
    print(
        f"{prefix}: {rate}{sample.wall_s:7.2f} s  cpu {sample.cpu_s:6.2f} s  "
        f"rss {sample.maxrss_kib / 1024:6.1f} MiB",
        flush=True,
    )
    if sample.sshpipe_stats and sample.kind == "transfer":
        shown = {k: v for k, v in sample.sshpipe_stats.items() if k not in ("source", "target")}
        text = json.dumps(shown, separators=(",", ":"))
        print(f"    sshpipe: {text[:400]}{' ...' if len(text) > 400 else ''}", flush=True)
    if sample.warning:
        print(f"    WARNING: {sample.warning}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- summaries


def summarize(run: TreeRun) -> list[TreeSummary]:
    rows: list[TreeSummary] = []
    for spec in run.specs:
        for link in run.links:
            for direction in run.directions:
                group = [_summarize_one(run, spec, link, c, direction) for c in run.clients]
                base = next((r.net_files_per_s for r in group if r.client == RATIO_BASE), None)
                for row in group:
                    if base and row.net_files_per_s is not None:
                        row.ratio_vs_base = row.net_files_per_s / base
                rows.extend(group)
    return rows


def _summarize_one(
    run: TreeRun, spec: TreeSpec, link: Link, client: Client, direction: str
) -> TreeSummary:
    def mine(tree: str) -> list[TreeSample]:
        return [
            s
            for s in run.samples
            if s.link == link.label
            and s.client == client.name
            and s.direction == direction
            and s.tree == tree
        ]

    count = run.count_for(spec, link, client)
    tree = run.trees.get((spec.name, count))
    transfers, setups = mine(spec.name), mine(PROBE)
    good, good_setup = [s for s in transfers if s.ok], [s for s in setups if s.ok]
    row = TreeSummary(
        tree=spec.name,
        link=link.label,
        rtt_ms=link.rtt_ms,
        rate_mbit=link.rate_mbit,
        client=client.name,
        direction=direction,
        moved=tree.label if tree else "",
        files=tree.files if tree else count,
        size_bytes=tree.bytes if tree else 0,
        n_ok=len(good),
        n_failed=len(transfers) - len(good),
        n_setup_failed=len(setups) - len(good_setup),
    )
    if not good:
        return row
    row.median_wall_s = statistics.median(s.wall_s for s in good)
    row.gross_files_per_s = row.files / row.median_wall_s
    row.gross_mb_per_s = row.size_bytes / 1e6 / row.median_wall_s
    row.median_cpu_s = statistics.median(s.cpu_s for s in good)
    row.median_maxrss_mib = statistics.median(s.maxrss_kib / 1024 for s in good)
    own = [s.sshpipe_stats.get("seconds") for s in good if s.sshpipe_stats]
    own_seconds = [float(x) for x in own if isinstance(x, int | float)]
    if own_seconds:
        row.median_sshpipe_seconds = statistics.median(own_seconds)
        row.sshpipe_mb_per_s = row.size_bytes / 1e6 / row.median_sshpipe_seconds
    if not good_setup:
        return row
    setup = statistics.median(s.wall_s for s in good_setup)
    row.median_setup_wall_s = setup
    if row.median_wall_s <= setup:
        return row
    net_wall = row.median_wall_s - setup
    row.net_files_per_s = row.files / net_wall
    row.net_mb_per_s = row.size_bytes / 1e6 / net_wall
    per_rep = [row.files / (s.wall_s - setup) for s in good if s.wall_s > setup]
    row.net_files_min, row.net_files_max = min(per_rep), max(per_rep)
    if link.rate_mb_per_s:
        row.pct_of_link = 100 * row.net_mb_per_s / link.rate_mb_per_s
    return row


# --------------------------------------------------------------------------- text


def format_tables(run: TreeRun, rows: list[TreeSummary]) -> str:
    return "\n\n".join(
        _format_tree(run, spec, [r for r in rows if r.tree == spec.name]) for spec in run.specs
    )


def _format_tree(run: TreeRun, spec: TreeSpec, rows: list[TreeSummary]) -> str:
    header = (
        f"{'link':<10} {'dir':<3} {'client':<9} {'files':>6} {'MB':>7} {'files/s':>8} "
        f"{'min–max':>13} {'MB/s':>7} {'own MB/s':>8} {'wall s':>7} {'setup s':>7} "
        f"{'vs ' + RATIO_BASE:>9} {'% link':>6} {'RSS MiB':>7} {'ok/runs':>7}"
    )
    lines = [f"tree {spec.name}: {spec.describe()}", *_moved_lines(run, spec), header]
    lines.append("-" * len(header))
    previous = None
    for r in rows:
        if previous is not None and (r.link, r.direction) != previous:
            lines.append("")
        previous = (r.link, r.direction)
        spread = "-" if r.net_files_min is None else f"{r.net_files_min:.1f}–{r.net_files_max:.1f}"
        runs = f"{r.n_ok}/{r.n_ok + r.n_failed}" + ("*" if r.n_setup_failed else "")
        link = f"{r.rtt_ms:g} ms" if r.rtt_ms is not None else r.link
        lines.append(
            f"{link:<10} {r.direction:<3} {r.client:<9} {r.files:>6} "
            f"{r.size_bytes / 1e6:>7.2f} {_fmt(r.net_files_per_s, '.1f'):>8} {spread:>13} "
            f"{_fmt(r.net_mb_per_s, '.2f'):>7} {_fmt(r.sshpipe_mb_per_s, '.2f'):>8} "
            f"{_fmt(r.median_wall_s, '.2f'):>7} "
            f"{_fmt(r.median_setup_wall_s, '.2f'):>7} {_fmt(r.ratio_vs_base, '.2f', 'x'):>9} "
            f"{_fmt(r.pct_of_link, '.1f', '%'):>6} {_fmt(r.median_maxrss_mib, '.1f'):>7} "
            f"{runs:>7}"
        )
    if any(r.n_setup_failed for r in rows):
        lines.append("* a set-up probe failed too")
    return "\n".join(lines)


def _moved_lines(run: TreeRun, spec: TreeSpec) -> list[str]:
    """Which client moved how much of this tree, per link."""
    groups: dict[bool, list[Client]] = {}
    for client in run.clients:
        groups.setdefault(client.kind == "sshpipe", []).append(client)
    lines = []
    for clients in groups.values():
        parts = []
        for link in run.links:
            tree = run.trees.get((spec.name, run.count_for(spec, link, clients[0])))
            if tree is not None:
                parts.append(
                    f"{tree.label} ({tree.files} files, {tree.bytes / 1e6:.1f} MB) at {link.label}"
                )
        lines.append(f"  {', '.join(c.name for c in clients)} moved: {'; '.join(parts)}")
    return lines


def format_header(machine: dict[str, str], run: TreeRun) -> str:
    args = run.args
    lines = [f"{key + ':':<10} {value}" for key, value in machine.items()]
    lines.append(
        f"{'links:':<10} user-space emulator (python -m sshpipe.testing.linkemu) "
        "in front of one sshd "
        f"with MaxSessions {args.max_sessions}; RTT {','.join(f'{r:g}' for r in args.rtt)} ms, "
        f"rate {args.rate:g} Mbit/s, queue {args.queue or 'emulator default'}"
    )
    lines.append(f"{'trees:':<10} " + "; ".join(f"{s.name} {s.describe()}" for s in run.specs))
    counts = ", ".join(f"{n} at {label}" for label, n in run.baseline_files.items())
    lines.append(
        f"{'subsets:':<10} sshpipe moves every tree whole; the others the first N small files "
        f"in path order ({counts}), mixed's large files shrunk by the same fraction"
    )
    lines.append(
        f"{'reps:':<10} {args.reps}, client order rotated per rep; medians; seed {args.seed}"
    )
    lines.append(
        f"{'net:':<10} files/s and MB/s = files or bytes / (median wall - median wall of an "
        f"empty directory, same client and direction); % link = net MB/s × 8 / rate; "
        f"vs {RATIO_BASE} = ratio of net files/s; own MB/s (sshpipe) = bytes / the "
        f"seconds of its --json (scan and copy, after connecting)"
    )
    lines.append(
        f"{'verified:':<10} each copy against its source (relative paths, dirs, sizes, sha256)"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- JSON


def write_results(
    path: Path, machine: dict[str, str], run: TreeRun, rows: list[TreeSummary], text: str
) -> None:
    args = run.args
    document = {
        "benchmark": "tree",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine,
        "settings": {
            "rtts_ms": list(args.rtt),
            "rate_mbit": args.rate,
            "queue_bytes": args.queue,
            "reps": args.reps,
            "seed": args.seed,
            "max_sessions": args.max_sessions,
            "baseline_files": run.baseline_files,
            "ratio_base": RATIO_BASE,
            "directions": run.directions,
            "timeout_base_s": args.timeout_base,
            "timeout_rate_mb_per_s": args.timeout_rate,
            "timeout_files_per_s": args.timeout_files,
            "quick": args.quick,
        },
        "trees": [asdict(spec) for spec in run.specs],
        "moved_trees": [
            {
                "label": t.label,
                "spec": t.spec.name,
                "files": t.files,
                "bytes": t.bytes,
                "dirs": len(t.manifest.dirs),
            }
            for t in run.trees.values()
        ],
        "clients": [asdict(c) for c in run.clients],
        "links": [asdict(link) for link in run.links_done],
        "samples": [asdict(s) for s in run.samples],
        "summary": [asdict(r) for r in rows],
        "setup_errors": run.setup_errors,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    path.with_suffix(".txt").write_text(text + "\n")
