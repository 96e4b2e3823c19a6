"""The rate limit of one transfer call on the event loop's clock (``core.ratelimit``'s bucket).

One ``Pacer`` per transfer call (``TransferConfig.rate_limit``): the lease
that call takes carries it (``PoolLease.pacer``), and a tree hands its own to
every big file's lease, so all its channels and connections, its big files
and its small ones, draw on one bucket. Reconnects keep the lease, and so the
bucket: tokens already spent stay spent.

The pumps ask it before each request (synchronously, inside a reply
callback: ``grant``), and when it says no they get a wake-up once the tokens
are there (``wake_at``); a small file waits for its whole size (``acquire``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from ..core.ratelimit import TokenBucket, burst_for, start_for


class Pacer:
    """A token bucket of ``rate`` bytes/s shared by every request of one transfer call."""

    def __init__(self, rate: int) -> None:
        self.bucket = TokenBucket(
            rate, burst_for(rate), now=time.monotonic(), start=start_for(rate)
        )

    def __repr__(self) -> str:
        return f"<Pacer {self.bucket!r}>"

    @classmethod
    def for_rate(cls, rate: int | None) -> Pacer | None:
        return None if rate is None else cls(rate)

    def blocks(self, block: int) -> int:
        """Requests of ``block`` bytes that may leave now (0: ask ``wake_at``)."""
        return self.bucket.blocks(time.monotonic(), block)

    def grant(self, count: int) -> bool:
        """Take ``count`` bytes' tokens if they are there now; False: wait."""
        now = time.monotonic()
        if self.bucket.delay(now, count) > 0:
            return False
        self.bucket.take(now, count)
        return True

    def take(self, count: int) -> None:
        """``count`` bytes left now, whatever the bucket held (``blocks`` said they may)."""
        self.bucket.take(time.monotonic(), count)

    def wake_at(self, count: int, wake: Callable[[], None]) -> asyncio.TimerHandle:
        """Call ``wake`` (on the loop) once ``count`` bytes' tokens are there."""
        delay = self.bucket.delay(time.monotonic(), count)
        return asyncio.get_running_loop().call_later(delay, wake)

    async def acquire(self, count: int) -> None:
        """Wait until ``count`` bytes may be asked for (their tokens are taken at once)."""
        delay = self.bucket.reserve(time.monotonic(), count)
        if delay > 0:
            await asyncio.sleep(delay)
