"""A pump's set-up and take-down: the one both the read and the write pump use.

``pumping()`` makes the controller, the grower and Compression auto's switch
for a lease, and yields a ``Setup`` on which the caller opens its file and
``start``s its pump; on leaving, growth stops, replies in flight are let back
after an error and every handle is closed. ``setup_phases`` times the set-up
for the stats.

This sits above ``pump.py``, ``grower.py`` and ``compressauto.py``, which it
puts together; none of them imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TypeVar

from ..core.config import TransferConfig
from ..core.flight import FlightBudget, SharedBytes
from ..core.flowcontrol import FlowController
from ..core.sizing import Sizing
from ..core.stats import SetupPhase
from ..core.timeline import Timeline, describe, in_round_trips
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession
from .compressauto import Sampler, switching
from .compressswitch import Switch
from .grower import Grower, growing, make_controller
from .lanes import Handles, cancelled, initial_channels
from .pump import Parts, Pump

logger = logging.getLogger("sshpipe.flow")

# Seconds the replies in flight get, after an error, before the handles are
# closed anyway: a server that stops answering must not hide the first error.
SETTLE_AFTER_ERROR = 30.0

P = TypeVar("P", bound=Pump)


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
    one_lane: bool = False,
) -> AsyncIterator[Setup]:
    """Set a pump up (sizing -> controller -> grower -> handles -> pump) and take it down.

    The grower starts before an upload's file is open, so new channels' round
    trips overlap the first one's OPEN (a download opens its file first: its
    OPEN goes out with the server's limits request, which sizes the pump).
    ``size``: the transfer's, when known before the file is open (an
    upload's); ``shared``: a byte cap shared with other transfers (a tree's
    big files); ``sample``: a put's blocks of its data for Compression auto;
    ``one_lane``: the file is opened once (a read-once server's): no growth.
    """
    controller = make_controller(config, lease, sizing, size=size, one_lane=one_lane)
    # A tree's big files share the tree's bytes; other transfers the client's.
    shared = shared or lease.channels[0].client_bytes
    async with (
        switching(lease, sample, shared) as switch,
        growing(lease, controller, grow=not one_lane) as grower,
    ):
        setup = Setup(lease, config, sizing, controller, grower, shared)
        setup.switch = switch
        try:
            yield setup
        except BaseException as exc:
            await setup.finish(exc)
            raise
        await setup.finish(None)
