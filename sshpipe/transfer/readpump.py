"""The read pump: READs in flight per the read plan over the lease, replies collected.

Issuing and bookkeeping happen in the reply callbacks (synchronously, inside
the channel's ``data_received``), so a reply is turned into the next request
without a trip through the event loop. ``reading()`` opens the file for a
pipelined read and ``ReadPump.arrivals`` is the one read loop: download,
stream and the upload-resume read-back differ only in what they do with each
batch (write it to disk, yield it in order, hash it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from functools import partial

from ..core import codec
from ..core.config import TransferConfig
from ..core.errors import RemoteError, RemoteIsADirectory, RemoteOpenFailed, SSHPipeError
from ..core.flight import SharedBytes
from ..core.readplan import EOF, Range, ReadPlan, classify_read
from ..core.sizing import Sizing
from ..core.stats import TransferStats
from ..core.status import status_error
from ..transport.pool import Lease
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession
from .blockprobe import needs_probe, probe_read
from .lanes import Handles, Lane, initial_channels, open_lanes, sizing_for
from .pump import Parts, Pump
from .pumpsetup import pumping

logger = logging.getLogger("sshpipe.download")

Chunks = list[bytes | memoryview]  # one reply's payload, as the slices it arrived in
Piece = tuple[int, Chunks, int]  # (offset, chunks, length)


class ReadPump(Pump):
    """Keeps READs in flight per the read plan and collects what they return."""

    def __init__(self, parts: Parts, plan: ReadPlan) -> None:
        self.plan = plan
        super().__init__(parts)
        self.arrived: list[Piece] = []
        # Bytes handed to the consumer (the local writer), not yet done with.
        self.unwritten = 0
        # Called once every byte has been asked for (a tree starts its next file).
        self.on_tail: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"<ReadPump {self.handles.path} {self.plan!r} {self.budget!r}>"

    @property
    def finished(self) -> bool:
        return self.plan.done or (self.error is not None and self.plan.outstanding == 0)

    def _starved(self) -> bool:
        """Nothing in flight, nothing arrived or being written, yet the plan owes bytes.

        The bytes still charged then wait for a range only a new request can
        bring: a stream's pieces held behind a short read's hole (or a
        verifying download's, waiting to be hashed in order) when the flow
        controller has since cut the budget below them. The budget would
        never free; one request goes past it, the hole first (``next_range``).
        """
        if self.abandoned or self.unwritten or self.arrived or self.plan.done:
            return False  # the consumer, the writer or a reply will free what is charged
        budget = self.budget
        # Nothing charged at all: not starved but waiting its turn for the shared cap.
        return budget.requests == 0 and (budget.bytes > 0 or budget.held > 0)

    def fill(self) -> None:
        plan, budget, pacer = self.plan, self.budget, self.pacer
        if self.switch is not None and self.switch.holds(self):
            budget.unreserve()  # a grant meanwhile goes back: the route's resync asks again
            return  # Compression auto: its route is being chosen
        length = self.request_length(plan.block_size)
        while self.error is None and (budget.has_room(length) or self._starved()):
            lane = self._pick(length)
            if lane is None:
                break
            rng = plan.next_range(length)
            if rng is None:
                break
            if pacer is not None and not pacer.grant(rng.length):
                plan.put_back(rng)  # asked again first, when its tokens are there
                self._wait_for_tokens(rng.length)
                break
            budget.send(rng.length)
            self._sent(lane, rng.length)
            reply = partial(self._on_reply, rng, lane, time.monotonic())
            try:
                lane.sftp.send_read(lane.handle, rng.offset, rng.length, reply)
            except BaseException as exc:  # the channel broke: count the request as answered
                reply(exc)
        budget.unreserve()  # a block the shared cap granted and nothing took (all asked)

    def _on_reply(
        self, rng: Range, lane: Lane, sent: float, reply: codec.Reply | BaseException
    ) -> None:
        if self.abandoned:
            return  # cancelled: nobody wants it (its channel is settling)
        plan = self.plan
        outcome = classify_read(self.handles.path, rng, reply)
        data = outcome.length if isinstance(outcome, codec.Data) else 0
        self._sample(lane, rng.length, data, sent)
        if isinstance(outcome, codec.Data):
            plan.on_data(rng, outcome.length)
            self.budget.reply(rng.length, outcome.length)
            self.arrived.append((rng.offset, outcome.chunks, outcome.length))
            if self.switch is not None and self.switch.sampling:
                self.switch.feed(outcome.chunks)
        elif outcome is EOF:
            plan.on_eof(rng)
            self.budget.reply(rng.length, 0)
        else:
            plan.on_retry(rng)  # not answered: the range stays owed
            self.budget.reply(rng.length, 0)
            if isinstance(outcome, codec.Status):
                outcome = status_error(outcome, self.handles.path, rng.offset)
            self.fail(outcome)
        self.fill()
        self.progress.set()

    def take(self) -> list[Piece]:
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

    def arrivals(self) -> Arrivals:
        """The read loop: batches of pieces as they arrive, until the plan is done."""
        return Arrivals(self)

    def stats(self, started: float, size: int, lease: Lease) -> TransferStats:
        return TransferStats(
            **self.flow_stats(lease),
            bytes=size,
            seconds=time.perf_counter() - started,
            requests=self.requests,
            short_reads_reissued=self.plan.short_reads,
            short_writes_reissued=0,
            peak_requests_in_flight=self.budget.peak_requests,
            peak_bytes_in_flight=self.budget.peak_bytes,
            channels=len(self.carriers()),
            block_size=self.plan.block_size,
            size_changed=self.plan.changed,
        )


class Arrivals:
    """The one read loop: READs issued, arrived pieces handed out a batch at a time.

    The consumer frees each batch's bytes from the budget when it is done with
    them (at once, or when the local writer reports them written:
    ``unwritten``). The loop ends when the plan is done and the consumer holds
    nothing; then the pump's error, if any, is raised.

    Raises:
        Stalled: a channel owed a reply for ``stall_timeout`` seconds (its
            session's watchdog fails every request in flight on it at once).
    """

    def __init__(self, pump: ReadPump) -> None:
        self.pump = pump
        self._started = False

    def __aiter__(self) -> Arrivals:
        return self

    async def __anext__(self) -> list[Piece]:
        pump = self.pump
        if not self._started:
            self._started = True
            pump.fill()
        while True:
            if pump.on_tail is not None and pump.plan.all_asked:
                pump.on_tail()
                pump.on_tail = None
            batch = pump.take()
            if batch:
                return batch
            if pump.finished and not pump.unwritten:
                if pump.error is not None:
                    raise pump.error
                raise StopAsyncIteration
            await pump.wait()


async def open_for_read(
    channels: list[SFTPSession], path: str, known: codec.Attrs | None
) -> tuple[Handles, codec.Attrs]:
    """Open ``path`` on the channels, with its attributes unless ``known`` (a listing).

    The attributes come from a STAT sent with the OPEN: both answers take one
    round trip, where an FSTAT of the handle would take a second. (sftp's own
    get STATs first, too.) The size is a hint either way: the read plan's probe
    past it finds the real end. On a read-once server (``Quirks.read_once``) a
    STAT by name may consume the file: they come from an FSTAT of the handle,
    and the file is opened on the first channel alone.
    """
    first = channels[0]
    once = first.caps.quirks.read_once
    if once:
        channels = channels[:1]
    stat: asyncio.Future[codec.Reply] | None = None
    if (known is None or known.kind != "file") and not once:
        stat = first.stat_request(path)
        stat.add_done_callback(quiet)
    try:
        handles = await open_lanes(channels, path, codec.FXF_READ, codec.Attrs(), write=False)
    except RemoteError as exc:
        # Some servers refuse to open a directory with a bare FAILURE (asyncssh
        # does, OpenSSH opens it and fails the reads): say what it really is.
        # Not asked of a read-once server: a STAT could consume the file.
        if (
            type(exc) in (RemoteError, RemoteOpenFailed)
            and not once
            and await _is_dir(stat, first, path)
        ):
            raise RemoteIsADirectory(path, "is a directory") from exc
        raise
    if known is not None and known.kind == "file":
        return handles, known
    try:
        if stat is None:
            attrs = await first.fstat(handles.lanes[0].handle, path)
        else:
            attrs = await _attrs(stat, first, handles.lanes[0].handle, path)
        if attrs.is_dir():
            raise RemoteIsADirectory(path, "is a directory")
    except BaseException as exc:
        await handles.close_after(exc)
        raise
    return handles, attrs


async def _attrs(
    stat: asyncio.Future[codec.Reply], sftp: SFTPSession, handle: bytes, path: str
) -> codec.Attrs:
    reply = await asyncio.shield(stat)
    if isinstance(reply, codec.AttrsReply):
        return reply.attrs
    # The path changed between STAT and OPEN (or the server cannot STAT it):
    # the handle is what counts.
    return await sftp.fstat(handle, path)


async def _is_dir(stat: asyncio.Future[codec.Reply] | None, sftp: SFTPSession, path: str) -> bool:
    if stat is None:
        return await is_remote_dir(sftp, path)
    try:
        reply = await asyncio.shield(stat)
    except SSHPipeError:
        return False
    return isinstance(reply, codec.AttrsReply) and reply.attrs.is_dir()


async def is_remote_dir(sftp: SFTPSession, path: str) -> bool:
    try:
        return (await sftp.stat(path)).is_dir()
    except SSHPipeError:
        return False


@contextlib.asynccontextmanager
async def reading(
    lease: Lease,
    remote: str,
    config: TransferConfig,
    sizing: Sizing | None = None,
    *,
    shared: SharedBytes | None = None,
    known: codec.Attrs | None = None,
    plan: ReadPlan | None = None,
    plan_for: Callable[[codec.Attrs, int], ReadPlan] | None = None,
) -> AsyncIterator[ReadPump]:
    """Open ``remote`` for a pipelined read, then grow channels as it flows; yield the pump.

    The file is opened first: its OPEN and STAT go out with (or right after)
    the server's limits request, and all three answers take one round trip;
    ``sizing`` (None: from those limits) then sets up the pump. On leaving,
    growth stops, replies in flight come back (after an error) and every
    handle is closed. ``plan``: the plan of an earlier attempt (after a
    reconnect): only what it still owes is asked for. ``plan_for(attrs,
    block)`` makes the first plan (a resumed download's).
    """
    channels = initial_channels(lease)
    once = channels[0].caps.quirks.read_once  # one handle: no second OPEN, no growth
    handles, attrs = await open_for_read(channels, remote, known)
    started = False
    try:
        if sizing is None:
            if needs_probe(config, channels[0], write=False, size=attrs.size or 0):
                await probe_read(channels[0], handles.lanes[0].handle, remote)
            sizing = await sizing_for(config, channels[0], write=False)
        async with pumping(lease, config, sizing, shared=shared, one_lane=once) as setup:
            setup.controller.set_size(attrs.size)
            if plan is None and plan_for is not None:
                plan = plan_for(attrs, sizing.block)
            if plan is None:
                plan = ReadPlan(block_size=sizing.block, size_hint=attrs.size)
            pump = setup.start(ReadPump(setup.parts(handles), plan))
            started = True  # the set-up closes the handles from here on
            yield pump
    except BaseException as exc:
        if not started:
            await handles.close_after(exc)
        raise
