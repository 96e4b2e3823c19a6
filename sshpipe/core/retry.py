"""When to reconnect and how long to wait first: the pure retry policy.

No clock and no randomness of its own: the jitter is an argument. rclone's
pacer and AWS's "exponential backoff and jitter" are the shape: the wait doubles
from ``base`` up to ``cap``, and "equal jitter" keeps half of it fixed so a
reconnect is never immediate after a failure, and spreads the other half so
many clients cut at once do not come back at once.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryBudget:
    """How many reconnects in a row may fail to make progress before giving up.

    A transfer that moves bytes between two cuts starts its count again: fifty
    cuts across a long transfer are survivable, five dead reconnects are not.
    """

    attempts: int
    base: float = 0.25
    cap: float = 8.0

    def delay(self, failures: int, jitter: float) -> float:
        """Seconds to wait before reconnect number ``failures`` (1, 2, ...); jitter in [0, 1)."""
        if failures < 1:
            raise ValueError("failures counts from 1")
        ceiling = min(self.cap, self.base * 2.0 ** min(failures - 1, 64))
        return ceiling / 2 + ceiling / 2 * jitter

    def exhausted(self, failures: int) -> bool:
        return failures > self.attempts


def failures_after(previous: int, *, progressed: bool) -> int:
    """The count of reconnects in a row without progress, after one more break."""
    return 1 if progressed else previous + 1
