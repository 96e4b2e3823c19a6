"""A download shared by worker processes: one partial file, one journal, one commit.

The parent opens the ``.partial`` (or a resume's fixed partial) exactly as a
single download does, and each worker inherits its descriptor and pwrites its
stripe there: no worker opens a local name. The journal of a resumed copy is
the parent's alone, appended from the workers' reports (each sent only after
its bytes are in the file), so its semantics are the single process's. Once
every worker is done the existing verify runs over the file on disk and the
existing commit renames it; any failure discards it (a resume's is kept).
"""

from __future__ import annotations

import logging
import stat
import time

from ..core.config import ConnectConfig, TransferConfig
from ..core.errors import IntegrityError, RemoteError
from ..core.readplan import Range, ReadPlan
from ..core.stats import TransferStats
from ..durability.journal import DownloadResume
from ..durability.ledger import local_temps
from ..local.device import device_at
from ..local.dirfd import local_error
from ..local.target import LocalTarget, destination_of
from ..transfer.lanes import sizing_for
from ..transfer.progress import Tally
from ..transfer.verify import verify_copy
from ..transport.pool import ChannelPool, Lease
from . import wire
from .common import count_for, hello_for, merged, split
from .crew import Crew

logger = logging.getLogger("sshpipe.workers")


async def shared_download(
    connect: ConnectConfig,
    pool: ChannelPool,
    lease: Lease,
    remote: str,
    local: str,
    config: TransferConfig,
    tally: Tally | None = None,
) -> TransferStats | None:
    """``remote`` to ``local`` by ``config.workers`` processes; None: not a file worth it.

    None (a file too small for a second worker, on a read-once server, or
    not a regular file: the
    single download says what is wrong with it; a FIFO or device to write
    into, in order) leaves the caller to copy it in one process.

    Raises:
        as ``download``; UsageError from ``hello_for``.
    """
    sftp = lease.channels[0]
    if sftp.caps.quirks.read_once:
        # Each worker would open the file again, and the STAT could consume it.
        if sftp.caps.adapt("one process: a read-once file is opened once (--workers)"):
            logger.info("--workers: one process: a read-once file is opened once")
        return None
    try:
        attrs = await sftp.stat(remote)
    except RemoteError:
        return None  # the single download's OPEN says what is wrong, as it always does
    if attrs.size is None or attrs.permissions is None or not stat.S_ISREG(attrs.permissions):
        return None
    size = attrs.size
    count = count_for(config, size)
    if count < 2:
        return None
    hello = hello_for(connect, pool, config, count)
    started = time.perf_counter()
    with destination_of(local, remote, temps=local_temps()) as file:
        if device_at(file) is not None:
            return None  # written in order by one process: no worker can pwrite into it
        resuming = DownloadResume(remote, file) if config.resume else None
        target = LocalTarget(
            file,
            fsync=config.fsync,
            inplace=config.inplace,
            resume_from=resuming.partial if resuming is not None else None,
        )
        target.open()
        committed = False
        try:
            async with Crew(count, hello, [target.fileno()]) as crew:  # they log in meanwhile
                sizing = await sizing_for(config, sftp, write=False)
                if resuming is not None:
                    plan = resuming.plan_for(attrs, sizing.block)
                else:
                    plan = ReadPlan(block_size=sizing.block, size_hint=size)
                owed = _owed(plan, size)
                if tally is not None:
                    tally.sized(size)
                    tally.kept(resuming.kept if resuming is not None else 0)
                parts = split(owed, count)
                jobs = [
                    wire.Job(
                        direction="get",
                        remote=remote,
                        shown=remote,
                        local=str(file),
                        size=size,
                        ranges=ranges,
                        fd=target.fileno(),
                        journal=resuming is not None,
                    )
                    for ranges in parts
                ]
                await crew.shrink(len(jobs))  # a resume may owe less than a stripe each

                def moved(report: wire.Moved) -> None:
                    if tally is not None:
                        tally.moved(report.count)
                    if resuming is not None and report.journal:
                        try:
                            resuming.journal.record_hashed(list(report.journal))
                        except OSError as exc:
                            raise local_error(resuming.journal.path, exc) from exc

                dones = await crew.run(jobs, moved) if jobs else []
            if any(done.final_size != size for done in dones):
                raise IntegrityError(remote, "changed size while it was copied")
            verified = await verify_copy(
                sftp, lease, remote, config, size=size, local=target.temp, shown=remote
            )
            await target.commit(size, in_thread=config.local_io_in_thread)
            committed = True
        finally:
            if resuming is not None:
                resuming.finish(committed)
            if not committed:
                target.discard()
    kept = resuming.kept if resuming is not None else 0
    if not dones:  # a resume that found every byte intact
        return TransferStats(
            bytes=size,
            seconds=time.perf_counter() - started,
            requests=0,
            short_reads_reissued=0,
            short_writes_reissued=0,
            peak_requests_in_flight=0,
            peak_bytes_in_flight=0,
            channels=1,
            block_size=sizing.block,
            verified=verified,
            resumed_bytes=kept,
        )
    return merged(dones, size=size, started=started, verified=verified, resumed=kept)


def _owed(plan: ReadPlan, size: int) -> list[Range]:
    """What the plan still asks for below ``size``, as merged ranges (a resume's gaps)."""
    if plan.frontier < size:  # a fresh plan: all of it
        return [Range(0, size)]
    owed: list[Range] = []
    for hole in sorted(plan.holes, key=lambda rng: rng.offset):
        if owed and owed[-1].end == hole.offset:
            owed[-1] = Range(owed[-1].offset, owed[-1].length + hole.length)
        else:
            owed.append(hole)
    return owed
