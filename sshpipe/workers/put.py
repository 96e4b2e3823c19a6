"""An upload shared by worker processes: one remote temporary file, one rename.

The parent creates the temporary file (EXCL, the source's mode, the replaced
file's mode and owner kept as a single upload keeps them) and closes it; each
worker opens it for WRITE only and sends its stripe, read by pread from the
source, at the same offsets (fsyncing its handle when ``config.fsync``). Once
every worker is done the existing verify and rename run; any failure removes
the temporary file, as a single upload does.
"""

from __future__ import annotations

import asyncio
import time

from ..core import codec
from ..core.config import ConnectConfig, TransferConfig
from ..core.errors import RemoteError
from ..core.readplan import Range
from ..core.stats import TransferStats
from ..local.source import LocalSource, is_pipe
from ..transfer.lanes import cancelled
from ..transfer.progress import Tally
from ..transfer.verify import verify_copy
from ..transport.pool import ChannelPool, Lease
from ..transport.remoteplace import (
    Landing,
    discard_temp,
    keep_existing_mode,
    landing_of,
    named,
    remote_temp_name,
    rename_into_place,
    replaced_by,
)
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession
from . import wire
from .common import count_for, hello_for, merged, split
from .crew import Crew


def shares_upload(config: TransferConfig) -> bool:
    """Whether an upload may be shared: not one whose temp name or order is fixed."""
    return not (config.resume or config.inplace or config.sequential_writes)


async def shared_upload(
    connect: ConnectConfig,
    pool: ChannelPool,
    lease: Lease,
    local: str,
    remote: str,
    config: TransferConfig,
    tally: Tally | None = None,
) -> TransferStats | None:
    """``local`` to ``remote`` by ``config.workers`` processes; None: copy it in one.

    None: a file too small for a second worker, or a config a shared upload
    does not do (``shares_upload``).

    Raises:
        as ``upload``; UsageError from ``hello_for``.
    """
    if not shares_upload(config):
        return None
    if is_pipe(local):
        return None  # read once, in order, by one process (opening it here would end it)
    source = LocalSource(local)
    source.open()
    try:
        count = count_for(config, source.size)
        if count < 2:
            return None
        hello = hello_for(connect, pool, config, count)
        return await _shared(hello, count, lease, source, remote, config, tally)
    finally:
        source.close()


async def _shared(
    hello: wire.Hello,
    count: int,
    lease: Lease,
    source: LocalSource,
    remote: str,
    config: TransferConfig,
    tally: Tally | None,
) -> TransferStats:
    started = time.perf_counter()
    sftp = lease.channels[0]
    size = source.size
    temp: str | None = None
    failure: BaseException | None = None
    try:
        async with Crew(count, hello) as crew:  # they log in while the temp file is made
            remote, existing = await _landing(sftp, remote, source)
            temp = remote_temp_name(sftp, remote)  # from here on it is ours to remove
            await _create(sftp, temp, remote, existing, source)
            if tally is not None:
                tally.sized(size)
            jobs = [
                wire.Job(
                    direction="put",
                    remote=temp,
                    shown=remote,
                    local=str(source.path),
                    size=size,
                    ranges=ranges,
                    identity=source.identity,
                )
                for ranges in split([Range(0, size)], count)
            ]
            await crew.shrink(len(jobs))

            def moved(report: wire.Moved) -> None:
                if tally is not None:
                    tally.moved(report.count)

            dones = await crew.run(jobs, moved)
        # The workers read it by descriptors of their own, the check hashes it from
        # disk: a source changed since it was opened is said so, before and after.
        source.check_unchanged()
        verified = await verify_copy(
            sftp, lease, temp, config, size=size, local=source.path, shown=remote
        )
        source.check_unchanged()
        landing = Landing(size, await replaced_by(existing))
        await rename_into_place(sftp, temp, remote, landing)
        temp = None
        return merged(dones, size=size, started=started, verified=verified)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        if temp is not None:  # cancelled, it leaves at once: the pool settles the REMOVE
            channels = [sftp, *lease.channels]
            await discard_temp(sftp.temps, channels, temp, at_once=cancelled(failure))


async def _landing(
    sftp: SFTPSession, remote: str, source: LocalSource
) -> tuple[str, asyncio.Future[codec.Reply]]:
    """Where the file lands (inside a directory at ``remote``), and the STAT of what is there."""
    existing = sftp.stat_request(remote)
    existing.add_done_callback(quiet)
    landing = await landing_of(existing, remote, source.path.name)
    if landing != remote:  # a directory: the file goes inside it
        existing = sftp.stat_request(landing)
        existing.add_done_callback(quiet)
    return landing, existing


async def _create(
    sftp: SFTPSession,
    temp: str,
    remote: str,
    existing: asyncio.Future[codec.Reply],
    source: LocalSource,
) -> None:
    """``temp`` created empty, with the mode (and owner) the file it replaces had."""
    pflags = codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_EXCL | codec.FXF_TRUNC
    try:
        handle = await sftp.open(temp, pflags, codec.Attrs(permissions=source.mode))
    except RemoteError as exc:
        raise named(exc, remote) from exc
    try:
        kept = await keep_existing_mode(sftp, handle, existing, source.mode)
        if kept is not None:
            sftp.check_status(await kept, remote)
    finally:
        await sftp.close_handle(handle, temp)
