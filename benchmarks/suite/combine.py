"""``--combine DIR ...``: one summary and the plots from several runs' results.json.

A run writes its results only at its end, so a long preset is best run one
scenario at a time (``--scenarios NAME --out DIR``); this puts those runs
together: the plots across scenarios (MB/s against RTT needs every RTT) and
one table of sshpipe against OpenSSH sftp and the fastest other client of each
row, with each run's date, commit and load average said, since they differ.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _bench_common import size_label

from .plots import write_plots
from .report import Row, markdown_table

SSHPIPE = "sshpipe"
SFTPS = ("sftp-default", "sftp-tuned")


def combine(out: Path, sources: list[Path]) -> int:
    rows: list[Row] = []
    runs: list[dict[str, Any]] = []
    for source in sources:
        data = json.loads((source / "results.json").read_text())
        rows += [Row(**row) for row in data["rows"]]
        machine = data.get("machine", {})
        runs.append({
            "dir": str(source), "date": data.get("date"), "command": data.get("command"),
            "sshpipe": machine.get("sshpipe"), "load": machine.get("load average at the start"),
            "scenarios": sorted({row["scenario"] for row in data["rows"]}),
        })  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(out, rows)
    (out / "summary.md").write_text(summary(rows, runs, plots))
    print(f"wrote {out}/summary.md, {', '.join(plots) or 'no plots'} from {len(runs)} runs")
    return 0


def summary(rows: list[Row], runs: list[dict[str, Any]], plots: list[str]) -> str:
    out = ["# sshpipe benchmark suite: runs combined", ""]
    out += markdown_table(
        ["scenarios", "measured", "sshpipe", "load at start", "command"],
        [[", ".join(r["scenarios"]), r["date"] or "—", r["sshpipe"] or "—", r["load"] or "—",
          f"`{r['command']}`"] for r in runs],
    )  # fmt: skip
    out += ["", "Whole command, medians of each run; the fastest peer is the fastest client "
            "that is not sshpipe (its CLI or API) on the same row.", ""]  # fmt: skip
    items: dict[tuple[str, str, int, str], list[Row]] = {}
    for row in rows:
        items.setdefault((row.scenario, row.item, row.size_bytes, row.direction), []).append(row)
    lines = []
    for (scenario, item, size, direction), mine in items.items():
        done = {r.client: r for r in mine if r.whole_s is not None and r.n_ok}
        ours = done.get(SSHPIPE)
        peers = [r for name, r in done.items() if not name.startswith(SSHPIPE)]
        if ours is None or ours.whole_s is None or not peers:
            continue
        best = min(peers, key=lambda r: r.whole_s or 0.0)
        what = "1 B (set-up)" if item == "setup" else (
            f"tree {item}" if mine[0].kind == "tree" else size_label(size))  # fmt: skip
        lines.append([
            scenario, what, direction, f"{ours.whole_s:.2f}",
            *(f"{done[c].whole_s:.2f}" if c in done else "—" for c in SFTPS),
            best.client, f"{best.whole_s:.2f}", f"{(best.whole_s or 0.0) / ours.whole_s:.2f}x",
        ])  # fmt: skip
    out += markdown_table(["scenario", "item", "dir", "sshpipe s", "sftp s", "sftp tuned s",
                   "fastest peer", "its s", "its s / sshpipe's"], lines)  # fmt: skip
    if plots:
        out += ["", *(f"![{name}]({name})" for name in plots)]
    return "\n".join(out) + "\n"
