"""The retry policy as tables (pure: no clock, no randomness of its own)."""

from __future__ import annotations

import pytest

from sshpipe.core.retry import RetryBudget, failures_after


@pytest.mark.parametrize(
    ("failures", "jitter", "expected"),
    [
        (1, 0.0, 0.125),  # half of base, fixed
        (1, 0.999999, 0.25),  # up to base
        (2, 0.0, 0.25),
        (3, 0.5, 0.75),  # ceiling 1.0: 0.5 + 0.25
        (10, 0.0, 4.0),  # capped at 8: half of it
        (10, 0.999999, 8.0),
        (60, 0.5, 6.0),  # no overflow far out
    ],
)
def test_delay_doubles_with_equal_jitter_up_to_the_cap(
    failures: int, jitter: float, expected: float
) -> None:
    assert RetryBudget(attempts=5).delay(failures, jitter) == pytest.approx(expected, rel=1e-5)


def test_the_first_reconnect_is_never_immediate() -> None:
    assert min(RetryBudget(attempts=1).delay(1, j / 10) for j in range(10)) > 0


def test_budget_counts_reconnects_without_progress() -> None:
    budget = RetryBudget(attempts=3)
    count = 0
    for _ in range(50):  # a cut after each bit of progress: never exhausted
        count = failures_after(count, progressed=True)
        assert not budget.exhausted(count)
    for expected in (2, 3, 4):  # then reconnects that move nothing
        count = failures_after(count, progressed=False)
        assert count == expected
    assert budget.exhausted(count) and not budget.exhausted(3)


def test_failures_count_from_one() -> None:
    with pytest.raises(ValueError):
        RetryBudget(attempts=1).delay(0, 0.0)
