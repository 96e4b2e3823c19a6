"""Requests that arrive while a batch runs wait, and run together as the next batch.

A tree has hundreds of files finishing at once, and some steps cost the same
for one file as for many: a ``syncfs`` (``_groupcommit``), a ``sync -f`` or a
``sha256sum`` on the server (``_remotesync``, ``_treeverify``). So each such
step runs for every file that is ready, and the files that become ready
meanwhile form the next batch: the batches grow as large as the step is slow.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar

from .tasks import task_group

_In = TypeVar("_In")
_Out = TypeVar("_Out")


class Batcher(Generic[_In, _Out]):
    """Runs ``run`` on the items submitted while the previous batch ran.

    Items are submitted inside ``running()``, where the batches run.

    Args:
        run: one result per item, in order; an exception fails the whole batch.
        max_batch: most items in one batch (a command line stays short).
    """

    def __init__(
        self, run: Callable[[list[_In]], Awaitable[list[_Out]]], *, max_batch: int = 1024
    ) -> None:
        self._run = run
        self.max_batch = max_batch
        self._queue: list[tuple[_In, asyncio.Future[_Out]]] = []
        self._group: asyncio.TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self.batches = 0

    def __repr__(self) -> str:
        return f"<Batcher waiting={len(self._queue)} batches={self.batches}>"

    async def submit(self, item: _In) -> _Out:
        """``item``'s result, from a batch that starts after this call.

        A waiter that is cancelled does not take its item back: a batch may
        already hold it (a file being synced is renamed all the same).
        """
        if self._group is None:
            raise RuntimeError("Batcher.submit outside Batcher.running()")
        future: asyncio.Future[_Out] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._task is None or self._task.done():
            self._task = self._group.create_task(self._drain())
        return await future

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The batches run in a TaskGroup of their own while the body runs.

        However the body ends, the batch under way and those queued behind it
        are finished before this returns, not cancelled: their items may be
        work already handed over (a whole file to be renamed).
        """
        async with task_group() as group:
            self._group = group
            try:
                yield
            finally:
                if self._task is not None:
                    await asyncio.wait([self._task])
                self._group = None

    async def _drain(self) -> None:
        while self._queue:
            batch = self._queue[: self.max_batch]
            del self._queue[: self.max_batch]
            self.batches += 1
            outcome: list[_Out] | BaseException
            try:
                outcome = await self._run([item for item, _ in batch])
            except Exception as exc:
                outcome = exc
            for index, (_, future) in enumerate(batch):
                if future.done():  # its waiter was cancelled
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome[index])
