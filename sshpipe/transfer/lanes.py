"""Lanes: the channels one transfer's requests are spread over, and how they grow.

A lane is an SFTP session (channel) with its own handle on the file and a cap
on the bytes it may hold in flight (its SSH window). Each request goes to the
lane with the most room. A flow controller (``_flowcontrol.py``) sees every
reply's latency and size; when it wants more channels than the transfer has, a
grower task asks the lease for more (on more connections if need be), opens
the file on them and adds the lanes while requests keep flowing.

``Pump`` holds what reads and writes share (lanes, budget, controller, error,
wake-ups); ``_download.py`` and ``_upload.py`` drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from .._config import FALLBACK_BLOCK_SIZE, MAX_AUTO_BLOCK_SIZE, TransferConfig
from .._errors import ConnectError, ConnectionBroken, SSHPipeError, Stalled
from ..core import codec
from ..core.flight import FlightBudget, SharedBytes
from ..core.flowcontrol import FlowController, FlowLimits
from ..core.retry import RetryBudget, failures_after
from ..core.untrusted import MIN_BLOCK_SIZE, printable
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession

logger = logging.getLogger("sshpipe.flow")

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
    # A server stating less than every server must take (filexfer-02 §3) is
    # not believed: short reads and writes are re-asked anyway.
    return max(MIN_BLOCK_SIZE, min(size, MAX_AUTO_BLOCK_SIZE))


@dataclass(slots=True, eq=False)
class Lane:
    """One channel's handle on the file and what is in flight on it."""

    sftp: SFTPSession
    handle: bytes
    cap: int  # payload bytes it may hold in flight (its SSH window)
    bytes: int = 0
    requests: int = 0


@dataclass(slots=True)
class Handles:
    """One open remote handle per lane, closed together."""

    path: str
    pflags: int
    attrs: codec.Attrs
    write: bool  # lanes are capped by the server's window (upload) or ours
    lanes: list[Lane] = field(default_factory=list)
    used: list[SFTPSession] = field(default_factory=list)  # every channel that held a lane

    @classmethod
    async def open(
        cls, sftp: SFTPSession, path: str, pflags: int, attrs: codec.Attrs, *, write: bool
    ) -> Handles:
        handles = cls(path, pflags, attrs, write)
        handles._append(sftp, await sftp.open(path, pflags, attrs))
        return handles

    async def add(self, sftp: SFTPSession) -> Lane:
        """Open the file on one more channel (never truncating or creating it again)."""
        handle = await sftp.open(
            self.path,
            self.pflags & ~(codec.FXF_TRUNC | codec.FXF_EXCL | codec.FXF_CREAT),
            self.attrs,
        )
        return self._append(sftp, handle)

    def _append(self, sftp: SFTPSession, handle: bytes) -> Lane:
        if self.write:
            # The server's window and half as much again: a WRITE stays charged
            # until its STATUS returns, after sshd has already re-granted its
            # window, so a bit more keeps the window full; much more would only
            # wait in our send buffer and inflate the RTT we measure.
            window = sftp.peer_window or UNKNOWN_WINDOW
            cap = window + window // 2
        else:
            cap = sftp.recv_window or UNKNOWN_WINDOW
        lane = Lane(sftp, handle, cap)
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
UNKNOWN_WINDOW = 2 * 1024 * 1024


class Pump:
    """Shared state of a pipelined transfer: lanes, budget, controller, error, wake-ups."""

    def __init__(
        self,
        handles: Handles,
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
        # Told each count of payload bytes done (written locally, or acknowledged
        # by the server): a tree's progress follows its big files as they go.
        self.on_moved: Callable[[int], None] | None = None
        self._sync_budget()

    def _pick(self, length: int) -> Lane | None:
        """The lane with the most room for ``length`` bytes, or None if none has it."""
        best: Lane | None = None
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

    def add_lane(self, lane: Lane) -> None:
        self._sync_budget()
        self.progress.set()

    def _sync_budget(self) -> None:
        self.budget.max_requests = self.requests_per_lane * max(1, len(self.handles.lanes))
        if self.adaptive:
            self.budget.max_bytes = self.controller.budget
            if self.controller.channels > len(self.handles.lanes):
                self.want_lanes.set()

    def _sample(self, lane: Lane, length: int, delivered: int, sent: float) -> None:
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
                    "%s: %r lanes=%d %r",
                    self.handles.path,
                    self.controller,
                    len(self.handles.lanes),
                    self.budget,
                )

    def _sent(self, lane: Lane, length: int) -> None:
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

    async def wait_or_stall(self, stall_after: float) -> None:
        """``wait()``, but no reply for ``stall_after`` seconds is a dropped connection.

        Raises:
            Stalled: after closing the lanes' channels, which answers every
                request in flight with an error at once.
        """
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
            # cancellation that lands as the wait ends (the cancel tests saw it).
            async with asyncio.timeout(stall_after):
                await self.wait()
        except TimeoutError:
            stalled = Stalled(f"{self.handles.path}: no reply for {stall_after:g} s")
            self.fail(stalled)
            for lane in self.handles.lanes:
                lane.sftp.abort(stalled)  # not close(): what was in flight is retried
            raise stalled from None

    def flow_stats(self, lease: Lease) -> dict[str, object]:
        ctl = self.controller
        first = lease.channels[0]
        return {
            "connections": lease.connections_of(self.handles.used),
            "rtt_initial": first.init_rtt,
            "rtt_min": ctl.min_rtt,
            "rtt_smoothed": ctl.srtt,
            "peak_delivery_rate": ctl.peak_rate,
            "peak_target_in_flight": ctl.peak_target,
            "receive_window": first.recv_window,
            "peer_window": first.peer_window,
            "flow_phase": ctl.phase if self.adaptive else "fixed",
        }


def channel_capacity(config: TransferConfig, sftp: SFTPSession, block: int, *, write: bool) -> int:
    """What the flow controller counts one channel to carry.

    A download: our receive window, and no more than its requests. An upload:
    1.25 of the server's window; each lane holds 1.5 (Handles._append), so
    GAIN's headroom goes into that extra half window, not into more channels:
    channels = bandwidth-delay product / window.
    """
    if write:
        window = sftp.peer_window or UNKNOWN_WINDOW
        return min(window + window // 4, config.requests * block)
    return min(sftp.recv_window or config.window, config.requests * block)


def make_controller(
    config: TransferConfig, lease: Lease, *, capacity: int, size: int | None, block: int
) -> FlowController:
    limits = FlowLimits(
        memory_budget=config.max_bytes_in_flight,
        min_in_flight=config.min_bytes_in_flight,
        channel_capacity=max(1, capacity),
        max_channels=lease.max_channels,
        size=size,
        block=block,
    )
    rtt0 = min((s.init_rtt for s in lease.channels if s.init_rtt > 0), default=0.0)
    return FlowController(limits, rtt0=rtt0, now=time.monotonic())


class Grower:
    """Opens more channels while the controller wants more, and makes them lease.

    It starts before the file is open (the controller's first guess comes from
    the RTT seen at set-up), so new channels' four round trips overlap the
    first channel's STAT/OPEN/FSTAT. Channels that arrive before the pump
    exists are parked; ``attach`` turns them into lease. Each channel becomes a
    lane as soon as it and its handle are open, not when the whole batch is (a
    new connection takes ten round trips). A channel or connection that cannot
    be opened only stops the growth: the transfer goes on with what it has.
    """

    def __init__(self, lease: Lease, controller: FlowController) -> None:
        self.lease = lease
        self.controller = controller
        self.want = asyncio.Event()
        self.want.set()  # the first guess may already want more than one channel
        self._pump: Pump | None = None
        self._parked: list[SFTPSession] = []  # open channels not (yet) wanted as lease
        self._opening = 0  # channels whose handle on the file is being opened
        self._group: asyncio.TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self._bug: Exception | None = None

    def start(self) -> None:
        if self.lease.can_grow:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Cancel the growth and wait for it: no lane is added after this returns."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        if self._bug is not None and self._pump is None:
            raise self._bug

    def attach(self, pump: Pump) -> None:
        """The file is open and the pump runs: parked channels become lease."""
        self._pump = pump
        self._use_parked()
        self.want.set()

    def _use_parked(self) -> None:
        """Make lease of parked channels, as many as the controller wants now.

        A download learns its size only once open; channels opened for the first
        guess then wait here until (if ever) the controller wants them.
        """
        pump = self._pump
        if pump is None:
            return
        room = max(0, self.controller.channels - len(pump.handles.lanes) - self._opening)
        taken, self._parked = self._parked[:room], self._parked[room:]
        for sftp in taken:
            self._spawn(sftp)

    def _arrived(self, sftp: SFTPSession) -> None:
        if self._pump is None:
            self._parked.append(sftp)
        else:
            self._spawn(sftp)

    def _spawn(self, sftp: SFTPSession) -> None:
        assert self._group is not None  # only called from _run or after it started
        self._opening += 1
        self._group.create_task(self._open_lane(sftp))

    async def _open_lane(self, sftp: SFTPSession) -> None:
        pump = self._pump
        assert pump is not None
        try:
            lane = await pump.handles.add(sftp)
        except SSHPipeError as exc:
            logger.debug("%s: no handle on a new channel: %s", printable(pump.handles.path), exc)
            return
        finally:
            self._opening -= 1
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
                    self._use_parked()
                    pump = self._pump
                    missing = self.controller.channels - len(self.lease.channels)
                    if not growing or missing <= 0 or (pump is not None and pump.error):
                        continue
                    added = await self.lease.add(missing, self._arrived)
                    growing = bool(added)  # none: the server (or our caps) allow no more
        except SSHPipeError:
            return
        except Exception as exc:  # a bug: stop the transfer rather than hide it
            self._bug = exc
            if self._pump is not None:
                self._pump.fail(exc)


@contextlib.asynccontextmanager
async def growing(lease: Lease, controller: FlowController) -> AsyncIterator[Grower]:
    """A grower running for the duration of the block (stopped, and awaited, on leaving).

    Not a TaskGroup around the block: that would wrap the transfer's own error
    in an ExceptionGroup.
    """
    grower = Grower(lease, controller)
    grower.start()
    try:
        yield grower
    finally:
        await grower.stop()


def budget_for(config: TransferConfig, shared: SharedBytes | None = None) -> FlightBudget:
    return FlightBudget(
        max_requests=config.requests, max_bytes=config.max_bytes_in_flight, shared=shared
    )


def initial_channels(lease: Lease) -> list[SFTPSession]:
    """The channels the file is opened on before any growth: all of them when fixed."""
    return list(lease.channels) if not lease.can_grow else lease.channels[:1]


async def open_lanes(
    channels: list[SFTPSession], path: str, pflags: int, attrs: codec.Attrs, *, write: bool
) -> Handles:
    """Open the file on the first channel alone (one error if the path is wrong), then the rest."""
    handles = await Handles.open(channels[0], path, pflags, attrs, write=write)
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


async def after_break(
    lease: Lease,
    budget: RetryBudget,
    failures: int,
    broken: ConnectionBroken,
    *,
    progressed: bool,
    path: str,
) -> int:
    """One more dropped or stalled connection: give up (re-raise) or reconnect.

    Returns:
        The reconnects in a row that moved nothing, counting this one.
    """
    failures = failures_after(failures, progressed=progressed)
    if budget.exhausted(failures):
        raise broken
    logger.info("%s: %s; reconnecting (%d in a row)", printable(path), broken, failures)
    return await reconnect(lease, budget, failures, stalled=isinstance(broken, Stalled))


async def reconnect(lease: Lease, budget: RetryBudget, failures: int, *, stalled: bool) -> int:
    """Wait (backoff with jitter) and get fresh channels; the failures in a row after it.

    Raises:
        ConnectionBroken: the budget ran out before a connection could be made.
        ConnectError: one that waiting cannot fix (a key or host key refused).
    """
    while True:
        await asyncio.sleep(budget.delay(failures, random.random()))
        try:
            await lease.recover(stalled=stalled)
        except (ConnectError, ConnectionBroken) as exc:  # not back yet (refused, reset...)
            if not exc.retryable:
                raise
            failures += 1
            if budget.exhausted(failures):
                raise ConnectionBroken(f"gave up reconnecting: {exc}") from exc
            continue
        return failures
