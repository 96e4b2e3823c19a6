"""The rate limit's token bucket, block and burst (``core.ratelimit``), and what the limit
changes in sizing, the flow controller and the read plan: tables, hypothesis, a simulation.

No event loop: the clock is a float the tests advance.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sshpipe.core.flowcontrol import GAIN, FlowController, FlowLimits
from sshpipe.core.ratelimit import (
    BLOCK_GRAIN,
    TokenBucket,
    burst_for,
    kbit_to_bytes,
    limited_block,
    start_for,
)
from sshpipe.core.readplan import Range, ReadPlan
from sshpipe.core.sizing import sizing

# -- units, block and burst ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kbits", "rate"),
    [(1, 128), (8000, 1_024_000), (100 * 1024 * 1024, 100 * 1024 * 1024 * 128)],
)
def test_kbit_is_scps_1024_bits(kbits: int, rate: int) -> None:
    assert kbit_to_bytes(kbits) == rate


@pytest.mark.parametrize(
    ("block", "rate", "expected"),
    [
        (262144, None, 262144),  # no limit: the block as it was
        (262144, 1_024_000, 24576),  # 25 ms of 1 MB/s, in whole 4 KiB
        (262144, 100_000_000, 262144),  # a fast limit keeps the server's block
        (16384, 1_024_000, 16384),  # never longer than it was
        (262144, 128, BLOCK_GRAIN),  # never shorter than 4 KiB
    ],
)
def test_limited_block(block: int, rate: int | None, expected: int) -> None:
    assert limited_block(block, rate) == expected


def test_burst_is_fifty_ms_of_the_rate_at_least_a_grain() -> None:
    assert burst_for(1_024_000) == 51_200
    assert burst_for(128) == BLOCK_GRAIN


def test_sizing_shortens_the_block_under_a_limit() -> None:
    args = {"requests": 64, "default_window": 2**21, "limits": None, "window": 0}
    assert sizing(configured_block=262144, write=False, **args).block == 262144  # type: ignore[arg-type]
    limited = sizing(configured_block=262144, write=True, rate_limit=1_024_000, **args)  # type: ignore[arg-type]
    assert limited.block == 24576


# -- the bucket, as a table ---------------------------------------------------------


def test_bucket_table() -> None:
    bucket = TokenBucket(1000, 100, now=0.0)
    assert bucket.delay(0.0, 100) == 0.0  # starts full
    bucket.take(0.0, 80)
    assert bucket.delay(0.0, 20) == 0.0
    assert bucket.delay(0.0, 50) == pytest.approx(0.03)  # 30 bytes short at 1000 B/s
    assert bucket.blocks(0.0, 10) == 2
    assert bucket.blocks(0.0, 50) == 0
    assert bucket.delay(0.03, 50) == 0.0
    assert bucket.delay(10.0, 100) == 0.0
    assert bucket.tokens == 100  # idle time is capped at the burst
    bucket.take(10.0, 100)
    assert bucket.spent == 180


def test_the_set_up_is_lent_back_once_never_past_the_start_cap() -> None:
    bucket = TokenBucket(1000, 100, now=0.0, start=250)
    assert bucket.delay(0.2, 250) == 0.0  # 0.2 s of set-up: 100 + 200, capped at 250
    bucket.take(0.2, 50)
    assert bucket.tokens == 200  # what was lent stays until it is spent...
    assert bucket.delay(0.5, 200) == 0.0
    assert bucket.tokens == 200  # ...but nothing accrues above the burst any more
    bucket.take(0.5, 200)
    assert bucket.delay(5.0, 101) == pytest.approx(0.0) and bucket.tokens == 100


def test_a_request_larger_than_the_bucket_waits_for_a_full_one_then_leaves_a_debt() -> None:
    bucket = TokenBucket(1000, 100, now=0.0)
    bucket.take(0.0, 100)
    assert bucket.delay(0.0, 500) == pytest.approx(0.1)  # a full bucket, not 500 bytes' worth
    bucket.take(0.1, 500)
    assert bucket.tokens == pytest.approx(-400)
    assert bucket.delay(0.1, 1) == pytest.approx(0.401)  # the debt is waited out
    assert bucket.blocks(0.1, 1) == 0


def test_a_reservation_leaves_once_the_bucket_has_earned_it() -> None:
    bucket = TokenBucket(1000, 100, now=0.0)
    assert bucket.reserve(0.0, 60) == 0.0
    assert bucket.reserve(0.0, 540) == pytest.approx(0.5)  # 40 held, 500 to earn
    assert bucket.reserve(0.1, 100) == pytest.approx(0.5)  # leaves at 0.6, after the first
    assert bucket.delay(0.1, 1) > 0.5


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 10**6), min_size=1, max_size=40),
    gaps=st.lists(st.floats(0.0, 0.3), min_size=1, max_size=40),
)
def test_reserved_requests_never_leave_ahead_of_burst_plus_rate_times_time(
    sizes: list[int], gaps: list[float]
) -> None:
    rate, burst = 1_000_000, 50_000
    bucket = TokenBucket(rate, burst, now=0.0)
    now, leaving = 0.0, []
    for n, size in enumerate(sizes):
        now += gaps[n % len(gaps)]
        leaving.append((now + bucket.reserve(now, size), size))
    leaving.sort()
    sent = 0
    for at, size in leaving:
        sent += size
        assert sent <= burst + rate * at + 1e-3


def test_bad_buckets_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBucket(0, 100, now=0.0)
    with pytest.raises(ValueError):
        TokenBucket(100, 0, now=0.0)


# -- the bucket, under any schedule ---------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    rate=st.integers(1_000, 10**8),
    burst_share=st.floats(0.01, 1.0),
    sizes=st.lists(st.integers(1, 10**6), min_size=1, max_size=60),
    pauses=st.lists(st.floats(0.0, 0.5), min_size=1, max_size=60),
)
def test_what_a_greedy_sender_gets_never_passes_burst_plus_rate_times_time(
    rate: int, burst_share: float, sizes: list[int], pauses: list[float]
) -> None:
    """Each request leaves as soon as ``delay`` allows (after an idle pause of its own).

    By every moment ``t`` the bytes granted stay within the token bucket's
    envelope: the burst plus ``rate x t``, plus the one request in debt; and
    a sender that never pauses gets the rate.
    """
    burst = max(1, int(rate * burst_share))
    bucket = TokenBucket(rate, burst, now=0.0)
    now, granted, largest = 0.0, 0, 0
    for n, size in enumerate(sizes):
        now += pauses[n % len(pauses)]
        now += bucket.delay(now, size)
        assert bucket.delay(now, size) <= 1e-9
        bucket.take(now, size)
        granted += size
        largest = max(largest, size)
        assert granted <= burst + rate * now + largest + 1e-6 * rate
    assert bucket.spent == granted


@settings(max_examples=100, deadline=None)
@given(rate=st.integers(1_000, 10**8), share=st.floats(0.001, 0.5))
def test_a_sender_that_never_pauses_gets_the_rate(rate: int, share: float) -> None:
    size = max(1, int(rate * share))  # requests of 1 ms to 0.5 s of the rate
    burst = burst_for(rate)
    bucket = TokenBucket(rate, burst, now=0.0)
    now, granted = 0.0, 0
    while now < 2.0:
        now += bucket.delay(now, size)
        bucket.take(now, size)
        granted += size
    # Over two seconds and more: the rate, give or take the burst and one request.
    assert rate * now - size <= granted <= burst + rate * now + size


# -- a whole transfer, simulated -------------------------------------------------------


def simulated_rate(rate: int, *, seconds: float, rtt: float, setup: float) -> float:
    """A pipelined download of ``seconds`` x ``rate`` bytes under the limit: its bytes
    over its time (set-up included, as TransferStats.seconds), replies an RTT after
    their request on an otherwise unlimited link, up to 128 requests in flight."""
    block = limited_block(262144, rate)
    bucket = TokenBucket(rate, burst_for(rate), now=0.0, start=start_for(rate))
    size = int(rate * seconds)
    now, asked, in_flight = setup, 0, []
    while asked < size:
        length = min(block, size - asked)
        now += bucket.delay(now, length)
        while len(in_flight) >= 128 and in_flight[0] <= now:
            in_flight.pop(0)
        if len(in_flight) >= 128:
            now = in_flight.pop(0)
            continue
        bucket.take(now, length)
        in_flight.append(now + rtt)
        asked += length
    return size / in_flight[-1]


@pytest.mark.parametrize("rate", [kbit_to_bytes(k) for k in (800, 8000, 80_000, 800_000)])
@pytest.mark.parametrize(("rtt", "seconds"), [(0.0002, 2.0), (0.02, 2.0), (0.05, 2.0), (0.3, 20.0)])
def test_a_transfer_holds_the_limit_within_ten_percent(
    rate: int, rtt: float, seconds: float
) -> None:
    # Set-up of two round trips (OPEN and STAT, then the first READ), and the
    # last reply's: what the bucket lends back at the start is a burst of 50 ms.
    # At 300 ms those 0.9 s alone are 30 % of a 2 s transfer, whatever the
    # limit: the limit holds over the transfer, the set-up is the link's.
    measured = simulated_rate(rate, seconds=seconds, rtt=rtt, setup=2 * rtt)
    assert 0.9 * rate <= measured <= 1.1 * rate, measured / rate


def test_without_a_cap_on_the_start_128_requests_would_go_at_once() -> None:
    """What the bucket is for: a 32 MiB first window is 4 s of 64 Mbit/s at once."""
    rate = kbit_to_bytes(64_000)
    bucket = TokenBucket(rate, burst_for(rate), now=0.0)
    block = limited_block(262144, rate)
    sent = 0
    while bucket.delay(0.0, block) == 0.0:
        bucket.take(0.0, block)
        sent += block
    assert sent <= burst_for(rate) + block < 128 * 262144 // 32


# -- what the limit changes elsewhere --------------------------------------------------


def limits(rate: int | None, **kw: int) -> FlowLimits:
    return FlowLimits(
        memory_budget=64 << 20,
        min_in_flight=16 << 20,
        channel_capacity=2 << 20,
        max_channels=36,
        block=49152,
        rate_limit=rate,
        **kw,
    )


@pytest.mark.parametrize("rtt", [0.02, 0.05, 0.3])
def test_the_flow_target_holds_what_the_limit_needs_and_one_channel(rtt: float) -> None:
    rate = 1_024_000
    free = FlowController(limits(None), rtt0=rtt, now=0.0)
    limited = FlowController(limits(rate), rtt0=rtt, now=0.0)
    assert free.channels > 1  # 1 Gbit/s x RTT over 2 MiB channels
    assert limited.channels == 1
    assert limited.target == int(GAIN * (rate * rtt + 2 * 49152))


def test_replies_at_the_limit_keep_the_target_at_the_limits_pipe() -> None:
    """Rounds at the limited rate are not read as a link that shrank to nothing."""
    rate, rtt = 1_024_000, 0.05
    ctl = FlowController(limits(rate), rtt0=rtt, now=0.0)
    cap = ctl.target
    now = 0.0
    for _ in range(400):  # 20 s of 49152-byte replies at the limit
        now += 49152 / rate
        ctl.on_reply(now, rtt=rtt, delivered=49152, in_flight=cap)
        assert ctl.target <= cap
    assert ctl.phase == "steady"
    assert ctl.target >= rate * rtt  # still carries the limit
    assert ctl.max_rate == pytest.approx(rate, rel=0.3)


def test_a_range_put_back_is_asked_next() -> None:
    plan = ReadPlan(block_size=100, size_hint=250)
    first = plan.next_range()
    assert first == Range(0, 100)
    plan.put_back(first)
    assert plan.outstanding == 0
    assert plan.next_range() == Range(0, 100)
    assert plan.next_range() == Range(100, 100)
    assert plan.outstanding == 2
