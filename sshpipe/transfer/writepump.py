"""The pump of an upload: WRITEs in flight over the lease, each charged until its STATUS.

SFTP v3 WRITEs are all or nothing (filexfer-02 §6.4): a WRITE is either
acknowledged with FX_OK or failed, never short, so the pump keeps only what
is unacknowledged (``unacked``: what a new connection must send again).
``upload.py`` decides what to send; this module only keeps it moving.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from ..core import codec
from ..core.errors import ProtocolError, SSHPipeError
from ..core.stats import TransferStats
from ..core.status import status_error
from ..transport.pool import Lease
from .lanes import Lane
from .pump import Parts, Pump


class WritePump(Pump):
    """Keeps WRITEs in flight; each is charged to the budget until the server acks it."""

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self.block_size = parts.sizing.block
        self.sent_bytes = 0
        # Sent and not acknowledged, offset -> length: what a new connection
        # must send again if this one drops.
        self.unacked: dict[int, int] = {}
        # Told (offset, length) of each WRITE the server acknowledged (resume's journal).
        self.on_acked: Callable[[int, int], None] | None = None

    def __repr__(self) -> str:
        return f"<WritePump {self.handles.path} unanswered={self.unanswered} {self.budget!r}>"

    def room(self) -> int:
        """How many full blocks could be sent right now (by the budget and the lease)."""
        budget = self.budget
        if self.error is not None:
            return 0
        if self.switch is not None and self.switch.holds(self):
            return 0  # Compression auto: its route is being chosen
        block = self.request_length(self.block_size)
        by_requests = budget.max_requests - budget.requests
        by_bytes = budget.blocks(block)  # those reserved too; may put it in the shared line
        by_lanes = 0
        for lane in self.handles.lanes:
            if lane.cap <= 0:
                continue  # given no request (Compression auto's other route)
            blocks = (lane.cap - lane.bytes) // block
            if lane.bytes == 0:
                blocks = max(blocks, 1)  # an empty lane always takes one block
            by_lanes += max(0, min(blocks, self.sizing.requests - lane.requests))
        room = max(0, min(by_requests, by_bytes, by_lanes))
        if room and self.pacer is not None:
            # Last: the budget's "one block when nothing is charged" must not
            # pass the rate limit. Its tokens are taken as each WRITE leaves.
            room = min(room, self.pacer.blocks(block))
            if not room:
                self._wait_for_tokens(block)  # the caller waits on ``progress``
        return room

    def reserve(self, blocks: int) -> None:
        """Charge ``blocks`` blocks before they are read from the disk (``room`` counted
        them): what is read is in memory before its WRITE goes, and no other transfer
        may take its bytes meanwhile. ``send`` uses them up; ``budget.unreserve`` after."""
        block = self.request_length(self.block_size)
        self.budget.reserve(max(0, blocks * block - self.budget.reserved))

    def send(self, offset: int, data: bytes) -> None:
        lane = self._pick(len(data))
        if lane is None:  # a block larger than any lane's free bytes: the emptiest open one
            cap = self.sizing.requests
            open_ = [c for c in self.handles.lanes if c.cap > 0 and c.requests < cap]
            if not open_:
                raise AssertionError("send() without room(): every lane is full")
            lane = min(open_, key=lambda candidate: candidate.bytes)
        if self.pacer is not None:
            self.pacer.take(len(data))
        self.budget.send(len(data))
        self._sent(lane, len(data))
        self.unacked[offset] = len(data)
        if self.switch is not None and self.switch.sampling:
            self.switch.feed(data)
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
        lane: Lane,
        sent: float,
        reply: codec.Reply | BaseException,
    ) -> None:
        if self.abandoned:
            return  # cancelled: nobody wants it (its channel is settling)
        self.budget.reply(length, 0)
        ok = isinstance(reply, codec.Status) and reply.code == codec.FX_OK
        self._sample(lane, length, length if ok else 0, sent)
        if ok:
            del self.unacked[offset]
            if self.on_acked is not None:
                try:
                    self.on_acked(offset, length)
                except SSHPipeError as exc:  # inside the channel's data_received: no raising
                    self.fail(exc)
            if self.on_moved is not None:
                self.on_moved(length)
        elif isinstance(reply, codec.Status):
            self.fail(status_error(reply, self.handles.path, offset, write=True))
        elif isinstance(reply, BaseException):
            self.fail(reply)
        else:
            self.fail(
                ProtocolError(
                    f"{self.handles.path}: unexpected {type(reply).__name__} reply to a write"
                )
            )
        self.progress.set()

    async def drain(self) -> None:
        """Wait for every write to be acknowledged; raise the first failure."""
        await self.settle()
        if self.error is not None:
            raise self.error

    def stats(self, started: float, lease: Lease) -> TransferStats:
        return TransferStats(
            **self.flow_stats(lease),
            bytes=self.sent_bytes,
            seconds=time.perf_counter() - started,
            requests=self.requests,
            short_reads_reissued=0,
            short_writes_reissued=0,
            peak_requests_in_flight=self.budget.peak_requests,
            peak_bytes_in_flight=self.budget.peak_bytes,
            channels=len(self.carriers()),
            block_size=self.block_size,
        )
