"""Waiting, within a deadline, for what a server does after the client has moved on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["eventually"]


async def eventually(condition: Callable[[], bool], *, within: float = 5.0) -> None:
    """Until ``condition()`` holds; AssertionError if it still does not after ``within`` s."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not true within {within:g} s"
        await asyncio.sleep(0.01)
