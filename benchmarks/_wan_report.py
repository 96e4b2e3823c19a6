"""The emulator's line in a report (bench_wan.py, bench_tree.py): its CPU per setting."""

from __future__ import annotations

from _wan_link import LinkRecord


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


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
