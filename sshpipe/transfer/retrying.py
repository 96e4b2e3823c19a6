"""The reconnect loop: after a dropped or stalled connection, wait, reconnect, go on.

The policy (how many reconnects in a row may move nothing, the backoff) is
``core/retry.py``'s; this is where it meets the lease. Every path runs its
attempts through ``Retrying``: download, upload (its sending and its final
check and rename, which share one count), stream (a generator: the loop is an
async iterator, so the attempt's body may yield) and, inside an upload's
attempts, the resume read-back. A tree's pipeline reconnects once for all its
operations with ``after_break``, the same step.

Usage::

    retry = Retrying(lease, RetryBudget(attempts=config.retries), path=remote)
    async for attempt in retry.attempts(progress=lambda: plan.received):
        with attempt:  # a ConnectionBroken ends this attempt; the next reconnects
            ...
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TypeVar

from ..core.errors import ConnectDropped, ConnectError, ConnectionBroken, Stalled
from ..core.retry import RetryBudget, failures_after
from ..core.text import printable
from ..transport.pool import Lease

logger = logging.getLogger("sshpipe.flow")

T = TypeVar("T")
Jitter = Callable[[], float]  # a number in [0, 1)
Sleep = Callable[[float], Awaitable[None]]


def _nothing() -> int:
    return 0


class Attempt:
    """One attempt's context: a ConnectionBroken in it is kept, not raised."""

    def __init__(self, mark: int) -> None:
        self.mark = mark  # the progress count when it began
        self.broken: ConnectionBroken | None = None

    def __enter__(self) -> Attempt:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if isinstance(exc, ConnectionBroken):
            self.broken = exc
            return True
        return False


class Retrying:
    """One transfer's reconnects: the failures in a row without progress, and the count.

    Args:
        lease: whose channels are renewed after each break.
        budget: how many reconnects in a row may move nothing, and the backoff.
        path: what the log lines name.
        jitter, sleep: the backoff's randomness and clock (tests pass their own).
    """

    def __init__(
        self,
        lease: Lease,
        budget: RetryBudget,
        *,
        path: str,
        jitter: Jitter = random.random,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.lease = lease
        self.budget = budget
        self.path = path
        self.failures = 0  # reconnects in a row that moved nothing
        self.reconnects = 0
        self._jitter = jitter
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"<Retrying {self.path} failures={self.failures} reconnects={self.reconnects}>"

    def attempts(self, progress: Callable[[], int] = _nothing) -> Attempts:
        """Attempts until one ends without a break; ``progress()`` grows as bytes move.

        Raises (from the iteration):
            ConnectionBroken: the last break, once the budget is spent.
            ConnectError: a reconnect failed in a way waiting cannot fix.
        """
        return Attempts(self, progress)

    async def run(
        self, attempt: Callable[[], Awaitable[T]], progress: Callable[[], int] = _nothing
    ) -> T:
        """``await attempt()`` until it returns, reconnecting after each break."""
        async for trial in self.attempts(progress):
            with trial:
                return await attempt()
        raise AssertionError("the attempts end only with a result or an error")

    async def after(self, broken: ConnectionBroken, *, progressed: bool) -> None:
        self.failures = await after_break(
            self.lease,
            self.budget,
            self.failures,
            broken,
            progressed=progressed,
            path=self.path,
            jitter=self._jitter,
            sleep=self._sleep,
        )
        self.reconnects += 1


class Attempts:
    """The async iterator of ``Retrying.attempts`` (a class, not a generator: leaving
    the loop early leaves nothing to finalize)."""

    def __init__(self, retrying: Retrying, progress: Callable[[], int]) -> None:
        self._retrying = retrying
        self._progress = progress
        self._last: Attempt | None = None

    def __aiter__(self) -> Attempts:
        return self

    async def __anext__(self) -> Attempt:
        last = self._last
        if last is not None:
            if last.broken is None:
                raise StopAsyncIteration
            broken, last.broken = last.broken, None
            await self._retrying.after(broken, progressed=self._progress() > last.mark)
        self._last = Attempt(self._progress())
        return self._last


async def after_break(
    lease: Lease,
    budget: RetryBudget,
    failures: int,
    broken: ConnectionBroken,
    *,
    progressed: bool,
    path: str,
    jitter: Jitter = random.random,
    sleep: Sleep = asyncio.sleep,
) -> int:
    """One more dropped or stalled connection: give up (re-raise) or reconnect.

    Returns:
        The reconnects in a row that moved nothing, counting this one.
    """
    failures = failures_after(failures, progressed=progressed)
    if budget.exhausted(failures):
        raise broken
    logger.info("%s: %s; reconnecting (%d in a row)", printable(path), broken, failures)
    stalled = isinstance(broken, Stalled)
    return await reconnect(lease, budget, failures, stalled=stalled, jitter=jitter, sleep=sleep)


async def reconnect(
    lease: Lease,
    budget: RetryBudget,
    failures: int,
    *,
    stalled: bool,
    jitter: Jitter = random.random,
    sleep: Sleep = asyncio.sleep,
) -> int:
    """Wait (backoff with jitter) and get fresh channels; the failures in a row after it.

    Raises:
        ConnectionBroken: the budget ran out before a connection could be made.
        ConnectError: one that waiting cannot fix (a key or host key refused).
    """
    while True:
        await sleep(budget.delay(failures, jitter()))
        try:
            await lease.recover(stalled=stalled)
        except (ConnectError, ConnectionBroken) as exc:  # not back yet (refused, reset...)
            if not exc.retryable:
                raise
            failures += 1
            # Dropped before the log-in: the connection was tried again already,
            # the budget's worth, where it is opened (``ssh.open_link``).
            if budget.exhausted(failures) or isinstance(exc, ConnectDropped):
                raise ConnectionBroken(f"gave up reconnecting: {exc}") from exc
            continue
        return failures
