"""The pump: what reads and writes share while requests are in flight over the lanes.

``Pump`` holds the lanes, the flight budget, the flow controller, the first
error and the wake-ups; ``readpump.py`` and ``writepump.py`` drive it. Every
reply is sampled into the controller, which sets the byte budget and says when
more lanes are wanted (``grower.py`` adds them). ``pumpsetup.py`` sets a pump
up and takes it down.

The pump knows Compression auto's switch only as a ``RouteSwitch``: what it
asks of one. The switch, the grower and the set-up all import this module,
never the other way round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Protocol, TypedDict

from ..core.flight import FlightBudget
from ..core.flowcontrol import FlowController
from ..core.sizing import Sizing
from ..core.stats import FlowPhase
from ..transport.pacing import Pacer
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession
from .lanes import Handles, Lane

logger = logging.getLogger("sshpipe.flow")


class RouteSwitch(Protocol):
    """What a pump asks of Compression auto's switch (``compressswitch.Switch``)."""

    @property
    def cap(self) -> int | None:
        """The probe train's byte cap on the budget (None: not capped)."""

    @property
    def train_block(self) -> int | None:
        """The train's request length while it lasts (None: the pump's block)."""

    @property
    def sampling(self) -> bool:
        """The file's blocks are still wanted for its ratio (``feed``)."""

    @property
    def idle(self) -> Collection[SFTPSession]:
        """Channels the file is open on that no request was routed to."""

    def holds(self, pump: Pump) -> bool:
        """No new request now: the route is being chosen."""

    def feed(self, chunks: list[bytes | memoryview] | bytes) -> None:
        """Blocks of the file as they arrive (a get) or leave (a put)."""

    def on_sample(self, pump: Pump, lane: Lane, delivered: int, now: float) -> None:
        """A reply of ``delivered`` bytes came on ``lane`` at ``now``."""


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
        self.switch: RouteSwitch | None = None  # Compression auto's (``compressswitch``)
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
        idle = self.switch.idle if self.switch is not None else ()
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
