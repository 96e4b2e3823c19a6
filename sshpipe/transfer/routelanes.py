"""Which of a file's lanes are on the compressed connection (``Compression auto``).

A file moved between routes keeps every lane it opened: the other route's
lanes get cap 0 (what they have in flight drains, nothing new is asked of
them) and each lane's own cap is kept to be given back if the file moves
back. ``transfer.compressswitch`` decides the moves; this carries out the
lanes' part of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..core.errors import SSHPipeError
from ..transport.compressroute import RoutedLease
from ..transport.sftp import SFTPSession
from .pump import Pump

__all__ = ["RouteLanes"]


class RouteLanes:
    """One file's lanes by route, and their own caps."""

    def __init__(self, is_compressed: Callable[[SFTPSession], bool]) -> None:
        # A channel of the compressed connection, asked of the lease: the ones the
        # grower adds while the file is there are counted and routed as such too.
        self.is_compressed = is_compressed
        # Compressed channels the file is open on that no request was routed to.
        self.idle: set[SFTPSession] = set()
        self._cap_of: dict[int, int] = {}  # every lane's own cap, by id
        self.on_compressed = False  # the route requests go to

    async def park(self, pump: Pump, channels: list[SFTPSession]) -> None:
        """Open the file on compressed ``channels``, their lanes given no request yet."""
        for sftp in channels:
            self.idle.add(sftp)
            lane = await pump.handles.add(sftp)
            # No await since the lane was appended: the pump never saw its cap.
            self._cap_of[id(lane)], lane.cap = lane.cap, 0

    def route(self, pump: Pump, *, compressed: bool) -> None:
        """New requests go to the lanes of one route; the other's drain."""
        for lane in pump.handles.lanes:
            cap = self._cap_of.setdefault(id(lane), lane.cap)
            lane.cap = cap if self.is_compressed(lane.sftp) == compressed else 0
        self.on_compressed = compressed
        if compressed:
            self.idle.clear()

    async def widen(self, pump: Pump, lease: RoutedLease, count: int) -> None:
        """``count`` more compressed lanes, beside a move onto the parked ones (each
        channel and OPEN costs four round trips; the move did not wait for them)."""
        with contextlib.suppress(SSHPipeError):  # the file goes on with the lanes it has
            for sftp in await lease.add(count):  # the compressed pool's: asked while on it
                lane = await pump.handles.add(sftp)
                self._cap_of[id(lane)] = lane.cap
                if not self.on_compressed:
                    lane.cap = 0  # moved back meanwhile: a later move gives it its cap
                pump.add_lane(lane)
