"""The benchmark suite's loop (``benchmarks/suite/runner.py``): what a timeout spares.

The suite runs as a script from ``benchmarks/`` (its modules import each other
by their top-level names), so this puts that directory on the path as it does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from suite import runner  # noqa: E402
from suite.clients.base import SuiteClient  # noqa: E402
from suite.data import SETUP_SIZE, FileSource  # noqa: E402
from suite.scenarios import Scenario  # noqa: E402

MIB = 1 << 20
SIZES = (8 * MIB, 64 * MIB, 256 * MIB)


def _run(tmp_path: Path, reps: int) -> runner.Run:
    files = {
        ("random", size): FileSource(size=size, data="random", sha256="", path=tmp_path / str(size))
        for size in (SETUP_SIZE, *SIZES)
    }
    clients = [
        SuiteClient(name=name, family=name, describe=name, argv=lambda job: [])
        for name in ("slow", "fast")
    ]
    return runner.Run(clients=clients, directions=("get", "put"), scenarios=(), reps=reps,
                      setup=True, files=files, trees={}, work=tmp_path)  # fmt: skip


def test_a_timeout_skips_that_file_in_later_reps_and_every_larger_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client slow past the limit at 64 MiB is not kept waiting at 256 MiB (nor at
    64 MiB again); its other direction, the smaller file and the other client run."""
    measured: list[tuple[int, str, str, str]] = []

    def measure(run: Any, sample: runner.SuiteSample, client: Any, item: Any, srv: Any) -> None:
        measured.append((sample.rep, sample.client, sample.direction, sample.item))
        slow = (sample.client, sample.direction, sample.item) == ("slow", "get", "64 MiB")
        sample.status = "timeout" if slow else "ok"
        sample.ok = not slow

    monkeypatch.setattr(runner, "measure", measure)
    monkeypatch.setattr(runner, "report", lambda run, sample: None)
    run = _run(tmp_path, reps=2)
    scenario = Scenario(label="loop", rtt_ms=None, rate_mbit=None, sizes=SIZES)
    runner.run_scenario(run, scenario, srv=None)  # type: ignore[arg-type]

    skipped = {
        (s.rep, s.client, s.direction, s.item): s.error
        for s in run.samples
        if s.status == "skipped"
    }
    assert skipped == {
        (0, "slow", "get", "256 MiB"): "timed out at 64 MiB: larger files skipped",
        (1, "slow", "get", "64 MiB"): "timed out in an earlier rep",
        (1, "slow", "get", "256 MiB"): "timed out at 64 MiB: larger files skipped",
    }
    assert (1, "slow", "get", "8 MiB") in measured and (1, "slow", "put", "256 MiB") in measured
    assert (1, "fast", "get", "256 MiB") in measured
    # Every planned sample is in the record, measured or skipped with its reason.
    assert len(run.samples) == 2 * 2 * 2 * (1 + len(SIZES))
