"""The suite's PNGs (matplotlib, Agg): MB/s against RTT, time against size at 100 ms,
files/s for trees, CPU-s per GiB on loopback. A plot with no data is not written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from _bench_common import size_label

from .report import Row

DIRECTIONS = ("get", "put")


def write_plots(out_dir: Path, rows: list[Row]) -> list[str]:
    """The names of the PNGs written (none when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plots", flush=True)
        return []
    written = []
    for name, draw in PLOTS.items():
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        if draw(rows, axes):
            for ax in axes:
                ax.grid(True, alpha=0.3)
            if axes[1].get_legend_handles_labels()[0]:  # bar plots carry their labels
                axes[1].legend(fontsize=7, loc="best")
            fig.tight_layout()
            fig.savefig(out_dir / name, dpi=90)
            written.append(name)
        plt.close(fig)
    return written


def _files(rows: list[Row]) -> list[Row]:
    return [r for r in rows if r.kind == "file" and r.mb_per_s and r.data == "random"]


def _clients(rows: list[Row]) -> list[str]:
    return list(dict.fromkeys(r.client for r in rows))


_MARKERS = "osD^v<>phX*"


def _style(client: str, index: int) -> dict[str, Any]:
    """A line's look: seventeen clients need more than the ten default colours, and
    sshpipe's lines stand out."""
    import matplotlib

    ours = client.startswith("sshpipe")
    return {
        "color": matplotlib.colormaps["tab20"](index % 20),
        "marker": _MARKERS[index % len(_MARKERS)],
        "linewidth": 2.8 if ours else 1.2,
        "markersize": 7 if ours else 5,
        "zorder": 3 if ours else 2,
        "label": client,
    }


def mbps_vs_rtt(rows: list[Row], axes: Any) -> bool:
    link = [r for r in _files(rows) if r.rtt_ms and r.rate_mbit == 1000]
    if not link:
        return False
    size = max(r.size_bytes for r in link)
    for ax, direction in zip(axes, DIRECTIONS, strict=True):
        for index, client in enumerate(_clients(link)):
            points = sorted((r.rtt_ms, r.mb_per_s) for r in link if r.client == client
                            and r.direction == direction and r.size_bytes == size)  # fmt: skip
            if points:
                ax.plot(*zip(*points, strict=True), **_style(client, index))
        ax.set(xscale="log", yscale="log", xlabel="RTT (ms), 1 Gbit/s",
               title=f"{direction} {size_label(size)}: whole-command MB/s")  # fmt: skip
    return True


def time_vs_size(rows: list[Row], axes: Any) -> bool:
    at100 = [r for r in _files(rows) if r.rtt_ms == 100 and r.rate_mbit == 1000]
    if not at100:
        return False
    for ax, direction in zip(axes, DIRECTIONS, strict=True):
        for index, client in enumerate(_clients(at100)):
            points = sorted((r.size_bytes / (1 << 20), r.whole_s) for r in at100
                            if r.client == client and r.direction == direction)  # fmt: skip
            if points:
                ax.plot(*zip(*points, strict=True), **_style(client, index))
        ax.set(xscale="log", yscale="log", xlabel="file size (MiB)", ylabel="whole s",
               title=f"{direction} at 100 ms, 1 Gbit/s: whole-command time")  # fmt: skip
    return True


def _bars(axes: Any, picked: list[Row], value: Callable[[Row], float], title: str) -> bool:
    if not picked:
        return False
    for ax, direction in zip(axes, DIRECTIONS, strict=True):
        mine = [r for r in picked if r.direction == direction]
        labels = [f"{r.client} [{r.scenario} {r.item}]" for r in mine]
        ax.barh(labels, [value(r) for r in mine])
        ax.set(title=f"{direction}: {title}")
        ax.tick_params(axis="y", labelsize=7)
    return True


def tree_files_per_s(rows: list[Row], axes: Any) -> bool:
    picked = [r for r in rows if r.kind == "tree" and r.files_per_s]
    return _bars(axes, picked, lambda r: r.files_per_s or 0.0, "trees, files/s (whole command)")


def cpu_per_gib(rows: list[Row], axes: Any) -> bool:
    loop = [r for r in _files(rows) if r.rtt_ms is None and r.cpu_s_per_gib]
    if not loop:
        return False
    size = max(r.size_bytes for r in loop)
    picked = [r for r in loop if r.size_bytes == size]
    return _bars(axes, picked, lambda r: r.cpu_s_per_gib or 0.0,
                 f"loopback {size_label(size)}, client CPU-s per GiB")  # fmt: skip


PLOTS: dict[str, Callable[[list[Row], Any], bool]] = {
    "mbps-vs-rtt.png": mbps_vs_rtt,
    "time-vs-size-100ms.png": time_vs_size,
    "tree-files-per-s.png": tree_files_per_s,
    "cpu-per-gib-loopback.png": cpu_per_gib,
}
