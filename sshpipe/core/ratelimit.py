"""The rate limit (``-l``): a token bucket that says when n more bytes may be asked for (pure).

The bucket meters *requests*, not replies: a READ or WRITE of n bytes leaves
only once n tokens are there, so what is in flight is bounded by the limit
itself, from the first request on. Pacing after the fact (scp's
``bandwidth_limit`` sleeps once a buffer has gone) would let a pipelined
transfer start with every request it may hold in flight: 128 x 256 KiB is a
32 MiB burst, 4 s of a 64 Mbit/s limit, before the first pause.

The pumps ask ``delay`` and ``take`` per request (no request is longer than
the bucket: ``limited_block``); a tree's small file, read or written whole,
reserves its whole size and leaves once the bucket has earned it.

The bucket holds at most ``burst`` tokens (``BURST_SECONDS`` of the rate)
and starts full. Until the first request it keeps filling, up to
``START_SECONDS``: the rate over a whole transfer counts its set-up (a
tree's listing, its channels), and the set-up is lent back, never more. So
the rate over a transfer of two seconds stays within a few percent of the
limit, and no window of it carries more than half a second's worth above
the limit.

Tokens are taken once, when a request leaves; a request sent again after a
reconnect takes them again, as its bytes cross the link again. Nothing is
given back for a reply, short or failed: the bucket paces what is asked, and
a short read's rest is asked (and paid) for separately.

No I/O, no clock: times are arguments (seconds of any monotonic clock).
"""

from __future__ import annotations

# Burst, in seconds of the rate: 50 ms is about a WAN round trip plus an SFTP
# OPEN, what a transfer spends before its first byte moves (the bucket lends
# it back at the start) and short enough that a 2 s transfer's rate stays
# within a few percent of the limit.
BURST_SECONDS = 0.05
# Until its first request a transfer's bucket fills up to this many seconds of
# the rate instead (never past BURST_SECONDS once it has spent): its own
# set-up is lent back, as the rate over the whole transfer counts it. A tree at
# 20 ms RTT spent 0.25-0.5 s listing and opening channels before its first
# READ on a busy 2-core VM, up to a third of a 1.5 s copy; a longer set-up (a
# slow listing) still starts with no more than half a second's worth at once.
START_SECONDS = 0.5
# Longest READ/WRITE under a limit, in seconds of the rate: the bucket meters
# whole requests, so a 256 KiB block at 1 MB/s would be a quarter of a second
# between requests, and the transfer's end a quarter second early or late.
# At 25 ms a transfer runs at most burst + block = 75 ms of the limit ahead of
# it (4 % of a 2 s transfer) and costs 40 requests a second: nothing.
BLOCK_SECONDS = 0.025
# A limit's block is a multiple of this, and never less (untrusted.MIN_BLOCK_SIZE).
BLOCK_GRAIN = 4096
# scp's and sftp's -l is in Kbit/s of 1024 bits (scp.c: ``limit_kbps *= 1024``,
# then misc.c's bandwidth_limit counts bytes x 8 against it): 128 bytes/s each.
BYTES_PER_KBIT = 1024 // 8


def kbit_to_bytes(kbits: int) -> int:
    """Bytes per second for scp's ``-l`` value in Kbit/s (1 Kbit = 1024 bits)."""
    return kbits * BYTES_PER_KBIT


def limited_block(block: int, rate: int | None) -> int:
    """The READ/WRITE length under a limit of ``rate`` bytes/s: ``block`` or less."""
    if rate is None:
        return block
    most = int(rate * BLOCK_SECONDS) // BLOCK_GRAIN * BLOCK_GRAIN
    return max(BLOCK_GRAIN, min(block, most))


def start_for(rate: int) -> int:
    """The bucket's cap until the first request: ``START_SECONDS`` of ``rate``."""
    return int(rate * START_SECONDS)


def burst_for(rate: int) -> int:
    """The bucket's size for ``rate`` bytes/s: ``BURST_SECONDS`` of it, at least one grain."""
    return max(BLOCK_GRAIN, int(rate * BURST_SECONDS))


class TokenBucket:
    """Tokens (bytes) accrue at ``rate`` per second up to ``burst``; a request spends them.

    Args:
        rate: bytes per second, positive.
        burst: most tokens held (bytes), positive; the bucket starts full.
        now: the clock's current value.
        start: most tokens held before the first request (the set-up lent
            back: ``start_for``); never less than ``burst``.
    """

    __slots__ = ("burst", "rate", "spent", "stamp", "start", "tokens")

    def __init__(self, rate: float, burst: int, *, now: float, start: int = 0) -> None:
        if not rate > 0 or burst < 1:
            raise ValueError("a token bucket needs a positive rate and burst")
        self.rate = float(rate)
        self.burst = burst
        self.start = max(start, burst)  # the cap until the first request (START_SECONDS)
        self.tokens = float(burst)  # negative: reserved ahead of what has accrued
        self.stamp = now
        self.spent = 0  # bytes granted in all

    def __repr__(self) -> str:
        return (
            f"<TokenBucket rate={self.rate:.0f}B/s burst={self.burst} "
            f"tokens={self.tokens:.0f} spent={self.spent}>"
        )

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            cap = self.burst if self.spent else self.start
            # Accrue up to the cap; what the start lent above the burst stays until spent.
            accrued = min(float(cap), self.tokens + (now - self.stamp) * self.rate)
            self.tokens = max(self.tokens, accrued)
            self.stamp = now

    def delay(self, now: float, count: int) -> float:
        """Seconds from ``now`` until ``count`` bytes may be asked for (0.0: now).

        A count larger than the bucket waits for a full bucket, never longer.
        """
        self._refill(now)
        need = min(count, self.burst) - self.tokens
        return max(0.0, need / self.rate)

    def blocks(self, now: float, block: int) -> int:
        """How many requests of ``block`` bytes may leave at once ``now`` (0: wait ``delay``)."""
        if self.delay(now, block) > 0:
            return 0
        return max(1, int(self.tokens // block))

    def reserve(self, now: float, count: int) -> float:
        """Spend ``count`` bytes' tokens now, for a request that leaves after the delay returned.

        The delay is when the bucket would have held them (a count larger than
        the bucket waits for the tokens it lacks, not only for a full bucket):
        a small file read whole is paced as its blocks would be, and a transfer
        that ends on one never ends ahead of the limit by more than the burst.
        """
        self._refill(now)
        self.tokens -= count
        self.spent += count
        return max(0.0, -self.tokens / self.rate)

    def take(self, now: float, count: int) -> None:
        """``count`` bytes were asked for at ``now``: spend their tokens (into debt if need be)."""
        self._refill(now)
        self.tokens -= count
        self.spent += count
