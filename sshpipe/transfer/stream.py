"""``stream()``: a remote file's bytes yielded in order, and ``read_back`` (its hashes).

``Stream`` is the same with its stats: a download into a FIFO or a device
writes what it yields (``download``).

Replies arrive in any order; a reorder buffer hands them out in offset order,
its bytes charged to the flight budget until yielded. The stream reads through
the same loop as a download (so a server that stops answering is a stall
after ``stall_timeout``) inside the same reconnect loop: after a dropped
connection it goes on at the first byte it has not yielded yet. Pieces that
had arrived beyond it are asked for again rather than carried over, so the
new connection's budget counts everything the buffer holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace

from ..core import codec
from ..core.checkfile import SHA256, Hasher, HashSpec
from ..core.config import TransferConfig
from ..core.readplan import Range, ReadPlan
from ..core.reorder import ReorderBuffer
from ..core.retry import RetryBudget
from ..core.stats import TransferStats
from ..transport.pool import Lease
from .progress import Tally
from .readpump import Piece, ReadPump, reading
from .retrying import Retrying


async def read_back(
    lease: Lease, remote: str, config: TransferConfig, spec: HashSpec = SHA256
) -> bytes:
    """The remote file's hashes (``spec``'s), read again over SFTP (verify="read-back")."""
    hasher = Hasher(spec)
    async with contextlib.aclosing(stream(lease, remote, config)) as pieces:
        async for piece in pieces:
            hasher.update(piece)
    return hasher.digest()


def _from(delivered: int) -> Callable[[codec.Attrs, int], ReadPlan] | None:
    """After a reconnect: a plan that asks for nothing below ``delivered``."""
    if delivered == 0:
        return None

    def plan_for(attrs: codec.Attrs, block: int) -> ReadPlan:
        size = max(attrs.size or 0, delivered)  # a file that shrank ends at the probe
        return ReadPlan.resuming(block_size=block, size=size, have=[Range(0, delivered)])

    return plan_for


class Stream:
    """A remote file's bytes in order (``pieces``), and how its reading went (``stats``).

    ``known``: the file's attributes from a listing, which saves the STAT.
    """

    def __init__(
        self,
        lease: Lease,
        remote: str,
        config: TransferConfig,
        tally: Tally | None = None,
        *,
        known: codec.Attrs | None = None,
    ) -> None:
        self.lease = lease
        self.remote = remote
        self.config = config
        self.tally = tally
        self.known = known
        self.retry = Retrying(lease, RetryBudget(attempts=config.retries), path=remote)
        self.delivered = 0  # every byte below it was yielded
        self.pump: ReadPump | None = None  # the last attempt's

    def __repr__(self) -> str:
        return f"<Stream {self.remote} delivered={self.delivered}>"

    async def pieces(self) -> AsyncGenerator[bytes, None]:
        """Yield the remote file's bytes in order; memory stays within the byte budget.

        Raises:
            Stalled: no reply for ``stall_timeout`` and no reconnect left.
            ConnectionBroken: the connection dropped and the retry budget ran out.
        """
        tally = self.tally
        async for attempt in self.retry.attempts(lambda: self.delivered):
            with attempt:
                async with reading(
                    self.lease,
                    self.remote,
                    self.config,
                    known=self.known,
                    plan_for=_from(self.delivered),
                ) as pump:
                    self.pump = pump
                    plan = pump.plan
                    if tally is not None and self.delivered == 0:
                        tally.sized(plan.size_hint)
                    reorder = ReorderBuffer(self.delivered)
                    async for batch in pump.arrivals():
                        _reorder(reorder, batch)
                        del batch  # copied into the buffer: the arrived bytes go now
                        before = reorder.buffered
                        pieces = reorder.pop_ready(plan.eof_at if plan.done else None)
                        pump.free(before - reorder.buffered)
                        pieces.reverse()
                        while pieces:
                            piece = pieces.pop()
                            self.delivered += len(piece)
                            if tally is not None:
                                tally.moved(len(piece))
                            yield piece
                            del piece  # the reader's now, and no longer charged: not kept here
                    pump.free(reorder.discard())
        if tally is not None:
            tally.sized(self.delivered)

    def stats(self, started: float) -> TransferStats:
        """The reading's stats (its last connection's pump), from ``started`` (perf_counter)."""
        assert self.pump is not None, "stats of a stream never opened"
        stats = self.pump.stats(started, self.delivered, self.lease)
        return replace(stats, reconnects=self.retry.reconnects)


def stream(
    lease: Lease, remote: str, config: TransferConfig, tally: Tally | None = None
) -> AsyncGenerator[bytes, None]:
    """Yield the remote file's bytes in order; memory stays within the byte budget.

    ``tally``: told the size, then each piece's length as it is yielded.

    Raises:
        Stalled: no reply for ``stall_timeout`` and no reconnect left.
        ConnectionBroken: the connection dropped and the retry budget ran out.
    """
    return Stream(lease, remote, config, tally).pieces()


def _reorder(reorder: ReorderBuffer, batch: list[Piece]) -> None:
    for offset, chunks, _ in batch:
        reorder.add(offset, b"".join(chunks))
