"""An upload's sending, across its connections: what is sent, what is acknowledged.

``Sending`` lives as long as one upload, through every reconnect of
``upload``'s retry loop: ``attempt`` opens the target on a lease and keeps
WRITEs in flight (what a dropped connection took first, then the rest), and
the counts it keeps (``offset``, ``acked``, ``resend``, the ranges kept by a
resume) carry over to the next attempt. A worker process's stripe of a
shared put runs on it too (``workers.child``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from ..core import codec
from ..core.checkfile import HashSpec
from ..core.config import TransferConfig
from ..core.errors import RemoteError, SSHPipeError
from ..core.flight import SharedBytes
from ..core.readplan import Range
from ..core.sizing import Sizing
from ..durability.putresume import UploadResume
from ..local import writeback
from ..transport.pool import Lease
from ..transport.remoteplace import (
    attrs_taken,
    keep_existing_mode,
    may_be_alike,
    named,
)
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession
from .blockprobe import needs_probe, probe_write
from .blocksource import BlockSource
from .earlysync import EarlySync, syncing_early
from .lanes import Handles, open_lanes
from .progress import Tally
from .pumpsetup import pumping
from .verify import OrderedHash
from .writepump import WritePump


class Sending:
    """An upload's progress across connections: what is sent, what is acknowledged."""

    def __init__(
        self,
        config: TransferConfig,
        sizing: Sizing,
        blocks: BlockSource,
        size: int | None,
        mode: int,
        shared: SharedBytes | None,
        on_tail: Callable[[], None] | None,
        tally: Tally | None,
        resuming: UploadResume | None = None,
        specs: Sequence[HashSpec] = (),
    ) -> None:
        self.config = config
        # Fixed for the whole upload, reconnects included (once probed, ``probe_block``).
        self.sizing = sizing
        self.blocks = blocks
        self.size = size  # bytes to send (None: a stream's, unknown); less what a resume kept
        self.end = size  # where the source ended when it was opened
        self.mode = mode
        self.shared = shared
        self.on_tail = on_tail
        self.tally = tally
        # ``specs``: what --verify hashes as the bytes go. A resumed upload sends
        # only the gaps: its source is hashed from disk instead.
        self.digest = OrderedHash(specs) if specs and resuming is None else None
        self.offset = 0  # the next byte never sent
        self.resend: dict[int, int] = {}  # sent on a connection that dropped, never acknowledged
        self.acked = 0
        self.closing = 0.0  # seconds the last attempt's fsync and CLOSE took
        self.resuming = resuming
        self.kept: list[Range] = []  # ranges the server already has: skipped
        self.early: EarlySync | None = None  # fsyncs while the writes go on
        # The first attempt's OPEN, sent with the STAT of the destination, whose
        # mode and owner a replaced file keeps (None: the OPEN's mode stands).
        self.first_open: asyncio.Future[codec.Reply] | None = None
        self.existing: asyncio.Future[codec.Reply] | None = None
        # The STAT of what the file will replace (whether or not it keeps its
        # mode), and the file as the last attempt left it (an FSTAT before its
        # CLOSE, asked only where the two may look alike): what its rename must
        # tell apart (``remoteplace.Landing``).
        self.replaced: asyncio.Future[codec.Reply] | None = None
        self.written: codec.Attrs | None = None
        self._next_kept = 0

    async def probe_block(self, sftp: SFTPSession, target: str) -> None:
        """On a server stating no limits, the block it takes (``blockprobe``), once.

        Before the first byte is sent, on the temporary file the first OPEN
        made: the probe's zeros are overwritten from offset 0.
        """
        size = self.size or 0
        if self.first_open is None or not needs_probe(self.config, sftp, write=True, size=size):
            return
        try:
            handle = await sftp.handle_from(self.first_open, target)
            block = await probe_write(sftp, handle, target)
        except BaseException:
            self.first_open = None  # the retry opens afresh, and probes no more
            raise
        self.sizing = replace(self.sizing, block=block)

    def heed_stalls(self, sftp: SFTPSession) -> None:
        """Fewer requests in flight once the server stalled past some (``ServerCaps``)."""
        learned = sftp.caps.requests
        if learned is not None and learned < self.sizing.requests:
            self.sizing = replace(self.sizing, requests=learned)

    def skip(self, kept: list[Range]) -> None:
        """Send nothing of ``kept`` (sorted, disjoint)."""
        self.kept = kept
        self._next_kept = 0
        if self.size is not None:
            self.size -= sum(rng.length for rng in kept)

    def _past_kept(self) -> int | None:
        """Move ``offset`` past any kept range it is in; where the next one starts."""
        kept = self.kept
        while self._next_kept < len(kept) and kept[self._next_kept].offset <= self.offset:
            self.offset = max(self.offset, kept[self._next_kept].end)
            self._next_kept += 1
        return kept[self._next_kept].offset if self._next_kept < len(kept) else None

    def _send(self, pump: WritePump, data: bytes, offset: int | None) -> int:
        """One WRITE of ``data`` at ``offset`` (None: the next byte never sent); its length."""
        fresh = offset is None
        if offset is None:
            offset = self.offset
            if self.digest is not None:
                self.digest.update(data)
        if self.resuming is not None:
            self.resuming.sent(offset, data)
        pump.send(offset, data)
        if fresh:
            self.offset += len(data)
        return len(data)

    def _moved(self, count: int) -> None:
        self.acked += count
        if self.early is not None:
            self.early.acked(count)
        if self.tally is not None:
            self.tally.moved(count)

    async def attempt(self, lease: Lease, target: str, remote: str, pflags: int) -> WritePump:
        """Open ``target`` on the lease, send what is owed and the rest, wait for every ack.

        Raises:
            ConnectionBroken: the connection dropped or stalled (``resend`` then
                holds what it took with it).
        """
        config = self.config
        pump: WritePump | None = None
        fsynced: asyncio.Future[codec.Reply] | None = None
        stated: asyncio.Future[codec.Reply] | None = None  # the FSTAT of the file written
        kept: asyncio.Future[codec.Reply] | None = None  # the FSETSTAT of the kept mode
        try:
            async with pumping(
                lease,
                config,
                self.sizing,
                size=self.size,
                shared=self.shared,
                sample=self.blocks.ratio,
            ) as setup:
                sent, self.first_open = self.first_open, None
                try:
                    handles = await open_lanes(
                        setup.channels,
                        target,
                        pflags,
                        codec.Attrs(permissions=self.mode),
                        write=True,
                        sent=sent,
                    )
                except RemoteError as exc:
                    raise named(exc, remote) from exc  # the user's path, not our temp name
                lane = handles.lanes[0]
                if self.existing is not None:  # again on each attempt: a drop may lose it
                    try:
                        kept = await keep_existing_mode(
                            lane.sftp, lane.handle, self.existing, self.mode
                        )
                    except BaseException as exc:  # cancelled before the pump took them
                        await handles.close_after(exc)
                        raise
                pump = WritePump(setup.parts(handles))
                pump.on_moved = self._moved
                if self.resuming is not None:
                    pump.on_acked = self.resuming.acked
                setup.start(pump)
                if self._syncs_early(handles):
                    left = (self.size or 0) - self.acked
                    async with syncing_early(setup.grower, pump, target, remote, left) as early:
                        self.early = early
                        try:
                            await self._send_all(pump)
                        finally:
                            self.early = None
                else:
                    await self._send_all(pump)
                closing = time.monotonic()
                if kept is not None and pump.error is None:
                    attrs_taken(lane.sftp, await kept, remote)
                if pump.error is None and may_be_alike(self.replaced, self.offset):
                    # Every WRITE is acknowledged: the file as its rename must show
                    # it. On its handle, so answered before the CLOSE (in order).
                    stated = lane.sftp.request(
                        partial(codec.encode_handle_request, codec.FXP_FSTAT, handle=lane.handle)
                    )
                    stated.add_done_callback(quiet)
                if config.fsync and lane.sftp.can_fsync and pump.error is None:
                    # Every WRITE is acknowledged: make them durable. The CLOSEs
                    # go right behind (leaving this block): requests on one handle
                    # are done in order, and both answers take one round trip.
                    fsynced = lane.sftp.fsync_request(lane.handle)
                    fsynced.add_done_callback(quiet)
            if fsynced is not None:
                lane.sftp.check_status(await fsynced, remote)
            self.written = None
            if stated is not None:
                with contextlib.suppress(SSHPipeError):  # not known: the rename looks then
                    reply = await stated
                    self.written = reply.attrs if isinstance(reply, codec.AttrsReply) else None
            self.closing = time.monotonic() - closing
        except BaseException:
            # The writes in flight were let answer before the handles closed:
            # what is still unacknowledged goes again on the next connection.
            if pump is not None:
                self.resend.update(pump.unacked)
            raise
        return pump

    def _syncs_early(self, handles: Handles) -> bool:
        """Worth a channel of its own: a durable upload with more than one sync's worth left."""
        left = (self.size or 0) - self.acked
        durable = self.config.fsync and handles.lanes[0].sftp.can_fsync
        return durable and left > 2 * writeback.SYNC_EVERY

    async def _send_all(self, pump: WritePump) -> None:
        try:
            await self._send_blocks(pump)
        finally:
            pump.budget.stop_asking()  # a reserve no block used, a place in the shared line
        while pump.unanswered and pump.error is None:
            await pump.wait()
        await pump.drain()

    async def _send_blocks(self, pump: WritePump) -> None:
        """Every block owed, each charged to the budget before it is read (``reserve``)."""
        while self.resend and pump.error is None:  # first what a dropped connection took
            if pump.room() == 0:
                await pump.wait()
                continue
            offset, length = self.resend.popitem()
            pump.budget.reserve(length)
            try:
                batch = [await self.blocks.reread(offset, length)]
            except BaseException:
                pump.budget.unreserve()
                raise
            if not await self._send_batch(pump, batch, offset):
                self.resend[offset] = length  # an error came first
            pump.budget.unreserve()  # none, unless the block shrank (then the reread failed)
        while pump.error is None:
            # Read each time: Compression auto's probe train asks for short blocks first.
            block = pump.request_length(pump.block_size)
            room = pump.room()
            if room == 0:
                await pump.wait()
                continue
            limit = self._past_kept()
            if limit is not None:
                room = min(room, -(-(limit - self.offset) // block))
            if self.end is not None:
                # No more reserved than the file still holds (it may grow: one at least).
                room = min(room, max(1, -(-(self.end - self.offset) // block)))
            pump.reserve(room)  # charged before the read: what is read is counted
            try:
                batch = await self.blocks.next(self.offset, block, room)
            except BaseException:
                pump.budget.unreserve()
                raise
            if limit is not None and batch:  # the last block stops where a kept range starts
                over = self.offset + sum(len(data) for data in batch) - limit
                if over > 0:
                    batch[-1] = batch[-1][: len(batch[-1]) - over]
            if not batch and self.on_tail is not None:
                self.on_tail()  # every byte is sent: the tree may start its next file
                self.on_tail = None
            if not batch:
                break
            await self._send_batch(pump, batch)
            pump.budget.unreserve()  # a short last block's rest, or blocks an error left

    async def _send_batch(
        self, pump: WritePump, batch: list[bytes], offset: int | None = None
    ) -> int:
        """Send ``batch`` (emptied) as the room comes: at ``offset``, or (None) at the
        next byte never sent, which it moves on. The bytes sent; fewer after an error.

        Each block is let go as its WRITE leaves: once acknowledged its bytes leave
        the budget, and a block still named here (the last one sent, while the
        next waited for room) kept a block of each of 200 puts uncharged.
        """
        batch.reverse()
        sent = 0
        while batch:
            # The room again: lanes may have changed while the disk was read
            # (Compression auto moved the file, a lane drained); sent on the
            # room counted before, a channel had 129 WRITEs of its 128. The
            # bytes are reserved: this waits for lanes and requests only.
            while pump.room() == 0 and pump.error is None:
                await pump.wait()
            if pump.error is not None:
                break
            sent += self._send(pump, batch.pop(), None if offset is None else offset + sent)
        batch.clear()
        return sent
