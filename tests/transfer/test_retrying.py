"""The one reconnect loop: its budget, its backoff (with jitter), what it never retries."""

from __future__ import annotations

import pytest

from sshpipe.core.errors import (
    AuthenticationError,
    ConnectDropped,
    ConnectionBroken,
    RemoteNotFound,
    Stalled,
)
from sshpipe.core.retry import RetryBudget
from sshpipe.testing.fakes import FakeLease, FakeServer, refused
from sshpipe.transfer.retrying import Retrying


class Clock:
    """Records the backoff instead of sleeping it, and hands out chosen jitter."""

    def __init__(self, *jitter: float) -> None:
        self.slept: list[float] = []
        self.jitter = list(jitter)
        self.drawn = 0

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def draw(self) -> float:
        self.drawn += 1
        return self.jitter.pop(0) if self.jitter else 0.5


def _retrying(lease: FakeLease, clock: Clock, attempts: int = 2) -> Retrying:
    budget = RetryBudget(attempts=attempts)
    return Retrying(lease, budget, path="/f", jitter=clock.draw, sleep=clock.sleep)


async def test_the_budget_counts_reconnects_that_moved_nothing() -> None:
    lease = FakeLease(FakeServer(), [])
    clock = Clock(0.0, 0.9)
    retry = _retrying(lease, clock, attempts=2)
    tries = 0

    async def attempt() -> None:
        nonlocal tries
        tries += 1
        raise ConnectionBroken(f"cut {tries}")

    with pytest.raises(ConnectionBroken, match="cut 3"):
        await retry.run(attempt)
    budget = RetryBudget(attempts=2)
    assert clock.slept == [budget.delay(1, 0.0), budget.delay(2, 0.9)]  # the jitter drawn
    assert clock.drawn == 2 and retry.reconnects == 2
    assert lease.recovered == [False, False]


async def test_progress_between_breaks_starts_the_count_again() -> None:
    lease = FakeLease(FakeServer(), [])
    clock = Clock()
    retry = _retrying(lease, clock, attempts=1)
    moved = 0

    async def attempt() -> str:
        nonlocal moved
        moved += 1
        if moved < 6:
            raise ConnectionBroken("cut after moving a byte")
        return "done"

    assert await retry.run(attempt, progress=lambda: moved) == "done"
    assert retry.reconnects == 5 and retry.failures == 1
    assert clock.slept == [RetryBudget(attempts=1).delay(1, 0.5)] * 5


async def test_a_stall_reconnects_with_the_silent_connection_given_up() -> None:
    lease = FakeLease(FakeServer(), [])
    retry = _retrying(lease, Clock())
    results = []
    async for attempt in retry.attempts():
        with attempt:
            if not results:
                results.append("stalled")
                raise Stalled("no reply")
            results.append("done")
    assert results == ["stalled", "done"]
    assert lease.recovered == [True]


async def test_errors_retrying_cannot_fix_pass_through_untouched() -> None:
    lease = FakeLease(FakeServer(), [])
    clock = Clock()
    retry = _retrying(lease, clock)
    missing = RemoteNotFound("/f", "no such file")

    async def attempt() -> None:
        raise missing

    with pytest.raises(RemoteNotFound) as caught:
        await retry.run(attempt)
    assert caught.value is missing
    assert lease.recovered == [] and clock.slept == []


async def test_a_refused_key_while_reconnecting_is_not_retried() -> None:
    lease = FakeLease(FakeServer(), [], recover_errors=[AuthenticationError("key refused")])
    retry = _retrying(lease, Clock(), attempts=5)

    async def attempt() -> None:
        raise ConnectionBroken("cut")

    with pytest.raises(AuthenticationError):
        await retry.run(attempt)
    assert len(lease.recovered) == 1


async def test_reconnects_refused_for_now_are_retried_until_the_budget_is_spent() -> None:
    lease = FakeLease(FakeServer(), [], recover_errors=[refused(), refused(), refused()])
    clock = Clock()
    retry = _retrying(lease, clock, attempts=2)

    async def attempt() -> None:
        raise ConnectionBroken("cut")

    with pytest.raises(ConnectionBroken, match="gave up reconnecting"):
        await retry.run(attempt)
    assert len(lease.recovered) == 2 and len(clock.slept) == 2


async def test_a_reconnect_turned_away_before_the_log_in_gives_up_at_once() -> None:
    """Its connection was tried the budget's worth where it was opened (``ssh.open_link``):
    trying that again here would try it (retries + 1) squared times."""
    dropped = ConnectDropped("h:22: the server closed the connection before the log-in")
    lease = FakeLease(FakeServer(), [], recover_errors=[dropped, refused()])
    retry = _retrying(lease, Clock(), attempts=5)

    async def attempt() -> None:
        raise ConnectionBroken("cut")

    with pytest.raises(ConnectionBroken, match=r"gave up reconnecting: .*before the log-in"):
        await retry.run(attempt)
    assert len(lease.recovered) == 1
