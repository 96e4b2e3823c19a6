"""Progress reports: a transfer's counts read on a timer and handed to the user's callback.

The engines only count (``Tally``: bytes acknowledged, written or yielded,
the size once known); a ``Reporter`` running beside the transfer reads the
counts every ``INTERVAL`` and asks ``core.progress.ProgressMeter`` whether a
report is due. The callback never runs inside the data path (a reply
callback in ``data_received``): a sync one runs in the reporter's task, an
async one in a task of the reporter's TaskGroup, and while it still runs the
next reports are skipped, never queued. Whatever the callback raises fails
the transfer, as an exception in the body of an ``async for`` would (the
final report comes after the file took its name: there, only the call fails).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from ..core import progress as policy
from ..core.progress import Counts, ProgressMeter
from ..core.stats import Progress, ProgressCallback, TransferStats

# Seconds between reads of the counts, and the least between reports (a test shortens it).
INTERVAL = policy.INTERVAL


class Tally(Protocol):
    """What a single-file engine tells of its progress (``FileTally``; a tree's big files)."""

    def moved(self, count: int) -> None:
        """``count`` more bytes done: acknowledged, written locally, or yielded."""

    def kept(self, count: int) -> None:
        """``count`` bytes an earlier run left intact (``resume``): done, not moved."""

    def sized(self, size: int | None) -> None:
        """The file's size (None: not known, a stream); said again if it changed."""


class FileTally:
    """One file's counts, as its engine reports them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.done = 0
        self.kept_bytes = 0
        self.size: int | None = None
        self.complete = False

    def __repr__(self) -> str:
        return f"<FileTally {self.path} {self.done}/{self.size}>"

    def moved(self, count: int) -> None:
        self.done += count

    def kept(self, count: int) -> None:
        self.done += count
        self.kept_bytes += count

    def sized(self, size: int | None) -> None:
        self.size = size

    def restart(self) -> None:
        """The transfer starts again from nothing (a server refused out-of-order writes).

        The meter keeps what it reported: the bytes sent again are not counted twice.
        """
        self.done = self.kept_bytes = 0

    def counts(self) -> Counts:
        size = self.size
        return Counts(
            bytes_done=self.done,
            bytes_total=size if size is not None else self.done,
            files_done=1 if self.complete else 0,
            files_total=1,
            scan_done=size is not None,
            current=() if self.complete else (self.path,),
            bytes_kept=self.kept_bytes,
        )


class Reporter:
    """Calls ``callback`` with a ``Progress`` made from ``counts()``, while ``running``.

    ``capture``: for a generator (``stream``), whose body is its consumer's
    code: a callback's error is kept and raised by ``check`` at the next
    piece, instead of cancelling whatever the consumer's task is doing.
    """

    def __init__(
        self,
        callback: ProgressCallback,
        counts: Callable[[], Counts],
        *,
        capture: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.callback = callback
        self.counts = counts
        self.capture = capture
        self.clock = clock
        self.meter = ProgressMeter(started=clock(), interval=INTERVAL)
        self.error: BaseException | None = None
        self._group: asyncio.TaskGroup | None = None
        self._busy: asyncio.Task[None] | None = None  # an async callback still running

    def __repr__(self) -> str:
        busy = self._busy is not None and not self._busy.done()
        return f"<Reporter {self.counts()!r} busy={busy} finished={self.meter.finished}>"

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Reporter]:
        """Report while the body runs; after a body that ends well, the final report.

        The body's error comes out as itself, and so does the callback's: it
        stops the body (``capture``: see the class).
        """
        failure: BaseException | None = None
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                ticker = group.create_task(self._ticking())
                try:
                    yield self
                except BaseException as exc:  # CancelledError and GeneratorExit too
                    failure = exc
                ticker.cancel()
                if failure is None:
                    await self._final()
                elif self._busy is not None:
                    self._busy.cancel()  # the transfer failed: its report is moot
        except BaseExceptionGroup as errors:
            # Only the callback's tasks fail in the group (the body's error is
            # caught inside it), and the first failure stops the rest.
            raise errors.exceptions[0] from None
        finally:
            self._group = None
        if failure is not None:
            try:
                raise failure
            finally:
                failure = None  # no reference cycle through the traceback
        self.check()

    def check(self) -> None:
        """Raise the callback's error, if it raised one (``capture``)."""
        if self.error is not None:
            raise self.error

    async def _ticking(self) -> None:
        while self.error is None:
            self._report()
            await asyncio.sleep(INTERVAL)

    def _report(self) -> None:
        if self._busy is not None and not self._busy.done():
            return  # skipped: the next tick reports the newer counts
        progress = self.meter.report(self.clock(), self.counts())
        if progress is not None:
            self._call(progress)

    def _call(self, progress: Progress) -> None:
        try:
            result = self.callback(progress)
        except Exception as exc:
            if not self.capture:
                raise
            self.error = exc
            return
        if inspect.isawaitable(result):
            assert self._group is not None
            self._busy = self._group.create_task(self._awaiting(result))

    async def _awaiting(self, result: Awaitable[None]) -> None:
        try:
            await result
        except Exception as exc:
            if not self.capture:
                raise
            self.error = exc

    async def _final(self) -> None:
        """The last report, after the one still running: exactly one, never skipped."""
        if self._busy is not None:
            # wait(), not await: a suspension, where a cancel the group asked
            # for (the task failed) is taken as the group expects.
            await asyncio.wait([self._busy])
            self._busy.result()  # its error, if the group has not cancelled us first
        if self.error is not None:
            return
        progress = self.meter.report(self.clock(), self.counts(), final=True)
        assert progress is not None  # the meter makes one final report
        result = self.callback(progress)
        if inspect.isawaitable(result):
            await result


async def tracked(
    callback: ProgressCallback | None,
    path: str,
    transfer: Callable[[FileTally | None], Awaitable[TransferStats]],
) -> TransferStats:
    """Run one file's ``transfer`` with its tally reported to ``callback`` (None: no reports).

    The final report is made once the file is in place, with its final size.
    """
    if callback is None:
        return await transfer(None)
    tally = FileTally(path)
    async with Reporter(callback, tally.counts).running():
        stats = await transfer(tally)
        tally.complete = True
    return stats


def stream_reporting(
    callback: ProgressCallback | None, path: str
) -> tuple[FileTally | None, contextlib.AbstractAsyncContextManager[Reporter | None]]:
    """For a generator (``Client.stream``): its tally, and the reporter to run around it
    (``check`` it at each piece); nothing to count and a no-op without ``callback``."""
    if callback is None:
        return None, contextlib.nullcontext()
    tally = FileTally(path)
    return tally, Reporter(callback, tally.counts, capture=True).running()
