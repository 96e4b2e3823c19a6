"""The suite's loop: one sshd, one emulator per scenario, every client on every item
(set-up, each size, each tree) before the next item, the client order rotated every
repetition, every output checked by sha256 (a wrong byte is a failure, not a number).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from _bench_common import (
    Sample,
    _tail,
    print_failure,
    remove_output,
    rotated,
    run_measured,
    size_label,
    verify_file,
)
from _tree_files import Tree, compare_tree, remove_tree
from _wan_link import Link, LinkRecord, emulated_view

from sshpipe.testing.sshd import SSHServerInfo

from .clients import Job, SuiteClient
from .data import SETUP_SIZE, FileSource
from .scenarios import Scenario

# A sample slower than this is stopped and recorded as a timeout (so one peer
# that keeps one request in flight cannot take an hour of the run); a client
# that timed out skips the rest of its item in that scenario, and every larger
# file (in the standard runs the timeouts were 17-38 % of the time at 100 and
# 300 ms; --full's 256 MiB and 1 GiB would each have waited out 2-9 minutes more).
TIMEOUT_BASE_S = 20.0
TIMEOUT_MIN_MB_PER_S = 2.0
TIMEOUT_PER_FILE_S = 0.2


@dataclass
class SuiteSample(Sample):
    scenario: str = ""
    kind: str = "file"  # "setup", "file" or "tree"
    item: str = ""  # size label or tree name
    size_bytes: int = 0
    files: int = 1
    timeout_s: float = 0.0
    status: str = "ok"  # "ok", "failed", "timeout" or "skipped"


@dataclass
class Run:
    clients: list[SuiteClient]
    directions: tuple[str, ...]
    scenarios: tuple[Scenario, ...]
    reps: int
    setup: bool
    files: dict[tuple[str, int], FileSource]
    trees: dict[str, Tree]
    work: Path
    samples: list[SuiteSample] = field(default_factory=list)
    links: list[LinkRecord] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Item:
    kind: str
    label: str
    file: FileSource | None = None
    tree: Tree | None = None

    @property
    def size(self) -> int:
        return self.file.size if self.file else self.tree.bytes if self.tree else 0

    @property
    def files(self) -> int:
        return self.tree.files if self.tree else 1

    def timeout(self) -> float:
        return (
            TIMEOUT_BASE_S + self.size / 1e6 / TIMEOUT_MIN_MB_PER_S
            + self.files * TIMEOUT_PER_FILE_S * (self.tree is not None)
        )  # fmt: skip


def items_of(run: Run, scenario: Scenario) -> list[Item]:
    items = []
    if run.setup:
        items.append(Item("setup", "setup", file=run.files[("random", SETUP_SIZE)]))
    for size in scenario.sizes:
        items.append(Item("file", size_label(size), file=run.files[(scenario.data, size)]))
    for spec in scenario.trees:
        items.append(Item("tree", spec.name, tree=run.trees[spec.name]))
    return items


@contextlib.contextmanager
def view(
    run: Run, scenario: Scenario, srv: SSHServerInfo, scratch: Path
) -> Iterator[SSHServerInfo]:
    """The server as clients see it in ``scenario``: directly, or through an emulator."""
    if scenario.rtt_ms is None:
        yield srv
        return
    link = Link(label=scenario.label, rtt_ms=scenario.rtt_ms, rate_mbit=scenario.rate_mbit)
    record = LinkRecord(label=link.label, rtt_ms=link.rtt_ms, rate_mbit=link.rate_mbit)
    run.links.append(record)
    with emulated_view(link, srv, None, scratch, run.work, record) as seen:
        yield seen


def run_scenario(run: Run, scenario: Scenario, srv: SSHServerInfo) -> None:
    items = items_of(run, scenario)
    # (client, direction, item) not to measure again, and why.
    gave_up: dict[tuple[str, str, str], str] = {}
    for rep in range(run.reps):
        # rotated() is typed for the older scripts' Client; any sequence rotates.
        order: list[SuiteClient] = rotated(run.clients, rep)  # type: ignore[arg-type]
        for item in items:
            for position, client in enumerate(order):
                for direction in run.directions:
                    if item.kind == "tree" and direction not in client.trees:
                        continue
                    key = (client.name, direction, item.label)
                    sample = new_sample(scenario, client, direction, item, rep, position)
                    if key in gave_up:
                        sample.status, sample.error = "skipped", gave_up[key]
                    else:
                        measure(run, sample, client, item, srv)
                        if sample.status == "timeout":
                            gave_up.update(given_up_after(items, item, client.name, direction))
                    run.samples.append(sample)
                    report(run, sample)


def given_up_after(
    items: list[Item], slow: Item, client: str, direction: str
) -> dict[tuple[str, str, str], str]:
    """What a timeout on ``slow`` spares the run: the same item in later reps and, for
    a file, every larger file (it could only be slower)."""
    skipped = {(client, direction, slow.label): "timed out in an earlier rep"}
    if slow.kind == "file":
        for item in items:
            if item.kind == "file" and item.size > slow.size:
                reason = f"timed out at {slow.label}: larger files skipped"
                skipped[(client, direction, item.label)] = reason
    return skipped


def new_sample(
    scenario: Scenario, client: SuiteClient, direction: str, item: Item, rep: int, position: int
) -> SuiteSample:
    return SuiteSample(
        rep=rep, position=position, client=client.name, direction=direction, argv=[],
        scenario=scenario.label, kind=item.kind, item=item.label, size_bytes=item.size,
        files=item.files, timeout_s=item.timeout(),
    )  # fmt: skip


def measure(
    run: Run, sample: SuiteSample, client: SuiteClient, item: Item, srv: SSHServerInfo
) -> None:
    """Copy ``item`` once with ``client``, time it, check every byte, clean up."""
    source = item.file.path if item.file else item.tree.path if item.tree else None
    assert source is not None
    name = f"out-{client.name}-{sample.direction}-{sample.kind}"
    dst = run.work / "local" / name if sample.direction == "get" else srv.root / name
    dst.parent.mkdir(parents=True, exist_ok=True)
    _remove(dst)
    job = Job(direction=sample.direction, what="tree" if item.tree else "file", src=source,
              dst=dst, srv=srv, work=run.work)  # fmt: skip
    sample.argv = client.argv(job)
    slug = re.sub(r"[^\w.-]+", "_", f"{sample.scenario}-{name}-{item.label}-rep{sample.rep}")
    log = run.work / f"{slug}.log"
    measured = run_measured(sample.argv, log, sample.timeout_s)
    sample.wall_s, sample.cpu_s = measured.wall_s, measured.cpu_s
    sample.maxrss_kib, sample.exit_code = measured.maxrss_kib, measured.exit_code
    sample.output_tail = _tail(log)
    if measured.timed_out:
        sample.status, sample.error = "timeout", f"stopped after the {sample.timeout_s:g} s limit"
    elif measured.exit_code != 0:
        sample.status, sample.error = "failed", f"exit code {measured.exit_code}"
    else:
        if item.tree:
            sample.error = compare_tree(item.tree.manifest, dst)
        else:
            assert item.file is not None
            sample.error = verify_file(dst, item.file.size, item.file.sha256)
        sample.status = "failed" if sample.error else "ok"
    sample.ok = sample.status == "ok"
    if sample.ok:
        sample.mb_per_s = sample.size_bytes / 1e6 / sample.wall_s
    _remove(dst)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        remove_tree(path)
    else:
        remove_output(path)


def report(run: Run, sample: SuiteSample) -> None:
    elapsed = time.monotonic() - run.started
    prefix = (
        f"[{len(run.samples)} {elapsed / 60:4.1f} min] [{sample.scenario}] "
        f"[rep {sample.rep + 1}/{run.reps}] {sample.client:<14} {sample.direction} "
        f"{sample.item:>9}"
    )
    if sample.status == "skipped":
        print(f"{prefix}: skipped ({sample.error})", flush=True)
        return
    if not sample.ok:
        print_failure(prefix, sample.status.upper(), sample.error, sample.argv, sample.output_tail)
        return
    rate = "" if sample.kind == "setup" else f"{sample.mb_per_s:8.1f} MB/s  "
    print(
        f"{prefix}: {rate}{sample.wall_s:7.2f} s  cpu {sample.cpu_s:6.2f} s  "
        f"rss {sample.maxrss_kib / 1024:6.1f} MiB",
        flush=True,
    )
