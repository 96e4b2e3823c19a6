"""``stream()``: a remote file's bytes yielded in order, and ``read_back`` (its SHA-256).

Replies arrive in any order; a reorder buffer hands them out in offset order,
its bytes charged to the flight budget until yielded. The stream reads through
the same loop as a download, so a server that stops answering is a stall
after ``stall_timeout``.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import AsyncGenerator

from .._config import TransferConfig
from ..core.reorder import ReorderBuffer
from ..transport.pool import Lease
from .lanes import sizing_for
from .readpump import reading


async def read_back(lease: Lease, remote: str, config: TransferConfig) -> str:
    """The SHA-256 of the remote file, read again over SFTP (verify="read-back")."""
    digest = hashlib.sha256()
    async with contextlib.aclosing(stream(lease, remote, config)) as pieces:
        async for piece in pieces:
            digest.update(piece)
    return digest.hexdigest()


async def stream(lease: Lease, remote: str, config: TransferConfig) -> AsyncGenerator[bytes, None]:
    """Yield the remote file's bytes in order; memory stays within the byte budget.

    Raises:
        Stalled: no reply for ``stall_timeout``.
    """
    sizing = sizing_for(config, lease.channels[0], write=False)
    async with reading(lease, remote, config, sizing) as pump:
        plan = pump.plan
        reorder = ReorderBuffer()
        async for batch in pump.arrivals(config.stall_timeout):
            for offset, chunks, _ in batch:
                reorder.add(offset, b"".join(chunks))
            before = reorder.buffered
            pieces = reorder.pop_ready(plan.eof_at if plan.done else None)
            pump.free(before - reorder.buffered)
            for piece in pieces:
                yield piece
        pump.free(reorder.discard())
