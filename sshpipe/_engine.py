"""The asyncio driver: keep requests in flight, feed replies to the pure core.

Issuing and bookkeeping happen in the reply callbacks (synchronously, inside
the channel's ``data_received``), so a reply is turned into the next request
without a trip through the event loop. The awaiting coroutine only moves
payload between the pump and the disk or the reader, and frees budget as it
goes: "ask the core -> await I/O -> feed the core".

Requests are spread over lanes: an SFTP session (channel) with its own
handle on the file and a cap on the bytes it may hold in flight (its SSH
window). Each request goes to the lane with the most room. A flow controller
(``_flowcontrol.py``) sees every reply's latency and size; when it wants more
channels than the transfer has, a grower task asks the lease for more (on
more connections if need be), opens the file on them and adds the lanes while
requests keep flowing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from . import _codec as codec
from ._config import FALLBACK_BLOCK_SIZE, MAX_AUTO_BLOCK_SIZE, TransferConfig
from ._errors import ProtocolError, RemoteError, RemoteIsADirectory, SSHPipeError
from ._flight import FlightBudget
from ._flowcontrol import FlowController, FlowLimits
from ._localio import LocalSource, LocalTarget
from ._readplan import Range, ReadPlan
from ._reorder import ReorderBuffer
from ._sftp import SFTPSession, status_error
from ._stats import TransferStats

logger = logging.getLogger("sshpipe.flow")

Chunks = list[bytes | memoryview]
# Replies carry the request header too; keep a block plus its framing under the
# server's max packet length (OpenSSH's sftp-client.c subtracts 1 KiB as well).
_PACKET_OVERHEAD = 1024


def block_size_for(config: TransferConfig, sftp: SFTPSession, *, write: bool) -> int:
    """The READ/WRITE length: the configured one, else the server's limit, else 32 KiB."""
    if config.block_size is not None:
        return config.block_size
    limits = sftp.limits
    if limits is None:
        return FALLBACK_BLOCK_SIZE
    size = (limits.max_write_len if write else limits.max_read_len) or MAX_AUTO_BLOCK_SIZE
    if limits.max_packet_len:
        size = min(size, limits.max_packet_len - _PACKET_OVERHEAD)
    return max(1, min(size, MAX_AUTO_BLOCK_SIZE))


class LanePool(Protocol):
    """Where a transfer's channels come from (the client's lease)."""

    channels: list[SFTPSession]
    max_channels: int
    can_grow: bool

    def connections_of(self, channels: list[SFTPSession]) -> int: ...

    async def add(
        self, count: int, ready: Callable[[SFTPSession], None] | None = None
    ) -> list[SFTPSession]: ...


@dataclass(slots=True, eq=False)
class _Lane:
    """One channel's handle on the file and what is in flight on it."""

    sftp: SFTPSession
    handle: bytes
    cap: int  # payload bytes it may hold in flight (its SSH window)
    bytes: int = 0
    requests: int = 0


@dataclass(slots=True)
class _Handles:
    """One open remote handle per lane, closed together."""

    path: str
    pflags: int
    attrs: codec.Attrs
    write: bool  # lanes are capped by the server's window (upload) or ours
    lanes: list[_Lane] = field(default_factory=list)
    used: list[SFTPSession] = field(default_factory=list)  # every channel that held a lane

    @classmethod
    async def open(
        cls, sftp: SFTPSession, path: str, pflags: int, attrs: codec.Attrs, *, write: bool
    ) -> _Handles:
        handles = cls(path, pflags, attrs, write)
        handles._append(sftp, await sftp.open(path, pflags, attrs))
        return handles

    async def add(self, sftp: SFTPSession) -> _Lane:
        """Open the file on one more channel (never truncating or creating it again)."""
        handle = await sftp.open(
            self.path,
            self.pflags & ~(codec.FXF_TRUNC | codec.FXF_EXCL | codec.FXF_CREAT),
            self.attrs,
        )
        return self._append(sftp, handle)

    def _append(self, sftp: SFTPSession, handle: bytes) -> _Lane:
        if self.write:
            # The server's window and half as much again: a WRITE stays charged
            # until its STATUS returns, after sshd has already re-granted its
            # window, so a bit more keeps the window full; much more would only
            # wait in our send buffer and inflate the RTT we measure.
            window = sftp.peer_window or _UNKNOWN_WINDOW
            cap = window + window // 2
        else:
            cap = sftp.recv_window or _UNKNOWN_WINDOW
        lane = _Lane(sftp, handle, cap)
        self.lanes.append(lane)
        self.used.append(sftp)
        return lane

    async def close(self, *, check: bool = True) -> None:
        """CLOSE every handle; all CLOSE packets are sent before any reply is awaited."""
        lanes, self.lanes = self.lanes, []
        live = [lane for lane in lanes if lane.sftp.broken is None]
        results = await asyncio.gather(
            *(lane.sftp.close_handle(lane.handle, self.path) for lane in live),
            return_exceptions=True,
        )
        if check:
            for result in results:
                if isinstance(result, BaseException):
                    raise result


# A window asyncssh did not tell us: OpenSSH's 2 MiB, the common value.
_UNKNOWN_WINDOW = 2 * 1024 * 1024


class _Pump:
    """Shared state of a pipelined transfer: lanes, budget, controller, error, wake-ups."""

    def __init__(
        self,
        handles: _Handles,
        budget: FlightBudget,
        controller: FlowController,
        *,
        requests_per_lane: int,
        adaptive: bool,
        want_lanes: asyncio.Event,
    ) -> None:
        self.handles = handles
        self.budget = budget
        self.controller = controller
        self.requests_per_lane = requests_per_lane
        self.adaptive = adaptive  # the controller sets the byte budget and the lanes
        self.error: BaseException | None = None
        self.requests = 0
        self.on_wire = 0  # payload bytes of requests not yet answered
        self.progress = asyncio.Event()
        self.want_lanes = want_lanes  # set when the controller wants more lanes
        self._sync_budget()

    def _pick(self, length: int) -> _Lane | None:
        """The lane with the most room for ``length`` bytes, or None if none has it."""
        best: _Lane | None = None
        room = -1
        cap = self.requests_per_lane
        for lane in self.handles.lanes:
            free = lane.cap - lane.bytes
            if free > room and lane.requests < cap:
                best, room = lane, free
        if best is None or (room < length and best.bytes > 0):
            return None
        return best

    def fill(self) -> None:
        """Issue what the budget allows (the write pump's caller does it)."""
        self.progress.set()

    def add_lane(self, lane: _Lane) -> None:
        self._sync_budget()
        self.progress.set()

    def _sync_budget(self) -> None:
        self.budget.max_requests = self.requests_per_lane * max(1, len(self.handles.lanes))
        if self.adaptive:
            self.budget.max_bytes = self.controller.budget
            if self.controller.channels > len(self.handles.lanes):
                self.want_lanes.set()

    def _sample(self, lane: _Lane, length: int, delivered: int, sent: float) -> None:
        """A request of ``length`` bytes on ``lane`` was answered with ``delivered`` bytes."""
        in_flight = self.on_wire
        lane.bytes -= length
        lane.requests -= 1
        self.on_wire -= length
        now = time.monotonic()
        if self.controller.on_reply(now, rtt=now - sent, delivered=delivered, in_flight=in_flight):
            self._sync_budget()
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    "%s: %r lanes=%d", self.handles.path, self.controller, len(self.handles.lanes)
                )

    def _sent(self, lane: _Lane, length: int) -> None:
        lane.bytes += length
        lane.requests += 1
        self.on_wire += length
        self.requests += 1

    def fail(self, exc: BaseException) -> None:
        """Remember the first error; no request is issued after it."""
        if self.error is None:
            self.error = exc
        self.progress.set()

    async def wait(self) -> None:
        await self.progress.wait()
        self.progress.clear()

    def flow_stats(self, lanes: LanePool) -> dict[str, object]:
        ctl = self.controller
        first = lanes.channels[0]
        return {
            "connections": lanes.connections_of(self.handles.used),
            "rtt_initial": first.init_rtt,
            "rtt_min": ctl.min_rtt,
            "rtt_smoothed": ctl.srtt,
            "peak_delivery_rate": ctl.peak_rate,
            "peak_target_in_flight": ctl.peak_target,
            "receive_window": first.recv_window,
            "peer_window": first.peer_window,
            "flow_phase": ctl.phase if self.adaptive else "fixed",
        }


def _controller(
    config: TransferConfig, lanes: LanePool, *, capacity: int, size: int | None, block: int
) -> FlowController:
    limits = FlowLimits(
        memory_budget=config.max_bytes_in_flight,
        min_in_flight=config.min_bytes_in_flight,
        channel_capacity=max(1, capacity),
        max_channels=lanes.max_channels,
        size=size,
        block=block,
    )
    rtt0 = min((s.init_rtt for s in lanes.channels if s.init_rtt > 0), default=0.0)
    return FlowController(limits, rtt0=rtt0, now=time.monotonic())


class _Grower:
    """Opens more channels while the controller wants more, and makes them lanes.

    It starts before the file is open (the controller's first guess comes from
    the RTT seen at set-up), so new channels' four round trips overlap the
    first channel's STAT/OPEN/FSTAT. Channels that arrive before the pump
    exists are parked; ``attach`` turns them into lanes. Each channel becomes a
    lane as soon as it and its handle are open, not when the whole batch is (a
    new connection takes ten round trips). A channel or connection that cannot
    be opened only stops the growth: the transfer goes on with what it has.
    """

    def __init__(self, lanes: LanePool, controller: FlowController) -> None:
        self.lanes = lanes
        self.controller = controller
        self.want = asyncio.Event()
        self.want.set()  # the first guess may already want more than one channel
        self._pump: _Pump | None = None
        self._parked: list[SFTPSession] = []
        self._group: asyncio.TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self._bug: Exception | None = None

    def start(self) -> None:
        if self.lanes.can_grow:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the growth and wait for it: no lane is added after this returns."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        if self._bug is not None and self._pump is None:
            raise self._bug

    def attach(self, pump: _Pump) -> None:
        """The file is open and the pump runs: parked channels become lanes."""
        self._pump = pump
        room = max(0, self.controller.channels - len(pump.handles.lanes))
        parked, self._parked = self._parked[:room], self._parked[room:]
        for sftp in parked:
            self._spawn(sftp)
        self.want.set()

    def _arrived(self, sftp: SFTPSession) -> None:
        if self._pump is None:
            self._parked.append(sftp)
        else:
            self._spawn(sftp)

    def _spawn(self, sftp: SFTPSession) -> None:
        if self._group is not None:
            self._group.create_task(self._open_lane(sftp))

    async def _open_lane(self, sftp: SFTPSession) -> None:
        pump = self._pump
        assert pump is not None
        try:
            lane = await pump.handles.add(sftp)
        except SSHPipeError as exc:
            logger.debug("%s: no handle on a new channel: %s", pump.handles.path, exc)
            return
        pump.add_lane(lane)
        pump.fill()

    async def _run(self) -> None:
        growing = True
        try:
            async with asyncio.TaskGroup() as group:
                self._group = group
                while True:  # lives until stop(): attach() may still need the group
                    await self.want.wait()
                    self.want.clear()
                    pump = self._pump
                    missing = self.controller.channels - len(self.lanes.channels)
                    if not growing or missing <= 0 or (pump is not None and pump.error):
                        continue
                    added = await self.lanes.add(missing, self._arrived)
                    growing = bool(added)  # none: the server (or our caps) allow no more
        except SSHPipeError:
            return
        except Exception as exc:  # a bug: stop the transfer rather than hide it
            self._bug = exc
            if self._pump is not None:
                self._pump.fail(exc)


@contextlib.asynccontextmanager
async def _growing(lanes: LanePool, controller: FlowController) -> AsyncIterator[_Grower]:
    """A grower running for the duration of the block (stopped, and awaited, on leaving).

    Not a TaskGroup around the block: that would wrap the transfer's own error
    in an ExceptionGroup.
    """
    grower = _Grower(lanes, controller)
    grower.start()
    try:
        yield grower
    finally:
        await grower.stop()


class ReadPump(_Pump):
    """Keeps READs in flight per the read plan and collects what they return."""

    def __init__(
        self,
        handles: _Handles,
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
        self, rng: Range, lane: _Lane, sent: float, reply: codec.Reply | BaseException
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
        self.free(count)
        self.progress.set()

    async def drain(self) -> None:
        """After an error: let outstanding replies come back (or the channel die)."""
        while self.plan.outstanding:
            await self.wait()

    def stats(self, started: float, size: int, lanes: LanePool) -> TransferStats:
        return TransferStats(
            **self.flow_stats(lanes),  # type: ignore[arg-type]
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


def _budget(config: TransferConfig) -> FlightBudget:
    return FlightBudget(max_requests=config.requests, max_bytes=config.max_bytes_in_flight)


def _first_channels(lanes: LanePool) -> list[SFTPSession]:
    """The channels the file is opened on before any growth: all of them when fixed."""
    return list(lanes.channels) if not lanes.can_grow else lanes.channels[:1]


async def _open_lanes(
    channels: list[SFTPSession], path: str, pflags: int, attrs: codec.Attrs, *, write: bool
) -> _Handles:
    """Open the file on the first channel alone (one error if the path is wrong), then the rest."""
    handles = await _Handles.open(channels[0], path, pflags, attrs, write=write)
    try:
        rest = await asyncio.gather(
            *(handles.add(sftp) for sftp in channels[1:]), return_exceptions=True
        )
        for result in rest:
            if isinstance(result, BaseException):
                raise result
    except BaseException:
        await handles.close(check=False)
        raise
    return handles


async def _open_for_read(channels: list[SFTPSession], path: str) -> tuple[_Handles, codec.Attrs]:
    first = channels[0]
    try:
        handles = await _open_lanes(channels, path, codec.FXF_READ, codec.Attrs(), write=False)
    except RemoteError as exc:
        # Some servers refuse to open a directory with a bare FAILURE (asyncssh
        # does, OpenSSH opens it and fails the reads): say what it really is.
        if type(exc) is RemoteError and await _is_remote_dir(first, path):
            raise RemoteIsADirectory(path, "is a directory") from exc
        raise
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


async def _finish_reads(pump: ReadPump, grower: _Grower, error: BaseException | None) -> None:
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
    lanes: LanePool, remote: str, config: TransferConfig
) -> AsyncIterator[tuple[ReadPump, _Grower]]:
    """Open ``remote`` for a pipelined read, growing channels meanwhile; yield the pump."""
    first_channels = _first_channels(lanes)
    first = first_channels[0]
    block = block_size_for(config, first, write=False)
    # A download lane holds what our window allows, and no more than its requests.
    capacity = min(first.recv_window or config.window, config.requests * block)
    controller = _controller(config, lanes, capacity=capacity, size=None, block=block)
    async with _growing(lanes, controller) as grower:
        handles, attrs = await _open_for_read(first_channels, remote)
        controller.set_size(attrs.size)
        plan = ReadPlan(block_size=block, size_hint=attrs.size)
        pump = ReadPump(
            handles,
            _budget(config),
            controller,
            plan,
            requests_per_lane=config.requests,
            adaptive=lanes.can_grow,
            want_lanes=grower.want,
        )
        grower.attach(pump)
        yield pump, grower


async def download(
    lanes: LanePool, remote: str, local: str, config: TransferConfig
) -> TransferStats:
    """Copy ``remote`` to ``local`` through a temp file renamed into place at the end."""
    started = time.perf_counter()
    if os.path.isdir(local):  # scp: copying into a directory keeps the remote name
        local = os.path.join(local, posixpath.basename(remote.rstrip("/")) or "download")
    target = LocalTarget(local)
    target.open()
    committed = False
    try:
        async with _reading(lanes, remote, config) as (pump, grower):
            plan = pump.plan
            writer = target.start_writer(pump.on_written, in_thread=config.local_io_in_thread)
            failure: BaseException | None = None
            try:
                pump.fill()
                while True:
                    batch = pump.take()
                    if batch:
                        count = sum(length for _, _, length in batch)
                        pump.unwritten += count
                        writer.submit([(offset, chunks) for offset, chunks, _ in batch], count)
                    elif pump.finished and not pump.unwritten:
                        break
                    else:
                        await pump.wait()
                if pump.error is not None:
                    raise pump.error
            except BaseException as exc:
                failure = exc
                raise
            finally:
                try:
                    await writer.close(abandon=failure is not None)
                finally:
                    await _finish_reads(pump, grower, failure)
        await target.commit(plan.final_size)
        committed = True
        return pump.stats(started, plan.final_size, lanes)
    finally:
        if not committed:
            target.discard()


async def stream(
    lanes: LanePool, remote: str, config: TransferConfig
) -> AsyncGenerator[bytes, None]:
    """Yield the remote file's bytes in order; memory stays within the byte budget."""
    async with _reading(lanes, remote, config) as (pump, grower):
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


class WritePump(_Pump):
    """Keeps WRITEs in flight; each is charged to the budget until the server acks it."""

    def __init__(
        self,
        handles: _Handles,
        budget: FlightBudget,
        controller: FlowController,
        block_size: int,
        *,
        requests_per_lane: int,
        adaptive: bool,
        want_lanes: asyncio.Event,
    ) -> None:
        super().__init__(
            handles,
            budget,
            controller,
            requests_per_lane=requests_per_lane,
            adaptive=adaptive,
            want_lanes=want_lanes,
        )
        self.block_size = block_size
        self.outstanding = 0
        self.sent_bytes = 0

    def __repr__(self) -> str:
        return f"<WritePump {self.handles.path} outstanding={self.outstanding} {self.budget!r}>"

    def room(self) -> int:
        """How many full blocks could be sent right now (by the budget and the lanes)."""
        budget = self.budget
        if self.error is not None:
            return 0
        block = self.block_size
        by_requests = budget.max_requests - budget.requests
        by_bytes = (budget.max_bytes - budget.bytes) // block
        if budget.bytes == 0:
            by_bytes = max(by_bytes, 1)
        by_lanes = 0
        for lane in self.handles.lanes:
            blocks = (lane.cap - lane.bytes) // block
            if lane.bytes == 0:
                blocks = max(blocks, 1)  # an empty lane always takes one block
            by_lanes += max(0, min(blocks, self.requests_per_lane - lane.requests))
        return max(0, min(by_requests, by_bytes, by_lanes))

    def send(self, offset: int, data: bytes) -> None:
        lane = self._pick(len(data))
        if lane is None:  # room() said there was: a lane filled since
            lane = min(self.handles.lanes, key=lambda candidate: candidate.bytes)
        self.budget.send(len(data))
        self._sent(lane, len(data))
        self.outstanding += 1
        self.sent_bytes = max(self.sent_bytes, offset + len(data))
        reply = partial(self._on_reply, offset, len(data), lane, time.monotonic())
        try:
            lane.sftp.send_write(lane.handle, offset, data, reply)
        except BaseException as exc:
            reply(exc)

    def _on_reply(
        self,
        offset: int,
        length: int,
        lane: _Lane,
        sent: float,
        reply: codec.Reply | BaseException,
    ) -> None:
        self.outstanding -= 1
        self.budget.reply(length, 0)
        ok = isinstance(reply, codec.Status) and reply.code == codec.FX_OK
        self._sample(lane, length, length if ok else 0, sent)
        if ok:
            pass
        elif isinstance(reply, codec.Status):
            self.fail(status_error(reply, self.handles.path, offset))
        elif isinstance(reply, BaseException):
            self.fail(reply)
        else:
            self.fail(
                ProtocolError(
                    f"{self.handles.path}: unexpected {type(reply).__name__} reply to a write"
                )
            )
        self.progress.set()

    async def settle(self) -> None:
        while self.outstanding:
            await self.wait()

    async def drain(self) -> None:
        """Wait for every write to be acknowledged; raise the first failure."""
        await self.settle()
        if self.error is not None:
            raise self.error

    def stats(self, started: float, lanes: LanePool) -> TransferStats:
        return TransferStats(
            **self.flow_stats(lanes),  # type: ignore[arg-type]
            bytes=self.sent_bytes,
            seconds=time.perf_counter() - started,
            requests=self.requests,
            short_reads_reissued=0,
            short_writes_reissued=0,
            peak_requests_in_flight=self.budget.peak_requests,
            peak_bytes_in_flight=self.budget.peak_bytes,
            channels=len(self.handles.used),
            block_size=self.block_size,
        )


async def _upload(
    lanes: LanePool,
    remote: str,
    config: TransferConfig,
    mode: int,
    blocks: _BlockSource,
    name: str | None,
    size: int | None,
) -> TransferStats:
    """Write ``blocks`` to a temp name beside ``remote``, then rename it into place."""
    started = time.perf_counter()
    first_channels = _first_channels(lanes)
    sftp = first_channels[0]
    block = block_size_for(config, sftp, write=True)
    # Each lane holds 1.5 server windows (_Handles._append); counting it as
    # 1.25 puts GAIN's headroom in that extra half window, not in more
    # channels: channels = bandwidth-delay product / window.
    window = sftp.peer_window or _UNKNOWN_WINDOW
    capacity = min(window + window // 4, config.requests * block)
    controller = _controller(config, lanes, capacity=capacity, size=size, block=block)
    committed = False
    temp: str | None = None
    try:
        async with _growing(lanes, controller) as grower:
            remote = await _resolve_remote_target(sftp, remote, name)
            temp = _remote_temp_name(remote)
            pflags = codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_TRUNC | codec.FXF_EXCL
            # Inside the try: a cancel while the OPEN is in flight must still remove
            # the temp file the server may have created (the name is ours alone: EXCL).
            try:
                handles = await _open_lanes(
                    first_channels, temp, pflags, codec.Attrs(permissions=mode), write=True
                )
            except RemoteError as exc:
                # Name the path the user asked for, not our temporary one.
                raise type(exc)(remote, exc.reason, status=exc.status) from exc
            pump = WritePump(
                handles,
                _budget(config),
                controller,
                block,
                requests_per_lane=config.requests,
                adaptive=lanes.can_grow,
                want_lanes=grower.want,
            )
            grower.attach(pump)
            try:
                offset = 0
                while pump.error is None:
                    room = pump.room()
                    if room == 0:
                        await pump.wait()
                        continue
                    new = await blocks.next(offset, pump.block_size, room)
                    if not new:
                        break
                    for data in new:
                        pump.send(offset, data)
                        offset += len(data)
                await pump.drain()
            except BaseException as exc:
                pump.fail(exc)
                # Let the writes in flight be answered before the handle is closed.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(pump.settle(), timeout=30)
                raise
            finally:
                await grower.stop()
                await handles.close(check=pump.error is None)
            await _rename_into_place(sftp, temp, remote)
            committed = True
            return pump.stats(started, lanes)
    finally:
        if not committed and temp is not None:
            await _remove_quietly(sftp, temp)


class _BlockSource:
    async def next(self, offset: int, block: int, count: int) -> list[bytes]:
        raise NotImplementedError


class _FileBlocks(_BlockSource):
    def __init__(self, source: LocalSource, *, in_thread: bool) -> None:
        self.source = source
        self.in_thread = in_thread

    async def next(self, offset: int, block: int, count: int) -> list[bytes]:
        return await self.source.read_blocks(offset, block, count, in_thread=self.in_thread)


class _StreamBlocks(_BlockSource):
    """Re-cuts an async iterable of bytes of any sizes into full blocks."""

    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._iter = aiter(chunks)
        self._pending = bytearray()
        self._ended = False

    async def next(self, offset: int, block: int, count: int) -> list[bytes]:
        while not self._ended and len(self._pending) < block:
            try:
                chunk = await anext(self._iter)
            except StopAsyncIteration:
                self._ended = True
                break
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise TypeError(f"put_stream needs bytes, got {type(chunk).__name__}")
            self._pending += chunk
        cut = min(len(self._pending), block)
        if cut == 0:
            return []
        with memoryview(self._pending) as view:  # one copy, not slice-then-bytes
            data = bytes(view[:cut])
        del self._pending[:cut]
        return [data]


async def upload(lanes: LanePool, local: str, remote: str, config: TransferConfig) -> TransferStats:
    source = LocalSource(local)
    source.open()
    try:
        return await _upload(
            lanes,
            remote,
            config,
            source.mode,
            _FileBlocks(source, in_thread=config.local_io_in_thread),
            source.path.name,
            source.size,
        )
    finally:
        source.close()


async def upload_stream(
    lanes: LanePool,
    chunks: AsyncIterable[bytes],
    remote: str,
    config: TransferConfig,
    mode: int = 0o644,
) -> TransferStats:
    return await _upload(lanes, remote, config, mode, _StreamBlocks(chunks), None, None)


def _remote_temp_name(remote: str) -> str:
    head, sep, name = remote.rpartition("/")
    return f"{head}{sep}.{name}.sshpipe-{secrets.token_hex(3)}.partial"


async def _resolve_remote_target(sftp: SFTPSession, remote: str, name: str | None) -> str:
    """Where an upload lands: ``remote`` itself, or ``remote/name`` if it is a directory (scp)."""
    try:
        attrs = await sftp.stat(remote)
    except SSHPipeError:
        return remote  # missing (the usual case) or unreadable: the open will say why
    if not attrs.is_dir():
        return remote
    if name is None:
        raise RemoteIsADirectory(remote, "is a directory")
    return f"{remote.rstrip('/')}/{name}"


async def _rename_into_place(sftp: SFTPSession, temp: str, remote: str) -> None:
    if "posix-rename@openssh.com" in sftp.extensions:
        reply = await sftp.call(
            lambda rid: codec.encode_posix_rename(rid, temp.encode(), remote.encode())
        )
        sftp.check_status(reply, remote)
        return
    # Plain SFTP v3 RENAME fails when the target exists (filexfer-02 §6.5), so
    # the old file is removed first: a crash in between leaves only the temp.
    with contextlib.suppress(SSHPipeError):
        await sftp.remove(remote)
    reply = await sftp.call(lambda rid: codec.encode_rename(rid, temp.encode(), remote.encode()))
    sftp.check_status(reply, remote)


async def _remove_quietly(sftp: SFTPSession, path: str) -> None:
    if sftp.broken is None:
        with contextlib.suppress(SSHPipeError):
            await sftp.remove(path)
