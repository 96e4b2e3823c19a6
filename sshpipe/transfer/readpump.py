"""The read pump: READs in flight per the read plan over the lease, replies collected.

Issuing and bookkeeping happen in the reply callbacks (synchronously, inside
the channel's ``data_received``), so a reply is turned into the next request
without a trip through the event loop. ``reading()`` opens the file for a
pipelined read; download, stream and the upload-resume read-back use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from functools import partial

from .._config import TransferConfig
from .._errors import ProtocolError, RemoteError, RemoteIsADirectory, SSHPipeError
from .._stats import TransferStats
from ..core import codec
from ..core.flight import FlightBudget, SharedBytes
from ..core.flowcontrol import FlowController
from ..core.readplan import Range, ReadPlan
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession, status_error
from .grower import Grower, channel_capacity, growing, make_controller
from .lanes import Handles, Lane, block_size_for, initial_channels, open_lanes
from .pump import Pump, budget_for

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


async def open_for_read(
    channels: list[SFTPSession], path: str, known: codec.Attrs | None
) -> tuple[Handles, codec.Attrs]:
    """Open ``path`` on the channels; its attributes from FSTAT unless ``known`` (a listing)."""
    first = channels[0]
    try:
        handles = await open_lanes(channels, path, codec.FXF_READ, codec.Attrs(), write=False)
    except RemoteError as exc:
        # Some servers refuse to open a directory with a bare FAILURE (asyncssh
        # does, OpenSSH opens it and fails the reads): say what it really is.
        if type(exc) is RemoteError and await is_remote_dir(first, path):
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


async def is_remote_dir(sftp: SFTPSession, path: str) -> bool:
    try:
        return (await sftp.stat(path)).is_dir()
    except SSHPipeError:
        return False


async def finish_reads(pump: ReadPump, grower: Grower, error: BaseException | None) -> None:
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
async def reading(
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
        handles, attrs = await open_for_read(first_channels, remote, known)
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
