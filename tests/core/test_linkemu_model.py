"""LinkModel and LinkSpec: the link emulator's pure core, as tables (no loop, no sockets).

Numbers are chosen so the arithmetic is easy to check by hand: at 8 Mbit/s a
byte takes 1 µs, so 1000 bytes serialize in 1 ms.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from sshpipe.testing.linkemu import LinkSpec
from sshpipe.testing.linkemu._model import MIN_DEFAULT_QUEUE, UNLIMITED_RATE_IN_FLIGHT, LinkModel

MBIT8 = 8e6  # 1 byte per µs
MODEL_FILE = Path(__file__).parents[2] / "sshpipe" / "testing" / "linkemu" / "_model.py"


def model(rate: float | None = MBIT8, delay: float = 0.05, queue: int = 10_000) -> LinkModel:
    return LinkModel(rate=rate, delay=delay, queue=queue)


# Each row: link, then (now, nbytes) arrivals, then the delivery times expected.
@pytest.mark.parametrize(
    ("rate", "delay", "arrivals", "delivered_at"),
    [
        # one chunk: serialization then propagation
        (MBIT8, 0.05, [(0.0, 1000)], [0.051]),
        # back to back: the second waits for the first (t_s = max(now, prev t_s) + n/rate)
        (MBIT8, 0.05, [(0.0, 1000), (0.0, 1000)], [0.051, 0.052]),
        # arriving while the first is still serializing
        (MBIT8, 0.05, [(0.0, 1000), (0.0005, 1000)], [0.051, 0.052]),
        # the link went idle in between: no credit for idle time
        (MBIT8, 0.05, [(0.0, 1000), (1.0, 1000)], [0.051, 1.051]),
        # arriving exactly when the previous finished
        (MBIT8, 0.05, [(0.0, 1000), (0.001, 2000)], [0.051, 0.053]),
        # no delay: only serialization
        (MBIT8, 0.0, [(0.0, 500), (0.0, 500), (0.0, 500)], [0.0005, 0.001, 0.0015]),
        # unlimited rate: only the delay, no queueing at all
        (None, 0.02, [(0.0, 10**9), (0.0, 10**9), (0.5, 1)], [0.02, 0.02, 0.52]),
        # an end of stream (0 bytes) arrives after what is queued, one delay later
        (MBIT8, 0.05, [(0.0, 3000), (0.0, 0)], [0.053, 0.053]),
        (MBIT8, 0.05, [(0.0, 3000), (0.01, 0)], [0.053, 0.06]),
        # 1 Gbit/s, 100 ms rtt: 125 kB take 1 ms
        (1e9, 0.05, [(0.0, 125_000), (0.0, 125_000)], [0.051, 0.052]),
    ],
)
def test_delivery_times(
    rate: float | None,
    delay: float,
    arrivals: list[tuple[float, int]],
    delivered_at: list[float],
) -> None:
    link = model(rate=rate, delay=delay)
    got = [link.admit(now, nbytes) for now, nbytes in arrivals]
    assert got == pytest.approx(delivered_at, abs=1e-12)


@pytest.mark.parametrize(
    ("arrivals", "now", "backlog"),
    [
        ([], 0.0, 0),
        ([(0.0, 4000)], 0.0, 4000),
        ([(0.0, 4000)], 0.001, 3000),  # 1 ms drains 1000 bytes
        ([(0.0, 4000)], 0.0035, 500),
        ([(0.0, 4000)], 0.004, 0),
        ([(0.0, 4000)], 10.0, 0),  # never negative
        ([(0.0, 4000), (0.002, 1000)], 0.002, 3000),  # 2000 left + 1000 new
        ([(0.0, 4000), (0.002, 1000)], 0.005, 0),
        ([(0.0, 1000), (5.0, 1000)], 5.0, 1000),  # idle between: only the new chunk
    ],
)
def test_backlog_is_the_bytes_not_yet_serialized(
    arrivals: list[tuple[float, int]], now: float, backlog: int
) -> None:
    link = model()
    for at, nbytes in arrivals:
        link.admit(at, nbytes)
    assert link.backlog(now) == backlog


def test_unlimited_rate_never_queues() -> None:
    link = model(rate=None)
    link.admit(0.0, 10**9)
    assert link.backlog(0.0) == 0
    assert link.reading_allowed(0.0, reading=True) is False  # but the in-flight cap holds
    assert link.resume_time(0.0) is None  # only deliveries free the cap


# A stall freezes the serializer: the backlog stays, later chunks wait for its end.
@pytest.mark.parametrize(
    ("rate", "events", "now", "backlog", "last_delivery"),
    [
        # 1000 queued at the stall; nothing drains during it, then 1 byte per µs
        (MBIT8, [("admit", 0.0, 1000), ("stall", 0.0, 0.5)], 0.3, 1000, 0.051),
        (MBIT8, [("admit", 0.0, 1000), ("stall", 0.0, 0.5)], 0.5005, 500, 0.051),
        # admitted during the stall: serialized after it and after what was queued
        (
            MBIT8,
            [("admit", 0.0, 1000), ("stall", 0.0, 0.5), ("admit", 0.1, 1000)],
            0.3,
            2000,
            0.552,
        ),
        # the stall began mid-chunk: the rest of it is served after the stall
        (
            MBIT8,
            [("admit", 0.0, 1000), ("stall", 0.0005, 0.5), ("admit", 0.1, 1000)],
            0.3,
            1500,
            0.552,
        ),
        # overlapping stalls end at the later end
        (MBIT8, [("stall", 0.0, 0.5), ("stall", 0.2, 0.5), ("admit", 0.3, 1000)], 0.6, 1000, 0.751),
        # a shorter stall inside a longer one changes nothing
        (MBIT8, [("stall", 0.0, 1.0), ("stall", 0.2, 0.1), ("admit", 0.3, 1000)], 0.6, 1000, 1.051),
        # over before anything arrives: no effect
        (MBIT8, [("stall", 0.0, 0.1), ("admit", 1.0, 1000)], 1.0, 1000, 1.051),
        # unlimited rate: the stall is the only queue
        (None, [("stall", 0.0, 1.0), ("admit", 0.2, 300), ("admit", 0.4, 200)], 0.5, 500, 1.05),
        (None, [("stall", 0.0, 1.0), ("admit", 0.2, 300), ("admit", 0.4, 200)], 1.0, 0, 1.05),
    ],
)
def test_stall(
    rate: float | None,
    events: list[tuple[str, float, float]],
    now: float,
    backlog: int,
    last_delivery: float,
) -> None:
    link = model(rate=rate)
    delivered = math.nan
    for kind, at, amount in events:
        if kind == "admit":
            delivered = link.admit(at, int(amount))
        else:
            link.stall(at, amount)
    assert link.backlog(now) == backlog
    assert delivered == pytest.approx(last_delivery, abs=1e-12)
    assert link.stalled_until == max(at + amount for kind, at, amount in events if kind == "stall")


# queue 1000 -> resume level 750 (a quarter drained): hysteresis between the two.
@pytest.mark.parametrize(
    ("admitted", "now", "while_reading", "while_paused", "resume_at"),
    [
        (1000, 0.0, True, False, 0.00025),  # exactly full: keep reading, but paused stays paused
        (1001, 0.0, False, False, 0.000251),  # over the queue: pause
        (1200, 0.0002, True, False, 0.00045),  # drained to 1000: reading may go on
        (1200, 0.0004, True, False, 0.00045),  # 800 left: above the resume level
        (1200, 0.00045, True, True, None),  # 750: resume
        (1200, 0.001, True, True, None),
        (500, 0.0, True, True, None),
    ],
)
def test_reading_pauses_above_the_queue_and_resumes_a_quarter_lower(
    admitted: int,
    now: float,
    while_reading: bool,
    while_paused: bool,
    resume_at: float | None,
) -> None:
    link = model(queue=1000)
    assert link.resume_level == 750
    link.admit(0.0, admitted)
    assert link.reading_allowed(now, reading=True) is while_reading
    assert link.reading_allowed(now, reading=False) is while_paused
    if resume_at is None:
        assert link.resume_time(now) is None
    else:
        assert link.resume_time(now) == pytest.approx(resume_at, abs=1e-12)
        assert link.reading_allowed(resume_at, reading=False)  # the promised time is right


def test_resume_time_waits_for_the_end_of_a_stall() -> None:
    link = model(queue=1000)
    link.admit(0.0, 2000)
    link.stall(0.0005, 1.0)  # 1500 left, frozen until 1.0005
    assert link.resume_time(0.2) == pytest.approx(1.0005 + 0.00075, abs=1e-12)
    unlimited = model(rate=None, queue=1000)
    unlimited.stall(0.0, 1.0)
    unlimited.admit(0.1, 2000)
    assert unlimited.resume_time(0.2) == 1.0


def test_in_flight_cap_bounds_what_a_slow_receiver_leaves_with_us() -> None:
    link = model(rate=MBIT8, delay=0.05, queue=1000)
    # queue + rate * (delay + 10 ms of lateness) + 1 MiB headroom
    assert link.in_flight_limit == 1000 + 60_000 + (1 << 20)
    assert link.in_flight_resume == link.in_flight_limit - 250
    now = 0.0
    while link.undelivered <= link.in_flight_limit:  # a receiver that reads nothing
        now += 0.01
        link.admit(now, 1000)
    now += 0.001  # the last chunk is serialized: the queue is empty
    assert link.backlog(now) == 0  # the queue is fine: the cap is what stops us
    assert not link.reading_allowed(now, reading=True)
    assert link.resume_time(now) is None  # no time frees it, only deliveries
    link.delivered(link.undelivered - link.in_flight_resume)
    assert link.reading_allowed(now, reading=False)
    assert link.peak_undelivered > link.in_flight_limit


def test_in_flight_cap_without_a_rate() -> None:
    link = model(rate=None, queue=1000)
    assert link.in_flight_limit == 1000 + UNLIMITED_RATE_IN_FLIGHT + (1 << 20)


@given(
    rate=st.one_of(st.none(), st.floats(min_value=1e3, max_value=1e10)),
    delay=st.floats(min_value=0, max_value=1),
    arrivals=st.lists(
        st.tuples(st.floats(min_value=0, max_value=0.1), st.integers(0, 1 << 20)),
        min_size=1,
        max_size=50,
    ),
)
@example(
    rate=1000.0, delay=0.0, arrivals=[(0.0, 524287), (0.040274045600420284, 0)]
)  # 1e-12 s early
def test_deliveries_keep_order_and_never_beat_the_link(
    rate: float | None, delay: float, arrivals: list[tuple[float, int]]
) -> None:
    link = model(rate=rate, delay=delay)
    now, previous, first = 0.0, -math.inf, None
    total = 0
    for gap, nbytes in arrivals:
        now += gap
        first = now if first is None else first
        at = link.admit(now, nbytes)
        assert at >= previous  # FIFO: one timer on the head of the line is enough
        assert at >= now + delay
        previous = at
        total += nbytes
    assert first is not None
    if rate is not None:
        # the last byte cannot be serialized sooner than the rate allows
        assert previous >= first + total * 8 / rate + delay - 1e-9
    assert link.undelivered == total


@pytest.mark.parametrize(
    ("spec", "queue"),
    [
        (LinkSpec(), MIN_DEFAULT_QUEUE),
        (LinkSpec(rtt=0.1), MIN_DEFAULT_QUEUE),
        (LinkSpec(rtt=0.1, rate=1e9), 12_500_000),  # one BDP
        (LinkSpec(rtt=0.3, rate=1e9), 37_500_000),
        (LinkSpec(rtt=0.001, rate=1e9), MIN_DEFAULT_QUEUE),  # a tiny BDP gets the floor
        (LinkSpec(rtt=0.1, rate=1e9, queue=4096), 4096),
    ],
)
def test_default_queue_is_one_bdp_at_least_1_mib(spec: LinkSpec, queue: int) -> None:
    assert spec.queue_bytes == queue
    assert LinkModel.from_spec(spec).queue == queue
    assert LinkModel.from_spec(spec).delay == spec.rtt / 2


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rtt": -0.001},
        {"rtt": math.nan},
        {"rtt": math.inf},
        {"rate": 0.0},
        {"rate": -1e6},
        {"rate": math.nan},
        {"rate": math.inf},
        {"queue": 0},
        {"queue": -1},
        {"queue": True},
        {"queue": 1.5},
    ],
)
def test_link_spec_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        LinkSpec(**kwargs)  # type: ignore[arg-type]


def test_link_spec_is_frozen_and_keyword_only() -> None:
    spec = LinkSpec(rtt=0.04, rate=8e7)
    with pytest.raises(AttributeError):
        spec.rtt = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        LinkSpec(0.04)  # type: ignore[misc]


def test_model_is_pure() -> None:
    """No event loop, no sockets, no clock: load the file alone in a fresh interpreter."""
    code = textwrap.dedent(f"""
        import importlib.util, json, sys
        before = set(sys.modules)
        spec = importlib.util.spec_from_file_location("linkemu_model", {str(MODEL_FILE)!r})
        module = importlib.util.module_from_spec(spec)
        sys.modules["linkemu_model"] = module
        spec.loader.exec_module(module)
        new = sorted(set(sys.modules) - before - {{"linkemu_model"}})
        print(json.dumps({{
            "new": new,
            "non_stdlib": [m for m in new if m.partition(".")[0] not in sys.stdlib_module_names],
        }}))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["non_stdlib"] == []
    assert not {"asyncio", "socket", "selectors", "time", "threading"} & set(result["new"])
