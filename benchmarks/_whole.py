"""Whole-command timing for bench_wan.py and bench_loopback.py: what a user sees.

Every transfer is one process, timed from ``Popen`` to ``os.wait4`` (interpreter
start, connect, authentication, the bytes, close, exit). Per setting (a link, or
loopback) and repetition, each client first copies a 1-byte file (its **set-up**),
then every size in turn, all clients on a size before the next size, the client
order rotated every repetition. Medians over the repetitions give:

- whole s, **MB/s** = size / whole-command wall (10^6 B/s): the headline;
- **net MB/s** = size / (whole s - set-up s), both medians of the same client,
  direction and setting: the rate once the connection is up, a second column;
- **vs sftp**: whole-command MB/s over ``sftp-default``'s on the same size,
  direction and setting, in the same run;
- **floor** = 9 RTT + size / link rate + 0.3 s, and whole / floor.

Imported by those scripts (run as files, so this directory is on sys.path).
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _bench_common import (
    GET_NAME,
    PUT_NAME,
    Client,
    Paths,
    Sample,
    _tail,
    build_argv,
    print_failure,
    remove_output,
    rotated,
    run_measured,
    size_label,
    verify_file,
)
from _wan_link import ServerFiles, Source, last_json_object

from sshpipe.testing.sshd import SSHServerInfo

RATIO_BASE = "sftp-default"
SETUP_SIZE = 1
# The floor a whole command is held to (issue 13): about 9 round trips before
# and after the bytes (TCP connect, version exchange, key exchange, auth, channel
# open, SFTP init, OPEN, the last reply, CLOSE), the bytes at the link rate, and
# 0.3 s to start Python and import asyncssh.
FLOOR_RTTS = 9
FLOOR_START_S = 0.3


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Setting:
    """One place to measure: an emulated link, an existing server, or loopback."""

    label: str
    rtt_ms: float | None
    rate_mbit: float | None
    sizes: tuple[int, ...]
    role: str = "matrix"  # "matrix", "thin" (the 20 Mbit/s check) or "loopback"
    data: str = "random, incompressible"  # what the source files hold (the tables say it)

    @property
    def rate_mb_per_s(self) -> float | None:
        return None if self.rate_mbit is None else self.rate_mbit / 8

    def floor_s(self, size: int) -> float | None:
        if self.rtt_ms is None or not self.rate_mb_per_s:
            return None
        return FLOOR_RTTS * self.rtt_ms / 1000 + size / 1e6 / self.rate_mb_per_s + FLOOR_START_S


@dataclass
class WholeSample(Sample):
    setting: str = ""
    kind: str = "transfer"  # "setup" (SETUP_SIZE bytes) or "transfer"
    size_bytes: int = 0
    timeout_s: float = 0.0
    # sshpipe --json output, whatever keys it has.
    sshpipe_stats: dict[str, Any] | None = None


@dataclass
class Row:
    """Medians of one (setting, size, direction, client)."""

    setting: str
    role: str
    rtt_ms: float | None
    rate_mbit: float | None
    size_bytes: int
    direction: str
    client: str
    n_ok: int
    n_failed: int
    whole_s: float | None = None
    whole_min_s: float | None = None
    whole_max_s: float | None = None
    whole_mb_per_s: float | None = None
    ratio_vs_base: float | None = None
    setup_s: float | None = None
    net_mb_per_s: float | None = None
    net_ratio_vs_base: float | None = None
    pct_of_link_net: float | None = None
    floor_s: float | None = None
    whole_over_floor: float | None = None
    cpu_s: float | None = None
    maxrss_mib: float | None = None


@dataclass
class Matrix:
    """One run: what it measures and every sample taken."""

    clients: list[Client]
    directions: list[str]
    settings: list[Setting]
    reps: int
    samples: list[WholeSample] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def transfers_planned(self) -> int:
        per_rep = sum(len(s.sizes) + 1 for s in self.settings)
        return per_rep * self.reps * len(self.clients) * len(self.directions)


@dataclass
class Where:
    """How one setting's samples reach the server."""

    server: SSHServerInfo  # as the clients see it (the emulator's port)
    files: ServerFiles
    sources: dict[int, Source]
    local: Path
    logs: Path
    timeout: Callable[[int], float]  # seconds allowed for a size


# --------------------------------------------------------------------------- measuring


def run_setting(matrix: Matrix, setting: Setting, where: Where) -> None:
    for rep in range(matrix.reps):
        order = rotated(matrix.clients, rep)
        # Set-up first, then the sizes: every client on a size before the next one,
        # so a ratio compares runs minutes apart at most.
        for size, kind in [(SETUP_SIZE, "setup"), *((s, "transfer") for s in setting.sizes)]:
            for position, client in enumerate(order):
                for direction in matrix.directions:
                    sample = run_sample(where, setting, client, direction, kind, size, rep)
                    sample.position = position
                    matrix.samples.append(sample)
                    report_sample(matrix, sample)


def run_sample(
    where: Where, setting: Setting, client: Client, direction: str, kind: str, size: int, rep: int
) -> WholeSample:
    source = where.sources[size]
    get_output = where.local / GET_NAME
    put_output = where.files.path(PUT_NAME)
    paths = Paths(
        source=source.remote if direction == "get" else source.local,
        get_output=get_output,
        put_output=put_output,
        logs=where.logs,
    )
    remove_output(get_output)
    argv = build_argv(client, direction, where.server, paths)
    timeout = where.timeout(size)
    sample = WholeSample(
        rep=rep, position=0, client=client.name, direction=direction, argv=argv,
        setting=setting.label, kind=kind, size_bytes=size, timeout_s=timeout,
    )  # fmt: skip
    slug = re.sub(r"[^\w.-]+", "_", f"{setting.label}-{client.name}-{direction}-{size}")
    log_path = where.logs / f"{slug}-rep{rep}.log"
    measured = run_measured(argv, log_path, timeout)
    sample.wall_s = measured.wall_s
    sample.cpu_s = measured.cpu_s
    sample.maxrss_kib = measured.maxrss_kib
    sample.exit_code = measured.exit_code
    if client.kind == "sshpipe":
        sample.sshpipe_stats = last_json_object(_read(log_path))
    sample.output_tail = "\n".join(
        line for line in _tail(log_path).splitlines() if not line.startswith("{")
    )
    if measured.timed_out:
        sample.error = f"killed after the {timeout:g} s timeout"
    elif measured.exit_code != 0:
        sample.error = f"exit code {measured.exit_code}"
    elif direction == "get":
        sample.error = verify_file(get_output, size, source.sha256)
    else:
        sample.error = where.files.verify(put_output, size, source.sha256)
    sample.ok = sample.error is None
    sample.mb_per_s = size / 1e6 / measured.wall_s if sample.ok else 0.0
    remove_output(get_output)
    if direction == "put":
        where.files.remove(put_output)
    return sample


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def report_sample(matrix: Matrix, sample: WholeSample) -> None:
    done, total = len(matrix.samples), matrix.transfers_planned()
    elapsed = time.monotonic() - matrix.started
    prefix = (
        f"[{done}/{total} {elapsed / 60:4.1f} min] [{sample.setting}] "
        f"[rep {sample.rep + 1}/{matrix.reps}] {sample.client:<12} {sample.direction} "
        f"{size_label(sample.size_bytes):>8}"
    )
    if not sample.ok:
        print_failure(prefix, "FAILED", sample.error, sample.argv, sample.output_tail)
        return
    rate = "" if sample.kind == "setup" else f"{sample.mb_per_s:8.1f} MB/s whole  "
    print(
        f"{prefix}: {rate}{sample.wall_s:7.2f} s  cpu {sample.cpu_s:6.2f} s  "
        f"rss {sample.maxrss_kib / 1024:6.1f} MiB",
        flush=True,
    )
    if sample.output_tail:
        print(f"    (output: {sample.output_tail!r})", flush=True)


def make_sources(matrix: Matrix, files: ServerFiles, scratch: Path) -> dict[int, Source]:
    """One random file per size (set-up included) in the server's root."""
    sizes = sorted({SETUP_SIZE, *(size for s in matrix.settings for size in s.sizes)})
    sources: dict[int, Source] = {}
    for size in sizes:
        print(f"writing {size} random bytes for the source ...", flush=True)
        sources[size] = files.create_source(size, f"source-{size}.bin", scratch)
    os.sync()
    return sources


# --------------------------------------------------------------------------- summaries


def summarize(matrix: Matrix) -> tuple[list[Row], list[Row]]:
    """(transfer rows, set-up rows): medians per setting, size, direction, client."""
    rows: list[Row] = []
    setups: list[Row] = []
    for setting in matrix.settings:
        for direction in matrix.directions:
            setup_group = [
                _row(matrix, setting, SETUP_SIZE, direction, c, "setup", None)
                for c in matrix.clients
            ]
            setups.extend(setup_group)
            setup_of = {r.client: r.whole_s for r in setup_group}
            for size in setting.sizes:
                group = [
                    _row(matrix, setting, size, direction, c, "transfer", setup_of[c.name])
                    for c in matrix.clients
                ]
                base = next((r for r in group if r.client == RATIO_BASE), None)
                for row in group:
                    if base and base.whole_mb_per_s and row.whole_mb_per_s:
                        row.ratio_vs_base = row.whole_mb_per_s / base.whole_mb_per_s
                    if base and base.net_mb_per_s and row.net_mb_per_s:
                        row.net_ratio_vs_base = row.net_mb_per_s / base.net_mb_per_s
                rows.extend(group)
    return rows, setups


def _row(
    matrix: Matrix, setting: Setting, size: int, direction: str, client: Client, kind: str,
    setup_s: float | None,
) -> Row:  # fmt: skip
    mine = [
        s
        for s in matrix.samples
        if s.setting == setting.label and s.client == client.name and s.direction == direction
        and s.kind == kind and s.size_bytes == size
    ]  # fmt: skip
    good = [s for s in mine if s.ok]
    row = Row(
        setting=setting.label, role=setting.role, rtt_ms=setting.rtt_ms,
        rate_mbit=setting.rate_mbit, size_bytes=size, direction=direction, client=client.name,
        n_ok=len(good), n_failed=len(mine) - len(good), floor_s=setting.floor_s(size),
    )  # fmt: skip
    if not good:
        return row
    walls = [s.wall_s for s in good]
    row.whole_s = statistics.median(walls)
    row.whole_min_s, row.whole_max_s = min(walls), max(walls)
    row.whole_mb_per_s = size / 1e6 / row.whole_s
    row.cpu_s = statistics.median(s.cpu_s for s in good)
    row.maxrss_mib = statistics.median(s.maxrss_kib / 1024 for s in good)
    if row.floor_s:
        row.whole_over_floor = row.whole_s / row.floor_s
    if setup_s is not None and kind == "transfer":
        row.setup_s = setup_s
        if row.whole_s > setup_s:
            row.net_mb_per_s = size / 1e6 / (row.whole_s - setup_s)
            if setting.rate_mb_per_s:
                row.pct_of_link_net = 100 * row.net_mb_per_s / setting.rate_mb_per_s
    return row
