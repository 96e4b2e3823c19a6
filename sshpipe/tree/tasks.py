"""Every task a tree starts belongs to a TaskGroup, and a failure is raised as itself.

A TaskGroup raises an ExceptionGroup even for one failure, and also when only
its body failed; callers of a tree want the error that stopped it (its exit
code, its message), so each group here re-raises its first real error.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any


@contextlib.asynccontextmanager
async def task_group() -> AsyncIterator[asyncio.TaskGroup]:
    """An ``asyncio.TaskGroup`` that re-raises its first real error, not a group."""
    try:
        async with asyncio.TaskGroup() as group:
            yield group
    except BaseExceptionGroup as errors:
        raise first_error(errors) from None


async def run_all(coros: list[Coroutine[Any, Any, None]]) -> None:
    """Run coroutines in one TaskGroup; the first to fail stops the others."""
    async with task_group() as group:
        for coro in coros:
            group.create_task(coro)


def first_error(group: BaseExceptionGroup[Any]) -> BaseException:
    first = group.exceptions[0]
    for exc in group.exceptions:  # a real error explains more than a cancellation
        if not isinstance(exc, asyncio.CancelledError):
            first = exc
            break
    return first_error(first) if isinstance(first, BaseExceptionGroup) else first
