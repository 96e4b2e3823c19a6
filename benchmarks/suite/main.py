"""``bash scripts/bench.sh [--quick|--standard|--full] [--out DIR] [--clients ...]
[--scenarios ...]``: start sshd, run the preset, write DIR/results.{json,md} and PNGs."""

from __future__ import annotations

import argparse
import datetime
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _bench_common import REPO_ROOT, machine_info, positive_int, scratch_dir

from sshpipe.testing.sshd import openssh_server

from .clients import ALL_CLIENTS, BY_NAME
from .combine import combine
from .data import make_sources
from .plots import write_plots
from .report import summarize, write
from .runner import Run, run_scenario, view
from .scenarios import PRESETS

RESULTS = REPO_ROOT / "benchmarks" / "results"
# Stock sshd's MaxSessions: what a default server allows.
STOCK_MAX_SESSIONS = 10


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__)
    preset = parser.add_mutually_exclusive_group()
    for name in PRESETS:
        preset.add_argument(f"--{name}", dest="preset", action="store_const", const=name)
    parser.set_defaults(preset="standard")
    parser.add_argument("--out", type=Path, help="results dir (default results/suite[-PRESET])")
    parser.add_argument("--clients", type=_names, help="comma-separated, default every client: "
                        + ",".join(c.name for c in ALL_CLIENTS))  # fmt: skip
    parser.add_argument("--scenarios", type=_names, help="comma-separated scenario labels")
    parser.add_argument("--directions", type=_names, default=["get", "put"])
    parser.add_argument("--reps", type=positive_int, help="repetitions (default: the preset's)")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=REPO_ROOT.parent / "bench-scratch",
        help="scratch space for sshd, sources and outputs (not /tmp: tmpfs)",
    )
    parser.add_argument("--list", action="store_true", help="list clients and scenarios")
    parser.add_argument("--combine", type=Path, nargs="+", metavar="DIR",
                        help="measure nothing: one summary and the plots from these runs' "
                        "results.json, into --out")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.combine:
        return combine(args.out or RESULTS / "suite", args.combine)
    preset = PRESETS[args.preset]
    scenarios = preset.scenarios
    if args.list:
        for client in ALL_CLIENTS:
            print(f"client   {client.name:<14} {client.describe}")
        for name, p in PRESETS.items():
            print(f"preset   {name:<9} " + ", ".join(s.label for s in p.scenarios))
        return 0
    if args.scenarios:
        known = {s.label: s for p in PRESETS.values() for s in p.scenarios if s.label}
        mine = {s.label: s for s in scenarios}
        missing = [n for n in args.scenarios if n not in mine and n not in known]
        if missing:
            print(f"unknown scenario(s) {missing}; --list shows them", file=sys.stderr)
            return 2
        scenarios = tuple(mine.get(n) or known[n] for n in args.scenarios)
    names = args.clients or [c.name for c in ALL_CLIENTS]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        print(f"unknown client(s) {unknown}; --list shows them", file=sys.stderr)
        return 2
    clients, records = [], []
    for name in names:
        client = BY_NAME[name]
        skip = client.skip_reason()
        records.append({"name": name, "family": client.family, "describe": client.describe,
                        "version": "" if skip else client.version(), "skip": skip,
                        "trees": list(client.trees), "tree_note": client.tree_note})  # fmt: skip
        if skip:
            print(f"SKIPPED {name}: {skip}", flush=True)
        else:
            clients.append(client)
    out = args.out or RESULTS / ("suite" if args.preset == "standard" else f"suite-{args.preset}")
    meta: dict[str, Any] = {
        "preset": args.preset,
        "command": "bash scripts/bench.sh " + shlex.join(list(argv or sys.argv[1:])),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine_info(),
        "clients": records,
    }
    with (
        scratch_dir(args.workdir) as scratch,
        openssh_server(scratch / "sshd", max_sessions=STOCK_MAX_SESSIONS) as srv,
    ):
        files, trees = make_sources(scenarios, srv.root, preset.setup)
        run = Run(clients=clients, directions=tuple(args.directions), scenarios=scenarios,
                  reps=args.reps or preset.reps, setup=preset.setup, files=files, trees=trees,
                  work=scratch / "work")  # fmt: skip
        run.work.mkdir()
        for scenario in scenarios:
            print(f"== {scenario.label}", flush=True)
            with view(run, scenario, srv, scratch) as seen:
                run_scenario(run, scenario, seen)
        rows = summarize(run)
    write(out, run, rows, meta)
    plots = write_plots(out, rows)
    bad = [s for s in run.samples if s.status == "failed"]
    print(f"wrote {out}/results.json, results.md, {', '.join(plots) or 'no plots'}; "
          f"{len(run.samples)} samples, {len(bad)} failed", flush=True)  # fmt: skip
    # A wrong byte or a crash is a failure of the run; a timeout is a (slow) result.
    return 1 if bad else 0
