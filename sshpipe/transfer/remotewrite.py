"""Streaming writes to one open remote file: ``write(data)`` through the write pump.

Bytes are cut into the sizing's blocks and sent as WRITEs at the file's
growing offset, pipelined by the upload's own ``WritePump`` (its budget,
its acknowledgements, its first error). A full budget is backpressure:
``write`` waits until acknowledgements make room, so memory stays within
the flight budget plus the one partial block kept for the next call.
"""

from __future__ import annotations

import asyncio

from ..core.config import TransferConfig
from ..core.flight import FlightBudget
from ..core.sizing import Sizing
from ..transport.pool import Lease
from .grower import make_controller
from .lanes import Handles
from .pump import Parts
from .writepump import WritePump


class FileWriter:
    """WRITEs of a file opened for writing, in order of offset, pipelined."""

    def __init__(
        self, lease: Lease, handles: Handles, config: TransferConfig, sizing: Sizing, offset: int
    ) -> None:
        channel = handles.lanes[0].sftp
        budget = FlightBudget(
            max_requests=sizing.request_cap(1),
            max_bytes=config.max_bytes_in_flight,
            shared=channel.client_bytes,
        )
        # One lane, no growth: the file lives as long as its user keeps it, and
        # a grower is a task; the budget is the sizing's, as an upload's start.
        parts = Parts(
            handles,
            budget,
            make_controller(config, lease, sizing, size=None),
            sizing,
            adaptive=False,
            want_lanes=asyncio.Event(),
            pacer=lease.pacer,
        )
        self.pump = WritePump(parts)
        self.block = sizing.block
        self.offset = offset  # where the next byte goes
        self._pending = bytearray()  # less than a block, not sent yet

    @property
    def requests(self) -> int:
        return self.pump.requests

    @property
    def written(self) -> int:
        """Bytes handed to ``write``, sent or not."""
        return self.offset + len(self._pending)

    def _check(self) -> None:
        if self.pump.error is not None:
            raise self.pump.error

    async def _send(self, data: bytes) -> None:
        pump = self.pump
        while True:
            self._check()
            if pump.room():
                break
            await pump.wait()
        pump.send(self.offset, data)
        self.offset += len(data)

    async def write(self, data: bytes) -> None:
        """Queue ``data``: whole blocks go now (waiting while the budget is full)."""
        self._check()
        view = memoryview(data)
        if self._pending:
            need = self.block - len(self._pending)
            self._pending += view[:need]
            view = view[need:]
            if len(self._pending) < self.block:
                return
            block, self._pending = bytes(self._pending), bytearray()
            await self._send(block)
        while len(view) >= self.block:
            await self._send(bytes(view[: self.block]))
            view = view[self.block :]
        self._pending += view

    async def flush(self) -> None:
        """Send what is pending and wait for every WRITE's acknowledgement."""
        if self._pending:
            block, self._pending = bytes(self._pending), bytearray()
            await self._send(block)
        await self.pump.drain()

    async def close(self) -> None:
        """Flush, then CLOSE the handle; raise the first error (the handle closed anyway)."""
        pump = self.pump
        try:
            await self.flush()
        except BaseException as exc:
            pump.stop_pacing()
            pump.budget.release()
            if isinstance(exc, Exception):
                await pump.handles.close(check=False)
            else:  # cancelled: the pool settles the replies and the CLOSE
                pump.abandon()
            raise
        pump.stop_pacing()
        pump.budget.release()
        await pump.handles.close(check=True)
