"""``stream()``: a remote file's bytes yielded in order, and ``read_back`` (its SHA-256).

Replies arrive in any order; a reorder buffer hands them out in offset order,
its bytes charged to the flight budget until yielded.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncGenerator

from .._config import TransferConfig
from ..core.reorder import ReorderBuffer
from ..transport.pool import Lease
from .readpump import finish_reads, reading

logger = logging.getLogger("sshpipe.download")

Chunks = list[bytes | memoryview]  # one reply's payload, as the slices it arrived in


async def read_back(lease: Lease, remote: str, config: TransferConfig) -> str:
    """The SHA-256 of the remote file, read again over SFTP (verify="read-back")."""
    digest = hashlib.sha256()
    async with contextlib.aclosing(stream(lease, remote, config)) as pieces:
        async for piece in pieces:
            digest.update(piece)
    return digest.hexdigest()


async def stream(lease: Lease, remote: str, config: TransferConfig) -> AsyncGenerator[bytes, None]:
    """Yield the remote file's bytes in order; memory stays within the byte budget."""
    async with reading(lease, remote, config) as (pump, grower):
        plan = pump.plan
        reorder = ReorderBuffer()
        failure: BaseException | None = None
        try:
            pump.fill()
            while True:
                for offset, chunks, _ in pump.take():
                    reorder.add(offset, b"".join(chunks))
                before = reorder.buffered
                pieces = reorder.pop_ready(plan.eof_at if plan.done else None)
                pump.free(before - reorder.buffered)
                for piece in pieces:
                    yield piece
                if pump.finished and not pump.arrived:
                    break
                if not pieces:
                    await pump.wait()
            if pump.error is not None:
                raise pump.error
            pump.free(reorder.discard())
        except BaseException as exc:
            failure = exc
            raise
        finally:
            await finish_reads(pump, grower, failure)
