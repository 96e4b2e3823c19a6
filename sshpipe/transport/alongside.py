"""Background work that lives exactly as long as a block: ``alongside``.

A transfer's grower, its compression switch and the compressed connection's
warm-up each run a task beside the transfer, in a TaskGroup of their own
(habit 4: no task outlives its owner). The block's own error must not come
out of that group wrapped in an ExceptionGroup, so it is caught inside the
group (whose tasks, stopped first, never fail) and raised again outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

__all__ = ["alongside"]


@contextlib.asynccontextmanager
async def alongside(
    start: Callable[[asyncio.TaskGroup], None], stop: Callable[[], Awaitable[None]]
) -> AsyncIterator[None]:
    """``start(group)`` the work, run the block, then ``await stop()`` and wait for the work.

    Raises:
        Whatever the block raised, as it raised it (not in an ExceptionGroup).
    """
    failure: BaseException | None = None
    async with asyncio.TaskGroup() as group:
        start(group)
        try:
            yield
        except BaseException as exc:  # CancelledError and GeneratorExit too: raised below
            failure = exc
        await stop()
    if failure is not None:
        try:
            raise failure
        finally:
            failure = None  # no reference cycle through the traceback
