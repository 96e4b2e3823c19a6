"""A small remote file read whole in one round trip after the OPEN.

A download's small files are read so (``TreeGet.copy_small``), and so is
--verify's read-back of a small file in either direction.
"""

from __future__ import annotations

import asyncio
from functools import partial

from ..core import codec
from ..core.checkfile import HashSpec
from ..core.readplan import EOF, Range, ReadPlan, classify_read
from ..core.status import status_error
from ..local.writeback import Batch
from ..transport.pacing import Pacer
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession
from .verify import digests_of_pieces


async def fetch_small(
    sftp: SFTPSession, path: str, size: int, block: int, *, pacer: Pacer | None = None
) -> tuple[Batch, int] | None:
    """A small remote file's bytes, in one round trip after the OPEN.

    ``pacer``: the rate limit its READs wait for, all together (a file it
    reads so is no larger than its bucket: ``TreeRun.is_small``).

    Returns:
        (pieces, size), or None when the file grew past ``size`` or a read came
        back short (the handle is closed by then: the caller starts over).
    """
    handle = await sftp.open(path, codec.FXF_READ)
    if pacer is not None:
        try:
            await pacer.acquire(size + 1)  # with the 1-byte probe past the end
        except BaseException:
            sftp.close_handle_soon(handle, path)
            raise
    plan = ReadPlan(block_size=block, size_hint=size, probe_length=1)
    done = sftp_future()
    pieces: Batch = []
    failure: list[BaseException] = []

    def on_reply(rng: Range, reply: codec.Reply | BaseException) -> None:
        outcome = classify_read(path, rng, reply)
        if isinstance(outcome, codec.Data):
            plan.on_data(rng, outcome.length)
            pieces.append((rng.offset, outcome.chunks))
        elif outcome is EOF:
            plan.on_eof(rng)
        else:
            plan.on_retry(rng)
            if not failure:
                if isinstance(outcome, codec.Status):
                    outcome = status_error(outcome, path, rng.offset)
                failure.append(outcome)
        if plan.outstanding == 0 and not done.done():
            done.set_result(None)

    while (rng := plan.next_range()) is not None:
        try:
            sftp.send_read(handle, rng.offset, rng.length, partial(on_reply, rng))
        except BaseException as exc:  # the channel broke: the reply will never come
            on_reply(rng, exc)
            break
    closing = sftp.request(lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, handle))
    try:
        await done
    except asyncio.CancelledError:
        sftp.settle_later(closing)  # the READs' answers and the CLOSE's come to the pool
        raise
    if failure:
        closing.add_done_callback(quiet)
        raise failure[0]
    sftp.check_status(await closing, path)
    if plan.max_received_end > size or not plan.done:
        return None
    return pieces, plan.final_size


async def read_back_small(
    sftp: SFTPSession, path: str, size: int, block: int, spec: HashSpec
) -> bytes | None:
    """A small remote file's hashes (``spec``'s) as read again; None if it grew past ``size``."""
    fetched = await fetch_small(sftp, path, size, block)
    return digests_of_pieces(fetched[0], [spec])[spec] if fetched is not None else None


def sftp_future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()
