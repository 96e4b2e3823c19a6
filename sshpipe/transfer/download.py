"""Downloads: keep READs in flight over the lease and write the pieces to a temp file.

The awaiting coroutine only moves payload to the disk and frees budget as it
goes: "ask the core -> await I/O -> feed the core". A dropped connection is
reopened and only what is missing is asked for again. A FIFO or character
device the user names is written into, in order, instead (``_into_device``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from ..core import codec
from ..core.config import TransferConfig
from ..core.errors import ConnectionBroken, UsageError
from ..core.flight import SharedBytes
from ..core.readplan import ReadPlan
from ..core.retry import RetryBudget
from ..core.stats import TransferStats
from ..core.text import printable
from ..durability.journal import DownloadResume
from ..durability.ledger import local_temps
from ..local.device import DeviceSink, device_at, special_kind
from ..local.dirfd import LocalFile
from ..local.target import FileAttrs, InlineWriter, LocalTarget, Writer, destination_of
from ..transport.pool import Lease
from .progress import Tally
from .pumpsetup import setup_phases, take_setup
from .readpump import Piece, ReadPump, reading
from .retrying import Retrying
from .stream import Stream
from .verify import OrderedHash, RemoteHash, plan_for, read_once_level, verify_copy

logger = logging.getLogger("sshpipe.download")


async def download(
    lease: Lease,
    remote: str,
    local: str | LocalFile,
    config: TransferConfig,
    *,
    into_directory: bool = True,
    new_file_mode: int = 0o644,
    shared: SharedBytes | None = None,
    on_tail: Callable[[], None] | None = None,
    known: codec.Attrs | None = None,
    tally: Tally | None = None,
    remote_hash: RemoteHash | None = None,
    attrs: FileAttrs | None = None,
) -> TransferStats:
    """Copy ``remote`` to ``local`` through a temp file renamed into place at the end.

    A dropped or stalled connection is reopened (``config.retries``, with
    backoff) and only the ranges still missing are asked for again; the bytes
    already written stay where they are.

    ``local``: a path of the user's, or a file a tree placed (reached by
    directory descriptors: see ``_localdir``).
    ``into_directory``: a directory at ``local`` receives the file under its
    remote name (scp); False (a tree already chose the name) makes it an error.
    ``shared``: a byte cap shared with other transfers (a tree's big files).
    ``on_tail``: called once every byte has been asked for (a tree then starts
    its next big file while this one's last round trip and CLOSE go by).
    ``known``: the file's attributes from a listing, which saves the FSTAT.
    ``tally``: told the size, then each count of bytes written to the local file
    (and those a resumed copy kept).
    ``remote_hash``: how --verify gets the server's hash (default: an exec).
    ``attrs``: the mode and times the file takes before its rename (``-p``).
    """
    into = remote if into_directory else None
    # A path: its directory is opened here, its temporary file entered in the ledger.
    with destination_of(local, into, temps=local_temps()) as file:
        device = None if isinstance(local, LocalFile) else device_at(file)
        if device is not None:  # the user's FIFO or character device: written into
            kind = special_kind(device.st_mode) or "a device"
            return await _into_device(
                lease, remote, file, kind, config, known=known, tally=tally, remote_hash=remote_hash
            )
        started = time.perf_counter()
        began, opened = time.monotonic(), take_setup(lease.channels[0])
        once = read_once(lease, config, remote)  # before anything is made locally
        resuming = DownloadResume(remote, file) if config.resume else None
        target = LocalTarget(
            file,
            new_file_mode=new_file_mode,
            fsync=config.fsync,
            inplace=config.inplace,
            resume_from=resuming.partial if resuming is not None else None,
        )
        target.open()
        committed = False
        sink = _Sink()
        writer = target.start_writer(
            sink.on_written,
            in_thread=config.local_io_in_thread,
            after_write=resuming.journal.record if resuming is not None else None,
        )
        written = False
        checks = plan_for(config.verify, lease.channels[0], remote_hash, read_once=once)
        # A resumed copy's kept bytes do not flow through this run: it is hashed from disk.
        hashing = bool(checks.specs) and resuming is None
        consumer = _ToDisk(config, digest=OrderedHash(checks.specs) if hashing else None)
        consumer.on_tail = on_tail
        try:
            # A read-once file cannot be opened again: a break ends the copy.
            retries = 0 if once else config.retries
            retry = Retrying(lease, RetryBudget(attempts=retries), path=remote)
            plan: ReadPlan | None = None

            def received() -> int:
                return plan.received if plan is not None else 0

            try:
                async for attempt in retry.attempts(received):
                    with attempt:
                        async with reading(
                            lease,
                            remote,
                            config,
                            shared=shared,
                            known=known,
                            plan=plan,
                            plan_for=resuming.plan_for if resuming is not None else None,
                        ) as pump:
                            sink.pump = pump
                            if tally is not None:
                                if plan is None:  # the first attempt: the file is open
                                    tally.sized(pump.plan.size_hint)
                                    tally.kept(resuming.kept if resuming is not None else 0)
                                pump.on_moved = tally.moved
                            plan = pump.plan
                            await consumer.run(pump, writer)
            except ConnectionBroken as exc:
                if not once:
                    raise
                raise ConnectionBroken(
                    f"{printable(remote)}: {exc}: a read-once file cannot be opened again"
                ) from exc
            assert plan is not None  # the attempts end with an error or a done plan
            if plan.changed:
                _say_changed(remote, plan)
            if tally is not None:
                tally.sized(plan.final_size)
            await writer.close()
            written = True
            # A read-once server's size is the one its handle stated: a STAT by name
            # would find the file gone. Where it stated none, there is nothing to check.
            unsized = once and plan.first_size is None and config.verify != "none"
            if unsized:
                logger.warning(
                    "%s: not verified: the read-once server stated no size", printable(remote)
                )
            verified = await verify_copy(
                lease.channels[0],
                lease,
                remote,
                replace(config, verify="none") if unsized else config,
                size=plan.final_size,
                local=target.temp,
                streamed=consumer.digest,
                plan=checks,
                shown=remote,
                remote_hash=remote_hash,
                stated_size=plan.first_size if once else None,
            )
            committing = time.monotonic()
            await target.commit(plan.final_size, in_thread=config.local_io_in_thread, attrs=attrs)
            committed = True
            commit = [("commit", time.monotonic() - committing)]
            stats = pump.stats(started, plan.final_size, lease)
            resumed = resuming.kept if resuming is not None else 0
            return replace(
                stats,
                verified=verified,
                reconnects=retry.reconnects,
                resumed_bytes=resumed,
                setup=setup_phases(began, opened, pump, lease.channels[0].init_rtt, commit),
            )
        finally:
            if not written:
                await writer.close(abandon=True)
            if resuming is not None:
                resuming.finish(committed)
            if not committed:
                target.discard()


def read_once(lease: Lease, config: TransferConfig, remote: str) -> bool:
    """Whether ``remote`` is on a read-once server; what that changes is said once.

    Raises:
        HashUnavailable: ``--verify`` asks for a hash or a read-back, which a
            file read once cannot have; said before the file is opened, so
            it is not consumed for nothing.
    """
    caps = lease.channels[0].caps
    if not caps.quirks.read_once:
        return False
    read_once_level(caps, config.verify, remote)
    if config.resume and caps.adapt("--resume cannot continue a copy cut short"):
        logger.warning(
            "--resume: a read-once file cannot be opened again: a copy cut short "
            "keeps its partial file, but cannot continue from this server"
        )
    return True


def _say_changed(remote: str, plan: ReadPlan) -> None:
    """A warning, once: the file grew or shrank while it was read (``TransferStats.size_changed``).

    Not an error: the copy is what the server sent, as ``cp`` or ``scp`` of a
    live file gives (a log being written is the usual case); ``--verify``
    then compares it with the file as it is after.
    """
    was, now = plan.first_size, plan.final_size
    how = "changed size" if was is None or was == now else "grew" if now > was else "shrank"
    sizes = f" from {was} to {now} bytes" if was is not None and was != now else ""
    logger.warning(
        "%s %s while it was copied%s: the copy holds what the server sent then",
        printable(remote),
        how,
        sizes,
    )


async def _into_device(
    lease: Lease,
    remote: str,
    file: LocalFile,
    kind: str,
    config: TransferConfig,
    *,
    known: codec.Attrs | None,
    tally: Tally | None,
    remote_hash: RemoteHash | None,
) -> TransferStats:
    """``remote`` written into the user's FIFO or character device at ``file``, in order.

    The bytes come as ``stream()`` yields them (in order, within the byte
    budget, reconnects included) and are written as they come. Nothing of a
    file's landing applies: no temporary name, no rename, no truncation, no
    fsync, no mode or times (``-p``), and ``inplace`` is what it does anyway.
    With ``verify`` they are hashed as they are written and checked against
    the server's hash: a device cannot be read back.

    Raises:
        UsageError: ``config.resume`` (there is no partial file to keep).
        LocalError: the device refused a write (LocalNoSpace: /dev/full), or
            the FIFO's reader went away.
    """
    if config.resume:
        raise UsageError(f"{file}: is {kind}: --resume keeps a partial file, and it has none")
    sink = DeviceSink(file)
    await sink.open()  # a FIFO: once something reads from it
    try:
        started = time.perf_counter()
        sftp = lease.channels[0]
        began, opened = time.monotonic(), take_setup(sftp)
        checks = plan_for(config.verify, sftp, remote_hash)
        digest = OrderedHash(checks.specs) if checks.specs else None
        reader = Stream(lease, remote, config, tally, known=known)
        async with contextlib.aclosing(reader.pieces()) as pieces:
            async for piece in pieces:
                if digest is not None:
                    digest.update(piece)
                await sink.write(piece)
                del piece  # written: not kept while the next one is awaited
        verified = await verify_copy(
            lease.channels[0],
            lease,
            remote,
            config,
            size=reader.delivered,
            local="",  # nothing to hash on disk: the streamed hash is the copy's
            streamed=digest,
            plan=checks,
            shown=remote,
            remote_hash=remote_hash,
        )
        stats = replace(reader.stats(started), verified=verified)
        if reader.pump is not None:
            phases = setup_phases(began, opened, reader.pump, sftp.init_rtt, [])
            stats = replace(stats, setup=phases)
        return stats
    finally:
        sink.close()


class _Sink:
    """Routes the local writer's reports to the pump of the current attempt."""

    pump: ReadPump | None = None

    def on_written(self, count: int, error: BaseException | None) -> None:
        assert self.pump is not None
        self.pump.on_written(count, error)


class _ToDisk:
    """A download's consumer of the read loop: pieces to the local writer, hashed in order."""

    def __init__(self, config: TransferConfig, *, digest: OrderedHash | None) -> None:
        self.config = config
        self.digest = digest
        self.on_tail: Callable[[], None] | None = None  # handed to each attempt's pump

    async def run(self, pump: ReadPump, writer: Writer | InlineWriter) -> None:
        """Until the plan is done; raises the pump's error once what arrived is written.

        Raises:
            Stalled: a channel owed a reply for ``stall_timeout`` (its session says so).
        """
        pump.on_tail, self.on_tail = self.on_tail, None
        if self.digest is not None:
            pump.budget.held = self.digest.buffered
        try:
            async for batch in pump.arrivals():
                self._submit(pump, writer, batch)
                # Not named while the next batch is awaited: its bytes leave the budget
                # once written, and 200 gets each kept their last batch past that.
                del batch
        finally:
            self.on_tail = pump.on_tail  # not called yet: the next attempt's pump calls it

    def _submit(self, pump: ReadPump, writer: Writer | InlineWriter, batch: list[Piece]) -> None:
        """``batch`` to the writer (and the hash), its bytes charged until written."""
        count = sum(length for _, _, length in batch)
        pump.unwritten += count
        digest = self.digest
        if digest is not None:
            for offset, chunks, _ in batch:
                digest.add(offset, b"".join(chunks))
            pump.budget.held = digest.buffered
        writer.submit([(offset, chunks) for offset, chunks, _ in batch], count)
