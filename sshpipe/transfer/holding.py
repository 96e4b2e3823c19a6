"""Bytes of a shared cap held around work that is not a pump's: ``holding``.

A pump charges its requests to its ``FlightBudget``; some memory a transfer
needs is not a request (a put's Compression auto sample read from the disk,
a download's pieces waiting for their turn to be written in order). It is
charged here to the same ``SharedBytes``, in line with the pumps' first
blocks, so the client's transfers together stay within its budget.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ..core.flight import FlightBudget, SharedBytes


@contextlib.asynccontextmanager
async def holding(shared: SharedBytes | None, count: int) -> AsyncIterator[None]:
    """``count`` bytes of ``shared`` charged for the block, waited for in line if need be
    (None: nothing to charge)."""
    budget = FlightBudget(max_requests=1, max_bytes=max(1, count), shared=shared)
    granted = asyncio.Event()
    budget.on_room = granted.set  # the shared cap reserved ``count`` for it
    try:
        if budget.blocks(count) >= 1:
            budget.reserve(count)
        else:
            await granted.wait()
        yield
    finally:
        budget.release()
