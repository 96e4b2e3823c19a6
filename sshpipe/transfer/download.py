"""Downloads and ``stream()``: keep READs in flight over the lease, write or yield in order.

Issuing and bookkeeping happen in the reply callbacks (synchronously, inside
the channel's ``data_received``), so a reply is turned into the next request
without a trip through the event loop. The awaiting coroutine only moves
payload to the disk or the reader and frees budget as it goes: "ask the core
-> await I/O -> feed the core".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace
from functools import partial

from .._config import TransferConfig
from .._errors import ConnectionBroken, ProtocolError, RemoteError, RemoteIsADirectory, SSHPipeError
from .._stats import TransferStats
from ..core import codec
from ..core.flight import FlightBudget, SharedBytes
from ..core.flowcontrol import FlowController
from ..core.readplan import Range, ReadPlan
from ..core.reorder import ReorderBuffer
from ..core.retry import RetryBudget
from ..durability.journal import DownloadResume
from ..local.dirfd import LocalFile
from ..local.target import FileAttrs, InlineWriter, LocalTarget, Writer, destination_of
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession, status_error
from .lanes import Grower, Handles, Lane, Pump, after_break, block_size_for, budget_for, channel_capacity, growing, initial_channels, make_controller, open_lanes
from .verify import OrderedHash, RemoteHash, check, digest_of

logger = logging.getLogger("sshpipe.download")

Chunks = list[bytes | memoryview]  # one reply's payload, as the slices it arrived in


class ReadPump(Pump):
    """Keeps READs in flight per the read plan and collects what they return."""

    def __init__(
        self,
        handles: Handles,
        budget: FlightBudget,
        controller: FlowController,
        plan: ReadPlan,
        *,
        requests_per_lane: int,
        adaptive: bool,
        want_lanes: asyncio.Event,
    ) -> None:
        self.plan = plan
        super().__init__(
            handles,
            budget,
            controller,
            requests_per_lane=requests_per_lane,
            adaptive=adaptive,
            want_lanes=want_lanes,
        )
        self.arrived: list[tuple[int, Chunks, int]] = []  # (offset, chunks, length)
        self.unwritten = 0  # bytes handed to the local writer, not yet written

    def __repr__(self) -> str:
        return f"<ReadPump {self.handles.path} {self.plan!r} {self.budget!r}>"

    @property
    def finished(self) -> bool:
        return self.plan.done or (self.error is not None and self.plan.outstanding == 0)

    def fill(self) -> None:
        plan, budget = self.plan, self.budget
        while self.error is None and budget.has_room(plan.block_size):
            lane = self._pick(plan.block_size)
            if lane is None:
                break
            rng = plan.next_range()
            if rng is None:
                break
            budget.send(rng.length)
            self._sent(lane, rng.length)
            reply = partial(self._on_reply, rng, lane, time.monotonic())
            try:
                lane.sftp.send_read(lane.handle, rng.offset, rng.length, reply)
            except BaseException as exc:  # the channel broke: count the request as answered
                reply(exc)

    def _on_reply(
        self, rng: Range, lane: Lane, sent: float, reply: codec.Reply | BaseException
    ) -> None:
        plan = self.plan
        ok = isinstance(reply, codec.Data) and 0 < reply.length <= rng.length
        self._sample(lane, rng.length, reply.length if ok else 0, sent)  # type: ignore[union-attr]
        if isinstance(reply, codec.Data) and 0 < reply.length <= rng.length:
            plan.on_data(rng, reply.length)
            self.budget.reply(rng.length, reply.length)
            self.arrived.append((rng.offset, reply.chunks, reply.length))
        elif isinstance(reply, codec.Status) and reply.code == codec.FX_EOF:
            plan.on_eof(rng)
            self.budget.reply(rng.length, 0)
        else:
            plan.on_retry(rng)  # not answered: the range stays owed
            self.budget.reply(rng.length, 0)
            self.fail(self._reply_error(rng, reply))
        self.fill()
        self.progress.set()

    def _reply_error(self, rng: Range, reply: codec.Reply | BaseException) -> BaseException:
        path = self.handles.path
        if isinstance(reply, BaseException):
            return reply
        if isinstance(reply, codec.Status):
            return status_error(reply, path, rng.offset)
        if isinstance(reply, codec.Data):
            return ProtocolError(
                f"{path}: server returned {reply.length} bytes for a read of {rng.length} "
                f"at offset {rng.offset}"
            )
        return ProtocolError(f"{path}: unexpected {type(reply).__name__} reply to a read")

    def take(self) -> list[tuple[int, Chunks, int]]:
        arrived, self.arrived = self.arrived, []
        return arrived

    def free(self, count: int) -> None:
        self.budget.free(count)
        self.fill()

    def on_written(self, count: int, error: BaseException | None) -> None:
        """The local writer finished ``count`` bytes (called on the loop)."""
        self.unwritten -= count
        if error is not None:
            self.fail(error)
        elif self.on_moved is not None:
            self.on_moved(count)
        self.free(count)
        self.progress.set()

    async def drain(self) -> None:
        """After an error: let outstanding replies come back (or the channel die)."""
        while self.plan.outstanding:
            await self.wait()

    def stats(self, started: float, size: int, lease: Lease) -> TransferStats:
        return TransferStats(
            **self.flow_stats(lease),  # type: ignore[arg-type]
            bytes=size,
            seconds=time.perf_counter() - started,
            requests=self.requests,
            short_reads_reissued=self.plan.short_reads,
            short_writes_reissued=0,
            peak_requests_in_flight=self.budget.peak_requests,
            peak_bytes_in_flight=self.budget.peak_bytes,
            channels=len(self.handles.used),
            block_size=self.plan.block_size,
            size_changed=self.plan.changed,
        )


async def _open_for_read(
    channels: list[SFTPSession], path: str, known: codec.Attrs | None
) -> tuple[Handles, codec.Attrs]:
    """Open ``path`` on the channels; its attributes from FSTAT unless ``known`` (a listing)."""
    first = channels[0]
    try:
        handles = await open_lanes(channels, path, codec.FXF_READ, codec.Attrs(), write=False)
    except RemoteError as exc:
        # Some servers refuse to open a directory with a bare FAILURE (asyncssh
        # does, OpenSSH opens it and fails the reads): say what it really is.
        if type(exc) is RemoteError and await _is_remote_dir(first, path):
            raise RemoteIsADirectory(path, "is a directory") from exc
        raise
    if known is not None and known.kind == "file":
        return handles, known  # the size is a hint either way: the probe past it finds EOF
    try:
        attrs = await first.fstat(handles.lanes[0].handle, path)
        if attrs.is_dir():
            raise RemoteIsADirectory(path, "is a directory")
    except BaseException:
        await handles.close(check=False)
        raise
    return handles, attrs


async def _is_remote_dir(sftp: SFTPSession, path: str) -> bool:
    try:
        return (await sftp.stat(path)).is_dir()
    except SSHPipeError:
        return False


async def _finish_reads(pump: ReadPump, grower: Grower, error: BaseException | None) -> None:
    """Stop issuing and growing, let replies in flight return, close every handle."""
    if error is not None:
        pump.fail(error)
    try:
        await grower.stop()
        if pump.plan.outstanding and pump.error is not None:
            # A server that stops answering must not hide the first error.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pump.drain(), timeout=30)
    finally:
        await pump.handles.close(check=pump.error is None)


@contextlib.asynccontextmanager
async def _reading(
    lease: Lease,
    remote: str,
    config: TransferConfig,
    shared: SharedBytes | None = None,
    known: codec.Attrs | None = None,
    plan: ReadPlan | None = None,
    plan_for: Callable[[codec.Attrs, int], ReadPlan] | None = None,
) -> AsyncIterator[tuple[ReadPump, Grower]]:
    """Open ``remote`` for a pipelined read, growing channels meanwhile; yield the pump.

    ``plan``: the plan of an earlier attempt (after a reconnect): only what it
    still owes is asked for. ``plan_for(attrs, block)`` makes the first plan
    (a resumed download's).
    """
    first_channels = initial_channels(lease)
    first = first_channels[0]
    block = block_size_for(config, first, write=False)
    capacity = channel_capacity(config, first, block, write=False)
    controller = make_controller(config, lease, capacity=capacity, size=None, block=block)
    async with growing(lease, controller) as grower:
        handles, attrs = await _open_for_read(first_channels, remote, known)
        controller.set_size(attrs.size)
        if plan is None and plan_for is not None:
            plan = plan_for(attrs, block)
        if plan is None:
            plan = ReadPlan(block_size=block, size_hint=attrs.size)
        pump = ReadPump(
            handles,
            budget_for(config, shared),
            controller,
            plan,
            requests_per_lane=config.requests,
            adaptive=lease.can_grow,
            want_lanes=grower.want,
        )
        grower.attach(pump)
        yield pump, grower


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
    on_progress: Callable[[int], None] | None = None,
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
    ``on_progress``: told each count of bytes written to the local file.
    ``remote_hash``: how --verify gets the server's hash (default: an exec).
    ``attrs``: the mode and times the file takes before its rename (``-p``).
    """
    into = remote if into_directory else None
    with destination_of(local, into) as file:  # a path: its directory is opened here
        started = time.perf_counter()
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
        # A resumed copy's kept bytes do not flow through this run: it is hashed from disk.
        hashing = config.verify != "none" and resuming is None
        attempt = _Attempt(config, digest=OrderedHash() if hashing else None)
        attempt.on_tail = on_tail
        try:
            budget = RetryBudget(attempts=config.retries)
            failures = reconnects = 0
            plan: ReadPlan | None = None
            while True:
                had = plan.received if plan is not None else 0
                try:
                    plan_for = resuming.plan_for if resuming is not None else None
                    async with _reading(lease, remote, config, shared, known, plan, plan_for) as (
                        pump,
                        grower,
                    ):
                        sink.pump = pump
                        pump.on_moved = on_progress
                        plan = pump.plan
                        await attempt.run(pump, grower, writer)
                    break
                except ConnectionBroken as exc:
                    progressed = plan is not None and plan.received > had
                    failures = await after_break(
                        lease, budget, failures, exc, progressed=progressed, path=remote
                    )
                    reconnects += 1
            await writer.close()
            written = True
            verified = "none"
            if config.verify != "none":
                verified = await check(
                    lease.channels[0],
                    remote,
                    level=config.verify,
                    size=plan.final_size,
                    digest=await digest_of(attempt.digest, target.temp, plan.final_size),
                    read_back=partial(read_back, lease, remote, config),
                    shown=remote,
                    remote_hash=remote_hash,
                )
            await target.commit(plan.final_size, in_thread=config.local_io_in_thread, attrs=attrs)
            committed = True
            stats = pump.stats(started, plan.final_size, lease)
            resumed = resuming.kept if resuming is not None else 0
            return replace(stats, verified=verified, reconnects=reconnects, resumed_bytes=resumed)
        finally:
            if not written:
                await writer.close(abandon=True)
            if resuming is not None:
                resuming.finish(committed)
            if not committed:
                target.discard()


class _Sink:
    """Routes the local writer's reports to the pump of the current attempt."""

    pump: ReadPump | None = None

    def on_written(self, count: int, error: BaseException | None) -> None:
        assert self.pump is not None
        self.pump.on_written(count, error)


class _Attempt:
    """One connection's worth of a download: READs in, pieces to the writer."""

    def __init__(self, config: TransferConfig, *, digest: OrderedHash | None) -> None:
        self.config = config
        self.digest = digest
        self.on_tail: Callable[[], None] | None = None

    async def run(self, pump: ReadPump, grower: Grower, writer: Writer | InlineWriter) -> None:
        """Until the plan is done; raises the pump's error once what arrived is written.

        Raises:
            Stalled: no reply for ``stall_timeout`` (its channels are closed first).
        """
        plan, digest = pump.plan, self.digest
        failure: BaseException | None = None
        try:
            if digest is not None:
                pump.budget.held = digest.buffered
            pump.fill()
            while True:
                if self.on_tail is not None and plan.all_asked:
                    self.on_tail()
                    self.on_tail = None
                batch = pump.take()
                if batch:
                    count = sum(length for _, _, length in batch)
                    pump.unwritten += count
                    if digest is not None:
                        for offset, chunks, _ in batch:
                            digest.add(offset, b"".join(chunks))
                        pump.budget.held = digest.buffered
                    writer.submit([(offset, chunks) for offset, chunks, _ in batch], count)
                elif pump.finished and not pump.unwritten:
                    break
                else:
                    await pump.wait_or_stall(self.config.stall_timeout)
            if pump.error is not None:
                raise pump.error
        except BaseException as exc:
            failure = exc
            raise
        finally:
            await _finish_reads(pump, grower, failure)


async def read_back(lease: Lease, remote: str, config: TransferConfig) -> str:
    """The SHA-256 of the remote file, read again over SFTP (verify="read-back")."""
    digest = hashlib.sha256()
    async with contextlib.aclosing(stream(lease, remote, config)) as pieces:
        async for piece in pieces:
            digest.update(piece)
    return digest.hexdigest()


async def stream(lease: Lease, remote: str, config: TransferConfig) -> AsyncGenerator[bytes, None]:
    """Yield the remote file's bytes in order; memory stays within the byte budget."""
    async with _reading(lease, remote, config) as (pump, grower):
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
            await _finish_reads(pump, grower, failure)
