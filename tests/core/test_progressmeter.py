"""The progress policy with a fake clock: rate window, ETA, throttle, the final report."""

from __future__ import annotations

import pytest

from sshpipe.core.progress import (
    IDLE_INTERVAL,
    INTERVAL,
    MAX_CURRENT,
    RATE_WINDOW,
    Counts,
    ProgressMeter,
    eta,
)


def counts(done: int, total: int = 1000, **more: object) -> Counts:
    fields: dict[str, object] = {"files_done": 0, "files_total": 1, "scan_done": True}
    fields.update(more)
    return Counts(bytes_done=done, bytes_total=total, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # (time, bytes done) reported; the rate of the last one
        ([(0.0, 0), (1.0, 100)], 100.0),
        ([(0.0, 0), (1.0, 100), (2.0, 300)], 150.0),  # both seconds are in the window
        # 100 B/s for 10 s, then 1,000 B/s: after the window only the new speed counts
        ([(float(t), 100 * t) for t in range(11)] + [(11.0, 2000), (14.0, 5000)], 1000.0),
        ([(0.0, 0), (1.0, 100), *[(float(t), 100) for t in range(2, 10)]], 0.0),  # stalled
        ([(5.0, 0), (5.0, 0)], 0.0),  # no time passed: no rate, no division by zero
    ],
)
def test_rate_is_over_the_moving_window(steps: list[tuple[float, int]], expected: float) -> None:
    meter = ProgressMeter(started=steps[0][0], interval=0.0, idle_interval=0.0)
    report = None
    for now, done in steps:
        report = meter.report(now, counts(done, total=10**9))
    assert report is not None and report.rate == pytest.approx(expected)


def test_rate_leaves_out_the_bytes_kept_by_a_resume() -> None:
    meter = ProgressMeter(started=0.0)
    meter.report(0.0, counts(600, bytes_kept=600))
    report = meter.report(1.0, counts(700, bytes_kept=600))
    assert report is not None and report.rate == pytest.approx(100.0)
    assert report.eta == pytest.approx(3.0)  # 300 bytes left at 100 B/s


@pytest.mark.parametrize(
    ("left", "rate", "expected"),
    [(300, 100.0, 3.0), (0, 0.0, 0.0), (-5, 10.0, 0.0), (10, 0.0, None)],
)
def test_eta(left: int, rate: float, expected: float | None) -> None:
    assert eta(left, rate) == expected


def test_no_eta_while_the_totals_grow() -> None:
    meter = ProgressMeter(started=0.0)
    meter.report(0.0, counts(0, scan_done=False))
    report = meter.report(1.0, counts(100, scan_done=False))
    assert report is not None and report.rate > 0 and report.eta is None


@pytest.mark.parametrize(
    ("times", "reported"),
    [
        # reads of the counts (bytes moving at each): which of them are reported
        ([0.0, 0.01, 0.05, INTERVAL, INTERVAL + 0.01, 2 * INTERVAL], [0.0, INTERVAL, 2 * INTERVAL]),
        ([0.0, 0.3, 0.31, 0.45], [0.0, 0.3, 0.45]),
        ([5.0], [5.0]),  # the first, whenever it comes
    ],
)
def test_at_most_one_report_per_interval(times: list[float], reported: list[float]) -> None:
    meter = ProgressMeter(started=times[0])
    made = [now for index, now in enumerate(times) if meter.report(now, counts(index))]
    assert made == reported


def test_nothing_moving_reports_once_per_idle_interval() -> None:
    meter = ProgressMeter(started=0.0)
    ticks = [round(tick * INTERVAL, 6) for tick in range(int(2.5 * IDLE_INTERVAL / INTERVAL))]
    made = [now for now in ticks if meter.report(now, counts(0))]
    assert made == [0.0, IDLE_INTERVAL, 2 * IDLE_INTERVAL]


def test_the_final_report_is_made_once_even_right_after_another() -> None:
    meter = ProgressMeter(started=0.0)
    assert meter.report(0.0, counts(0)) is not None
    final = meter.report(0.001, counts(1000, files_done=1, current=("/a",)), final=True)
    assert final is not None and final.finished
    assert (final.bytes_done, final.bytes_total, final.files_done, final.files_total) == (
        1000,
        1000,
        1,
        1,
    )
    assert final.current == () and final.eta == 0.0 and final.elapsed == pytest.approx(0.001)
    assert meter.report(5.0, counts(1000)) is None
    assert meter.report(5.0, counts(1000), final=True) is None


def test_a_stream_of_unknown_size_is_scanned_when_it_ends() -> None:
    meter = ProgressMeter(started=0.0)
    first = meter.report(0.0, counts(0, total=0, scan_done=False))
    final = meter.report(1.0, counts(500, total=500, scan_done=False), final=True)
    assert first is not None and not first.scan_done
    assert final is not None and final.scan_done and final.bytes_total == 500


@pytest.mark.parametrize(
    "sequence",
    [
        [0, 500, 200, 300, 800],  # a file failed and its bytes were taken back, or restarted
        [0, 100, 100, 50, 1000],
    ],
)
def test_done_never_goes_backwards(sequence: list[int]) -> None:
    meter = ProgressMeter(started=0.0, interval=0.0, idle_interval=0.0)
    shown = []
    for tick, done in enumerate(sequence):
        report = meter.report(float(tick), counts(done, files_done=done // 500))
        assert report is not None
        shown.append((report.bytes_done, report.files_done))
        assert report.bytes_done <= report.bytes_total
    assert shown == sorted(shown)
    assert shown[-1][0] == max(sequence)


def test_current_is_bounded_to_the_latest() -> None:
    meter = ProgressMeter(started=0.0)
    paths = tuple(f"/f{index}" for index in range(10))
    report = meter.report(0.0, counts(0, current=paths))
    assert report is not None and report.current == paths[-MAX_CURRENT:]


def test_window_default_spans_a_few_seconds() -> None:
    assert 1.0 <= RATE_WINDOW <= 10.0 and INTERVAL <= 0.1 + 1e-9
