"""Growing a transfer: more channels while the flow controller wants them.

A flow controller (``core/flowcontrol.py``) sees every reply's latency and
size; when it wants more channels than the transfer has, the grower asks the
lease for more (on more connections if need be), opens the file on them and
adds the lanes while requests keep flowing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from ..core.config import TransferConfig
from ..core.errors import SSHPipeError
from ..core.flowcontrol import FlowController, FlowLimits
from ..core.sizing import Sizing
from ..core.text import printable
from ..transport.alongside import alongside
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession
from .pump import Pump

logger = logging.getLogger("sshpipe.flow")


def make_controller(
    config: TransferConfig,
    lease: Lease,
    sizing: Sizing,
    *,
    size: int | None,
    one_lane: bool = False,
) -> FlowController:
    limits = FlowLimits(
        memory_budget=config.max_bytes_in_flight,
        min_in_flight=config.min_bytes_in_flight,
        channel_capacity=max(1, sizing.channel_capacity),
        max_channels=1 if one_lane else lease.max_channels,
        size=size,
        block=sizing.block,
        rate_limit=config.rate_limit,
    )
    rtt0 = min((s.init_rtt for s in lease.channels if s.init_rtt > 0), default=0.0)
    return FlowController(limits, rtt0=rtt0, now=time.monotonic())


class Grower:
    """Opens more channels while the controller wants more, and makes them lease.

    It starts as soon as the pump is sized (the controller's first guess
    comes from the RTT seen at set-up), so new channels' four round trips
    overlap the first channel's OPEN (an upload's) or first READs. Channels
    that arrive before the pump exists are parked; ``attach`` turns them into
    lease. Each channel becomes a
    lane as soon as it and its handle are open, not when the whole batch is (a
    new connection takes ten round trips). A channel or connection that cannot
    be opened only stops the growth: the transfer goes on with what it has.
    """

    def __init__(self, lease: Lease, controller: FlowController, *, grow: bool = True) -> None:
        self.lease = lease
        self.grow = grow  # False: the file has one handle (a read-once server's)
        self.controller = controller
        self.want = asyncio.Event()
        self.want.set()  # the first guess may already want more than one channel
        self._pump: Pump | None = None
        self._parked: list[SFTPSession] = []  # open channels not (yet) wanted as lease
        self._opening = 0  # channels whose handle on the file is being opened
        self._group: asyncio.TaskGroup | None = None
        self._task: asyncio.Task[None] | None = None
        self._bug: Exception | None = None
        self._side = 0  # channels of the lease taken for other work than lanes

    def start(self, group: asyncio.TaskGroup) -> None:
        if self.lease.can_grow and self.grow:
            self._task = group.create_task(self._run())

    async def stop(self) -> None:
        """Cancel the growth and wait for it: no lane is added after this returns."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    async def side_channel(self) -> SFTPSession | None:
        """One more channel of the lease for other work than the lanes (an upload's
        early syncs), not counted as one the controller asked for; None if refused."""
        added = await self.lease.add(1)
        self._side += len(added)
        return added[0] if added else None

    def check(self) -> None:
        """Raise the bug that ended the growth before there was a pump to fail."""
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
        room = max(0, self.controller.channels - pump.live_lanes() - self._opening)
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
                    missing = self.controller.channels - len(self.lease.channels) + self._side
                    if not growing or missing <= 0 or (pump is not None and pump.error):
                        continue
                    try:
                        added = await self.lease.add(missing, self._arrived)
                    except SSHPipeError as exc:  # only the growth stops
                        logger.debug("%s: no more channels: %s", self.lease, exc)
                        added = []
                    growing = bool(added)  # none: the server (or our caps) allow no more
        except Exception as exc:  # a bug: stop the transfer rather than hide it
            self._bug = exc
            if self._pump is not None:
                self._pump.fail(exc)


@contextlib.asynccontextmanager
async def growing(
    lease: Lease, controller: FlowController, *, grow: bool = True
) -> AsyncIterator[Grower]:
    """A grower running for the duration of the block (stopped, and awaited, on leaving).

    Its task runs ``alongside`` the block: the block's error comes out as it was raised.
    """
    grower = Grower(lease, controller, grow=grow)
    async with alongside(grower.start, grower.stop):
        yield grower
    grower.check()
