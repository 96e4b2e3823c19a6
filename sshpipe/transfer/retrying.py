"""The reconnect loop: after a dropped or stalled connection, wait, reconnect, go on.

The policy (how many reconnects in a row may move nothing, the backoff) is
``core/retry.py``'s; this is where it meets the lease.
"""

from __future__ import annotations

import asyncio
import logging
import random

from .._errors import ConnectError, ConnectionBroken, Stalled
from ..core.retry import RetryBudget, failures_after
from ..core.untrusted import printable
from ..transport.pool import Lease

logger = logging.getLogger("sshpipe.flow")


async def after_break(
    lease: Lease,
    budget: RetryBudget,
    failures: int,
    broken: ConnectionBroken,
    *,
    progressed: bool,
    path: str,
) -> int:
    """One more dropped or stalled connection: give up (re-raise) or reconnect.

    Returns:
        The reconnects in a row that moved nothing, counting this one.
    """
    failures = failures_after(failures, progressed=progressed)
    if budget.exhausted(failures):
        raise broken
    logger.info("%s: %s; reconnecting (%d in a row)", printable(path), broken, failures)
    return await reconnect(lease, budget, failures, stalled=isinstance(broken, Stalled))


async def reconnect(lease: Lease, budget: RetryBudget, failures: int, *, stalled: bool) -> int:
    """Wait (backoff with jitter) and get fresh channels; the failures in a row after it.

    Raises:
        ConnectionBroken: the budget ran out before a connection could be made.
        ConnectError: one that waiting cannot fix (a key or host key refused).
    """
    while True:
        await asyncio.sleep(budget.delay(failures, random.random()))
        try:
            await lease.recover(stalled=stalled)
        except (ConnectError, ConnectionBroken) as exc:  # not back yet (refused, reset...)
            if not exc.retryable:
                raise
            failures += 1
            if budget.exhausted(failures):
                raise ConnectionBroken(f"gave up reconnecting: {exc}") from exc
            continue
        return failures
