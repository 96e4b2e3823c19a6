"""The pump: what reads and writes share while requests are in flight over the lanes.

``Pump`` holds the lanes, the flight budget, the flow controller, the first
error and the wake-ups; ``readpump.py`` and ``writepump.py`` drive it. Every
reply is sampled into the controller, which sets the byte budget and says when
more lanes are wanted (``grower.py`` adds them).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from .._config import TransferConfig
from .._errors import Stalled
from ..core.flight import FlightBudget, SharedBytes
from ..core.flowcontrol import FlowController
from ..transport.pool import Lease
from .lanes import Handles, Lane

logger = logging.getLogger("sshpipe.flow")


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
                lane.sftp.close()
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


def budget_for(config: TransferConfig, shared: SharedBytes | None = None) -> FlightBudget:
    return FlightBudget(
        max_requests=config.requests, max_bytes=config.max_bytes_in_flight, shared=shared
    )
