"""Random-access reads of one open remote file: ranges fetched at once, and a read-ahead.

``Fetcher`` sends the READs of any number of ``core.rangeread.RangeRead``
over one handle, as many at once as the flight budget allows (the client's
shared byte cap among them), issuing the next from the reply callbacks as
the read pump does (``readpump.py``): no task per request. Each range's
future resolves with its bytes once all of them are in; a short reply is
re-asked at ``offset + received``.

``SequentialReader`` serves ``read(n)`` at a position from a read-ahead of
block-sized fetches that ``core.readahead`` sizes: it grows while reads are
sequential and drops to nothing on a seek, so memory stays within the
read-ahead (plus one block and the read itself).
"""

from __future__ import annotations

import asyncio
from collections import deque
from functools import partial

from ..core import codec
from ..core.flight import FlightBudget
from ..core.rangeread import RangeRead
from ..core.readahead import ReadAhead
from ..core.readplan import EOF, Range, classify_read
from ..core.status import status_error
from ..transport.pacing import Pacer
from .lanes import Lane


class Fetch:
    """One range being read; ``future`` gets its bytes (short at the end of the file)."""

    __slots__ = ("failed", "future", "read")

    def __init__(self, read: RangeRead, future: asyncio.Future[bytes]) -> None:
        self.read = read
        self.future = future
        self.failed = False  # failed or abandoned: its late replies are dropped

    @property
    def offset(self) -> int:
        return self.read.offset

    @property
    def length(self) -> int:
        return self.read.end - self.read.offset

    def fail(self, exc: BaseException) -> None:
        self.failed = True
        if not self.future.done():
            self.future.set_exception(exc)
            self.future.exception()  # read or not: no "never retrieved" warning


class Fetcher:
    """The READs of many ranges on one lane, within a flight budget.

    Args:
        lane: the channel and handle read from.
        path: the remote path (for errors).
        block: the longest READ (the sizing's).
        budget: requests and bytes in flight; bytes are charged from the READ
            until its reply (the reply's bytes are then the caller's).
        pacer: the rate limit, if any.
    """

    def __init__(
        self, lane: Lane, path: str, block: int, budget: FlightBudget, pacer: Pacer | None
    ) -> None:
        self.lane = lane
        self.path = path
        self.block = block
        self.budget = budget
        budget.on_room = self.fill  # a block the shared cap granted after a wait
        self.pacer = pacer
        self._queue: deque[Fetch] = deque()  # fetches with READs still to send
        self._paced: asyncio.TimerHandle | None = None
        self.requests = 0
        self.bytes = 0
        self.short_reads = 0
        self.unanswered = 0

    def fetch(self, offset: int, length: int) -> Fetch:
        """Start reading ``[offset, offset + length)``; await ``.future`` for its bytes."""
        loop = asyncio.get_running_loop()
        fetch = Fetch(RangeRead(offset, length, self.block), loop.create_future())
        if fetch.read.done:
            fetch.future.set_result(b"")
            return fetch
        self._queue.append(fetch)
        self.fill()
        return fetch

    def abandon(self, fetch: Fetch) -> None:
        """Nobody wants ``fetch`` now (a seek, a cancel): send no more of it."""
        fetch.failed = True
        if not fetch.future.done():
            fetch.future.cancel()

    def stop(self) -> None:
        """The file is closing: no READ goes out after this, no wake-up stays behind."""
        for fetch in self._queue:
            self.abandon(fetch)
        self._queue.clear()
        self.budget.stop_asking()
        timer, self._paced = self._paced, None
        if timer is not None:
            timer.cancel()

    def fill(self) -> None:
        """Send what the budget allows, oldest fetch first."""
        try:
            self._fill()
        finally:
            self.budget.unreserve()  # a block the shared cap granted and nothing took

    def _fill(self) -> None:
        budget, queue, lane = self.budget, self._queue, self.lane
        while queue:
            fetch = queue[0]
            if fetch.failed:
                queue.popleft()
                continue
            if not budget.has_room(self.block):
                return
            rng = fetch.read.next_range()
            if rng is None:
                queue.popleft()
                continue
            if self.pacer is not None and not self.pacer.grant(rng.length):
                fetch.read.put_back(rng)
                if self._paced is None:
                    self._paced = self.pacer.wake_at(rng.length, self._tokens_came)
                return
            budget.send(rng.length)
            self.requests += 1
            self.unanswered += 1
            reply = partial(self._on_reply, fetch, rng)
            try:
                lane.sftp.send_read(lane.handle, rng.offset, rng.length, reply)
            except BaseException as exc:  # the channel broke (or was closed): answered now
                reply(exc)

    def _tokens_came(self) -> None:
        self._paced = None
        self.fill()

    def _on_reply(self, fetch: Fetch, rng: Range, reply: codec.Reply | BaseException) -> None:
        self.unanswered -= 1
        self.budget.reply(rng.length, 0)
        read = fetch.read
        outcome = classify_read(self.path, rng, reply)
        if isinstance(outcome, codec.Data):
            self.bytes += outcome.length
            if fetch.failed:
                read.on_lost(rng)
            else:
                read.on_data(rng, b"".join(outcome.chunks))
                if outcome.length < rng.length:
                    self.short_reads += 1
                    if read.wants and fetch not in self._queue:
                        self._queue.appendleft(fetch)  # its rest is wanted first
        elif outcome is EOF:
            read.on_eof(rng)
        else:
            read.on_lost(rng)
            if isinstance(outcome, codec.Status):
                outcome = status_error(outcome, self.path, rng.offset)
            fetch.fail(outcome)
        if not fetch.failed and read.done and not fetch.future.done():
            fetch.future.set_result(read.result())
        self.fill()


async def fetched(fetcher: Fetcher, fetch: Fetch) -> bytes:
    """``fetch``'s bytes; cancelled, the rest of it is abandoned."""
    try:
        return await fetch.future
    except asyncio.CancelledError:
        fetcher.abandon(fetch)
        raise


class SequentialReader:
    """``read(n)`` at a position, served from a read-ahead that follows the pattern.

    The read-ahead is a queue of fetches covering ``[held_at, ahead_end)``
    contiguously after the bytes held (``_held``, what the last fetch
    consumed brought). A read that starts elsewhere drops it all.
    """

    def __init__(self, fetcher: Fetcher, policy: ReadAhead, size_hint: int | None) -> None:
        self.fetcher = fetcher
        self.policy = policy
        self.size_hint = size_hint
        self._held = b""
        self._held_at = 0
        self._ahead: deque[Fetch] = deque()
        self._ahead_end = 0

    @property
    def buffered(self) -> int:
        """Bytes held or asked for ahead of the reader (the read-ahead's memory bound)."""
        return len(self._held) + self._ahead_end - (self._held_at + len(self._held))

    def drop(self) -> None:
        """Forget the read-ahead: its fetches are abandoned, its bytes freed."""
        for fetch in self._ahead:
            self.fetcher.abandon(fetch)
        self._ahead.clear()
        self._held = b""
        self._held_at = self._ahead_end = 0

    def _skip_to(self, pos: int) -> None:
        """Keep only what lies at or after ``pos`` (all of it goes if ``pos`` is outside)."""
        if not self._held_at <= pos <= self._ahead_end:
            self.drop()
            self._held_at = self._ahead_end = pos
            return
        ahead = self._ahead
        while ahead and ahead[0].offset + ahead[0].length <= pos:
            self.fetcher.abandon(ahead.popleft())
            self._held = b""
        if pos >= self._held_at + len(self._held):
            self._held = b""
        else:
            self._held = self._held[pos - self._held_at :]
        if self._held or not ahead:
            self._held_at = pos
        else:
            self._held_at = ahead[0].offset

    def _ask(self, want_end: int, window: int) -> None:
        """Have ``[.., want_end)`` asked for, and ``window`` bytes past it in blocks."""
        fetcher, block = self.fetcher, self.fetcher.block
        if window == 0:
            if self._ahead_end < want_end:
                self._ahead.append(fetcher.fetch(self._ahead_end, want_end - self._ahead_end))
                self._ahead_end = want_end
            return
        target = want_end + window
        if self.size_hint is not None:
            # The size is a hint: what was asked for is read whatever it says
            # (the file may have grown), but read-ahead stops there.
            target = max(want_end, min(target, self.size_hint))
        # Topped up at half the window, a block at a time: a reader of small
        # pieces does not send a READ of a few bytes per call.
        if self._ahead_end >= want_end and self._ahead_end - want_end >= window // 2:
            return
        while self._ahead_end < target:
            length = block
            if self.size_hint is not None and self._ahead_end < self.size_hint:
                length = min(block, self.size_hint - self._ahead_end)
            self._ahead.append(fetcher.fetch(self._ahead_end, length))
            self._ahead_end += length

    async def read(self, pos: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``pos``: fewer only at the end of the file."""
        window = self.policy.on_read(pos, n)
        self._skip_to(pos)
        want_end = pos + n
        self._ask(want_end, window)
        out: list[bytes] = []
        at = pos
        try:
            while at < want_end:
                held_end = self._held_at + len(self._held)
                if self._held and self._held_at <= at < held_end:
                    take = min(held_end, want_end) - at
                    start = at - self._held_at
                    out.append(self._held[start : start + take])
                    at += take
                    continue
                if not self._ahead:
                    break  # the end of the file
                fetch = self._ahead[0]
                data = await fetch.future
                self._ahead.popleft()
                self._held, self._held_at = data, fetch.offset
                if len(data) < fetch.length:  # the end of the file: nothing past it
                    for later in self._ahead:
                        self.fetcher.abandon(later)
                    self._ahead.clear()
                    self._ahead_end = fetch.offset + len(data)
                    if at >= self._ahead_end:
                        break
        except BaseException:
            self.drop()  # cancelled or failed: nothing half-consumed is kept
            raise
        if at < want_end:
            self.policy.ended(at)
        return b"".join(out)
