"""Print every asyncio task's stack shortly before pytest-timeout ends a hung test.

pytest-timeout dumps the threads' stacks, and a hung asyncio test shows only
its loop waiting in ``select``: what each task awaits is the clue. A timer
thread, started for each test, asks every running loop (from the loop's own
thread, through ``call_soon_threadsafe``, which also wakes a loop blocked
with nothing scheduled) to print its tasks to stderr, which pytest puts in
the failure report.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Iterator

import pytest

# How long before pytest-timeout's limit the tasks are printed.
MARGIN = 15.0


def _print_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    print(f"\n+++ {len(tasks)} asyncio tasks, about to time out +++", file=sys.stderr)
    for task in tasks:
        print(f"--- {task!r}", file=sys.stderr)
        task.print_stack(limit=12, file=sys.stderr)


def _ask_running_loops() -> None:
    for obj in gc.get_objects():
        if isinstance(obj, asyncio.AbstractEventLoop) and obj.is_running():
            obj.call_soon_threadsafe(_print_tasks, obj)


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    limit = _timeout_of(item)
    timer = threading.Timer(max(limit - MARGIN, 1.0), _ask_running_loops) if limit else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
