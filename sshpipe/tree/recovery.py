"""A tree's pipeline survives a dropped or silent connection: one reconnect for all.

Hundreds of small files may be in flight on the pipeline's channels when the
connection goes. Each remote step of the tree (a listing, a small file, a
symlink) is one operation that can run again from scratch: a download is
only written locally once all its bytes are in, an upload goes to a new
temporary name. So every operation that fails with the connection waits for
one shared reconnect (``Recovery.heal``) and runs again on the new channels;
the retry budget and backoff are the single-file engine's (``after_break``).
Big files are striped by the single-file engine, which reconnects on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from ..core.config import TransferConfig
from ..core.errors import ConnectionBroken
from ..core.retry import RetryBudget
from ..transfer.retrying import after_break
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession
from .tasks import task_group

logger = logging.getLogger("sshpipe.tree")


class Recovery:
    """Reconnects a tree's pipeline once for every operation a connection broke.

    Args:
        lease: the pipeline's channels (a lease on the client's pool).
        config: ``retries`` and ``stall_timeout``.
        progress: a count that grows while the tree moves (bytes or files done):
            a reconnect after progress starts a fresh run of the budget.
        healed: told the live channels after each reconnect.
        label: what the log lines name (the tree's first source).
    """

    def __init__(
        self,
        lease: Lease,
        config: TransferConfig,
        *,
        progress: Callable[[], int],
        healed: Callable[[list[SFTPSession]], Awaitable[None]],
        label: str,
    ) -> None:
        self.lease = lease
        self.config = config
        self.generation = 0  # reconnects done; an operation remembers the one it ran in
        self.reconnects = 0
        self._progress = progress
        self._healed = healed
        self._label = label
        self._budget = RetryBudget(attempts=config.retries)
        self._failures = 0
        self._mark = progress()
        self._group: asyncio.TaskGroup | None = None  # set inside running()
        # The reconnect under way: its outcome, and the task that works it out.
        self._healing: asyncio.Future[None] | None = None
        self._healer: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return (
            f"<Recovery generation={self.generation} failures={self._failures} "
            f"healing={self._healing is not None}>"
        )

    async def heal(self, seen: int, broken: ConnectionBroken) -> None:
        """After ``broken`` in an operation started in generation ``seen``: fresh channels.

        The first caller reconnects; the others wait for it. A caller whose
        operation began before a reconnect that has since finished goes again
        at once: its failure was that connection's, already replaced.

        Raises:
            ConnectionBroken: the budget ran out (the tree stops).
            ConnectError: a failure retrying cannot fix (key or host key refused).
        """
        if seen != self.generation:
            return
        if self._healing is None:
            if self._group is None:
                raise RuntimeError("Recovery.heal outside Recovery.running()")
            self._healing = asyncio.get_running_loop().create_future()
            self._healing.add_done_callback(_retrieve)
            self._healer = self._group.create_task(self._heal(broken, self._healing))
        # A waiter cancelled alone (its operation given up) leaves the reconnect to the others.
        await asyncio.shield(self._healing)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """While the body runs, reconnects run in here; when it ends, so does a
        reconnect still under way (the tree ended without it).

        A silent channel needs no watch of its own here: its session's watchdog
        fails its requests with ``Stalled`` (``SFTPSession.stall_timeout``, set
        by the pool), and their operations heal.
        """
        async with task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                if self._healer is not None:
                    self._healer.cancel()

    async def _heal(self, broken: ConnectionBroken, outcome: asyncio.Future[None]) -> None:
        """Reconnect; ``outcome`` tells the waiters. A failure is theirs to raise (each
        operation's tree decides what it means), not the task group's."""
        try:
            now = self._progress()
            self._failures = await after_break(
                self.lease,
                self._budget,
                self._failures,
                broken,
                progressed=now > self._mark,
                path=self._label,
            )
            self._mark = now
            self.reconnects += 1
            self.generation += 1
            await self._healed(list(self.lease.channels))
            outcome.set_result(None)
        except Exception as exc:
            outcome.set_exception(exc)
        finally:
            self._healing = self._healer = None
            if not outcome.done():  # cancelled: so are its waiters
                outcome.cancel()


def _retrieve(outcome: asyncio.Future[None]) -> None:
    """Its waiters may all be gone (the tree was cancelled): no 'never retrieved' noise."""
    if not outcome.cancelled():
        outcome.exception()
