"""The pump: what reads and writes share while requests are in flight over the lanes.

``Pump`` holds the lanes, the flight budget, the flow controller, the first
error and the wake-ups; ``readpump.py`` and ``writepump.py`` drive it. Every
reply is sampled into the controller, which sets the byte budget and says when
more lanes are wanted (``grower.py`` adds them).

``pumping()`` is the one set-up both use: controller, grower, the file opened
on the first channels, the pump attached; and on leaving, growth stopped,
replies in flight let back after an error, every handle closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypedDict, TypeVar

from ..core.config import TransferConfig
from ..core.flight import FlightBudget, SharedBytes
from ..core.flowcontrol import FlowController
from ..core.sizing import Sizing
from ..core.stats import FlowPhase, SetupPhase
from ..core.timeline import Timeline, describe, in_round_trips
from ..transport.pacing import Pacer
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession
from .compressauto import Sampler, switching
from .compressswitch import Switch
from .grower import Grower, growing, make_controller
from .lanes import Handles, Lane, cancelled, initial_channels

logger = logging.getLogger("sshpipe.flow")

# Seconds the replies in flight get, after an error, before the handles are
# closed anyway: a server that stops answering must not hide the first error.
SETTLE_AFTER_ERROR = 30.0

P = TypeVar("P", bound="Pump")


@dataclass(frozen=True, slots=True)
class Parts:
    """What every pump is built from (``Setup.parts``)."""

    handles: Handles
    budget: FlightBudget
    controller: FlowController
    sizing: Sizing
    adaptive: bool  # the controller sets the byte budget and the lanes
    want_lanes: asyncio.Event  # the grower's: set when the controller wants more
    pacer: Pacer | None = None  # the rate limit of the transfer call (the lease's)


class Pump:
    """Shared state of a pipelined transfer: lanes, budget, controller, error, wake-ups."""

    def __init__(self, parts: Parts) -> None:
        self.handles = parts.handles
        self.budget = parts.budget
        self.controller = parts.controller
        self.sizing = parts.sizing
        self.adaptive = parts.adaptive  # the controller sets the byte budget and the lanes
        self.error: BaseException | None = None
        # Cancelled: replies still in flight are discarded as they come (``abandon``).
        self.abandoned = False
        self.requests = 0
        self.unanswered = 0  # requests sent and not yet answered
        self.on_wire = 0  # payload bytes of requests not yet answered
        self.progress = asyncio.Event()
        self.want_lanes = parts.want_lanes  # set when the controller wants more lanes
        self.pacer = parts.pacer
        # The wake-up the pacer set while its tokens accrue: one at a time.
        self._paced: asyncio.TimerHandle | None = None
        # Told each count of payload bytes done (written locally, or acknowledged
        # by the server): a tree's progress follows its big files as they go.
        self.on_moved: Callable[[int], None] | None = None
        self.switch: Switch | None = None  # Compression auto's (``compressswitch``)
        # When the file was open and the pump started, and when its first
        # request was answered (time.monotonic): the set-up's last phases.
        self.opened_at = time.monotonic()
        self.first_reply_at = 0.0
        # Granted a block by the shared cap after waiting with nothing charged:
        # send it (the read pump at once; the write pump's sender wakes up).
        self.budget.on_room = self.fill
        self._sync_budget()

    def _pick(self, length: int) -> Lane | None:
        """The lane with the most room for ``length`` bytes, or None if none has it.

        A lane with no cap (Compression auto's parked or draining lanes) takes
        nothing, even empty: one did take the 129th request of a channel's 128.
        """
        best: Lane | None = None
        room = -1
        cap = self.sizing.requests
        for lane in self.handles.lanes:
            free = lane.cap - lane.bytes
            if free > room and lane.requests < cap and lane.cap > 0:
                best, room = lane, free
        if best is None or (room < length and best.bytes > 0):
            return None
        return best

    def live_lanes(self) -> int:
        """Lanes that take requests: not Compression auto's parked or draining ones
        (cap 0), which counted against the controller's channels kept a 1 Gbit/s put
        on one plain lane (0.72 s where two took 0.56)."""
        return sum(1 for lane in self.handles.lanes if lane.cap > 0)

    def request_length(self, block: int) -> int:
        """Bytes of the next request: ``block``, or Compression auto's probe train's
        shorter one while the file's route is undecided (``compressswitch``)."""
        train = self.switch.train_block if self.switch is not None else None
        return block if train is None else min(block, train)

    def fill(self) -> None:
        """Issue what the budget allows (the write pump's caller does it)."""
        self.progress.set()

    def _wait_for_tokens(self, count: int) -> None:
        """The rate limit holds ``count`` bytes back: ``fill`` again once they may go."""
        if self._paced is None and self.pacer is not None:
            self._paced = self.pacer.wake_at(count, self._tokens_came)

    def _tokens_came(self) -> None:
        self._paced = None
        if not self.abandoned and self.error is None:
            self.fill()

    def stop_pacing(self) -> None:
        """No wake-up is left behind on the loop (the pump is finished or abandoned)."""
        timer, self._paced = self._paced, None
        if timer is not None:
            timer.cancel()

    def add_lane(self, lane: Lane) -> None:
        self._sync_budget()
        self.progress.set()

    def _sync_budget(self) -> None:
        self.budget.max_requests = self.sizing.request_cap(len(self.handles.lanes))
        if self.adaptive:
            self.budget.max_bytes = self.controller.budget
            if self.controller.channels > self.live_lanes():
                self.want_lanes.set()
        if self.switch is not None and self.switch.cap is not None:
            # Compression auto's probe train: a few blocks until the route is
            # chosen, so the rest is not all asked for on the wrong connection.
            self.budget.max_bytes = min(self.budget.max_bytes, self.switch.cap)

    def resync(self) -> None:
        """The budget again from the controller (and the switch's cap), then more requests."""
        self._sync_budget()
        self.fill()

    def _sample(self, lane: Lane, length: int, delivered: int, sent: float) -> None:
        """A request of ``length`` bytes on ``lane`` was answered with ``delivered`` bytes."""
        in_flight = self.on_wire
        lane.bytes -= length
        lane.requests -= 1
        self.unanswered -= 1
        self.on_wire -= length
        now = time.monotonic()
        self.first_reply_at = self.first_reply_at or now
        rtt = now - sent
        ended = self.controller.on_reply(now, rtt=rtt, delivered=delivered, in_flight=in_flight)
        if self.switch is not None:
            self.switch.on_sample(self, lane, delivered, now)
        if ended:
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
        self.unanswered += 1
        self.on_wire += length
        self.requests += 1

    def fail(self, exc: BaseException) -> None:
        """Remember the first error; no request is issued after it."""
        if self.error is None:
            self.error = exc
        self.progress.set()

    def abandon(self) -> None:
        """Cancelled: issue nothing more and discard the replies still to come.

        Their channels owe them and go back to the pool settling, which waits
        for them (``transport.settling``); nothing here waits.
        """
        self.abandoned = True
        self.stop_pacing()
        self.budget.stop_asking()
        self.budget.free(self.budget.bytes)  # a cap shared with other files is theirs now
        for sftp in self.handles.used:
            sftp.unsettled = True
        self.handles.release()

    async def wait(self) -> None:
        await self.progress.wait()
        self.progress.clear()

    async def settle(self) -> None:
        """Until every request sent is answered (or failed with its channel)."""
        while self.unanswered:
            await self.wait()

    def carriers(self) -> list[SFTPSession]:
        """The channels that held a lane, less those Compression auto opened the file
        on and never routed a request to (its parked lanes): for the stats."""
        idle = self.switch.lanes.idle if self.switch is not None else set()
        return [sftp for sftp in self.handles.used if sftp not in idle]

    def flow_stats(self, lease: Lease) -> FlowStats:
        ctl = self.controller
        first = lease.channels[0]
        return {
            "connections": lease.connections_of(self.carriers()),
            "rtt_initial": first.init_rtt,
            "rtt_min": ctl.min_rtt,
            "rtt_smoothed": ctl.srtt,
            "peak_delivery_rate": ctl.peak_rate,
            "peak_target_in_flight": ctl.peak_target,
            "receive_window": first.recv_window,
            "peer_window": first.peer_window,
            "flow_phase": ctl.phase if self.adaptive else "fixed",
        }


class FlowStats(TypedDict):
    """The fields of ``TransferStats`` that say why a transfer ran at its speed."""

    connections: int
    rtt_initial: float
    rtt_min: float
    rtt_smoothed: float
    peak_delivery_rate: float
    peak_target_in_flight: int
    receive_window: int
    peer_window: int
    flow_phase: FlowPhase


def take_setup(channel: SFTPSession) -> list[tuple[str, float]]:
    """The channel's set-up phases, for the first transfer that runs on it alone."""
    phases, channel.setup = channel.setup, []
    return phases


def setup_phases(
    began: float,
    opened: list[tuple[str, float]],
    pump: Pump,
    rtt: float,
    after: list[tuple[str, float]],
) -> tuple[SetupPhase, ...]:
    """A transfer's set-up (``core.timeline``), from ``began`` (time.monotonic).

    ``opened``: the phases of the channel it started on (``take_setup``);
    ``after``: those after the last byte (commit, rename), timed by the caller.
    """
    timeline = Timeline(began, opened)
    timeline.mark("open", pump.opened_at)
    timeline.mark("first_data", pump.first_reply_at or pump.opened_at)
    for name, seconds in after:
        timeline.add(name, seconds)
    phases = in_round_trips(timeline.phases, rtt)
    if logger.isEnabledFor(logging.DEBUG):
        logger.debug("%s: set-up: %s", pump.handles.path, describe(phases))
    return phases


class Setup:
    """A pump being set up: open the file on ``channels``, then ``start`` the pump."""

    def __init__(
        self,
        lease: Lease,
        config: TransferConfig,
        sizing: Sizing,
        controller: FlowController,
        grower: Grower,
        shared: SharedBytes | None,
    ) -> None:
        self.lease = lease
        self.sizing = sizing
        self.controller = controller
        self.grower = grower
        self._config = config
        self._shared = shared
        self.pump: Pump | None = None
        self._budget: FlightBudget | None = None
        self.switch: Switch | None = None

    @property
    def channels(self) -> list[SFTPSession]:
        """The channels the file is opened on before any growth: all of them when fixed."""
        return initial_channels(self.lease)

    def parts(self, handles: Handles) -> Parts:
        budget = FlightBudget(
            max_requests=self.sizing.request_cap(1),
            max_bytes=self._config.max_bytes_in_flight,
            shared=self._shared,
        )
        self._budget = budget
        return Parts(
            handles,
            budget,
            self.controller,
            self.sizing,
            adaptive=self.lease.can_grow,
            want_lanes=self.grower.want,
            pacer=self.lease.pacer,
        )

    def start(self, pump: P) -> P:
        """The file is open: the pump runs, and the grower may add lanes to it."""
        self.pump = pump
        self.grower.attach(pump)
        if self.switch is not None:
            self.switch.start(pump)
        return pump

    async def finish(self, error: BaseException | None) -> None:
        """Stop issuing and growing, let replies in flight return, close every handle.

        Whatever the pump still has charged then leaves the shared byte cap.
        """
        try:
            await self._finish(error)
        finally:
            if self._budget is not None:
                self._budget.release()

    async def _finish(self, error: BaseException | None) -> None:
        pump = self.pump
        if pump is None:
            return  # the file never opened: nothing in flight, no handle
        pump.stop_pacing()
        if self.switch is not None:
            await self.switch.stop()  # no lane is added while the handles close
        if error is not None:
            pump.fail(error)
        if cancelled(error):
            # Within a round trip: no wait for the replies in flight (seconds of
            # them on a thin link) nor for the CLOSEs, which the pool settles.
            await self.grower.stop()
            pump.abandon()
            return
        try:
            await self.grower.stop()
            if pump.error is not None and pump.unanswered:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(SETTLE_AFTER_ERROR):
                        await pump.settle()
        finally:
            if pump.error is None and not pump.handles.write:
                pump.handles.release()  # a read that is done waits for no CLOSE
            else:
                await pump.handles.close(check=pump.error is None)


@contextlib.asynccontextmanager
async def pumping(
    lease: Lease,
    config: TransferConfig,
    sizing: Sizing,
    *,
    size: int | None = None,
    shared: SharedBytes | None = None,
    sample: Sampler | None = None,
) -> AsyncIterator[Setup]:
    """Set a pump up (sizing -> controller -> grower -> handles -> pump) and take it down.

    The grower starts before an upload's file is open, so new channels' round
    trips overlap the first one's OPEN (a download opens its file first: its
    OPEN goes out with the server's limits request, which sizes the pump).
    ``size``: the transfer's, when known before the file is open (an
    upload's); ``shared``: a byte cap shared with other transfers (a tree's
    big files); ``sample``: a put's blocks of its data for Compression auto.
    """
    controller = make_controller(config, lease, sizing, size=size)
    # A tree's big files share the tree's bytes; other transfers the client's.
    shared = shared or lease.channels[0].client_bytes
    async with (
        switching(lease, sample, shared) as switch,
        growing(lease, controller) as grower,
    ):
        setup = Setup(lease, config, sizing, controller, grower, shared)
        setup.switch = switch
        try:
            yield setup
        except BaseException as exc:
            await setup.finish(exc)
            raise
        await setup.finish(None)
