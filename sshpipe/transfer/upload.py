"""Uploads: keep WRITEs in flight over the lease to a temp name, then rename it into place.

With ``resume`` the temp name is fixed and kept on failure, and only the
ranges a journal vouches for (and a read-back confirms) are skipped: see
``durability/putresume.py``. Both the sending and the final check and rename
run inside one reconnect loop (``retrying.py``), sharing its count.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterable, Callable, Sequence
from dataclasses import replace
from functools import partial

from .._config import TransferConfig
from .._errors import ConnectionBroken, RemoteError, SSHPipeError
from .._stats import TransferStats, Verified
from ..core import codec
from ..core.checkfile import HashSpec
from ..core.flight import SharedBytes
from ..core.readplan import Range
from ..core.retry import RetryBudget
from ..core.sizing import Sizing
from ..durability.putresume import UploadResume, remote_resume_name
from ..local import writeback
from ..local.source import LocalSource
from ..transport.pool import Lease
from ..transport.remoteplace import (
    check_landed,
    keep_existing_mode,
    landing_of,
    named,
    refuse_existing,
    remote_temp_name,
    remove_quietly,
    remove_soon,
    rename_into_place,
    resolve_remote_target,
)
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession
from .blockprobe import needs_probe, probe_write
from .blocksource import BlockSource, FileBlocks, StreamBlocks
from .earlysync import EarlySync, syncing_early
from .lanes import Handles, cancelled, initial_channels, open_lanes, sizing_for
from .progress import Tally
from .pump import pumping, setup_phases, take_setup
from .retrying import Retrying
from .stream import read_back
from .verify import OrderedHash, RemoteHash, check_copy, digests_of, plan_for
from .writepump import WritePump


async def _upload(
    lease: Lease,
    remote: str,
    config: TransferConfig,
    mode: int,
    blocks: BlockSource,
    name: str | None,
    size: int | None,
    shared: SharedBytes | None = None,
    on_tail: Callable[[], None] | None = None,
    tally: Tally | None = None,
    resuming: UploadResume | None = None,
    remote_hash: RemoteHash | None = None,
    keep_mode: bool = True,
    overwrite: bool = True,
) -> TransferStats:
    """Write ``blocks`` to a temp name beside ``remote``, then rename it into place.

    With ``config.fsync`` the server fsyncs the file before the rename (if it
    offers ``fsync@openssh.com``); with ``config.inplace`` ``remote`` itself is
    written and nothing is renamed. A dropped or stalled connection is reopened
    (``config.retries``) when the source can be read again (a file, not a
    stream): the temp file is reopened and only what was not acknowledged is
    sent again. ``resuming``: the temp name is fixed and kept on failure, and
    what an earlier run left intact in it is not sent again. ``keep_mode``: a
    file replaced keeps its mode and owner (``remoteplace.keep_existing_mode``);
    False when the caller sets the source's (``-p``). ``overwrite=False``: an
    existing ``remote`` is refused (RemoteExists), by the commit itself.
    """
    started = time.perf_counter()
    sftp = initial_channels(lease)[0]
    began, opened = time.monotonic(), take_setup(sftp)
    committed = False
    temp: str | None = None  # renamed into place at the end
    discard: str | None = None  # removed if the upload fails
    sent: asyncio.Future[codec.Reply] | None = None  # the first OPEN, not yet answered
    sending: _Sending | None = None
    existing: asyncio.Future[codec.Reply] | None = None  # the STAT of what is replaced
    failure: BaseException | None = None
    try:
        pflags = codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_TRUNC
        if config.inplace and not overwrite:
            pflags |= codec.FXF_EXCL  # in place, the OPEN is the commit
        if config.inplace or resuming is not None:
            remote = await resolve_remote_target(sftp, remote, name)
            # In place: straight to the destination, nothing to rename or remove;
            # resuming: a fixed name, kept on failure for the next --resume.
            temp = None if config.inplace else remote_resume_name(remote)
            target = temp or remote
            if temp is not None:  # in place, the file written is the one kept
                existing = sftp.stat_request(remote)
        else:
            # Inside the try: a cancel while the OPEN is in flight must still remove
            # the temp file the server may have created (the name is ours alone: EXCL).
            temp = discard = target = remote_temp_name(remote)
            pflags |= codec.FXF_EXCL
            # The OPEN goes with the STAT that says whether ``remote`` is a
            # directory: one round trip for both when it is not (the usual case).
            existing = sftp.stat_request(remote)
            sent = sftp.open_request(target, pflags, codec.Attrs(permissions=mode))
            sent.add_done_callback(quiet)
            landing = await landing_of(existing, remote, name)
            if landing != remote:  # a directory: the file goes inside it
                await _drop(sftp, sent, target)
                remote, sent = landing, None
                temp = discard = target = remote_temp_name(remote)
                existing = sftp.stat_request(remote)  # answered before the next OPEN
        if existing is not None:
            existing.add_done_callback(quiet)
            if not overwrite:  # fail before a byte is sent; the commit decides for sure
                await refuse_existing(existing, remote)
        sizing = await sizing_for(config, sftp, write=True)
        checks = plan_for(config.verify, sftp, remote_hash)
        sending = _Sending(
            config, sizing, blocks, size, mode, shared, on_tail, tally, resuming, checks.specs
        )
        if tally is not None:
            tally.sized(size)
        sending.first_open, sent = sent, None
        sending.existing = existing if keep_mode else None
        budget = RetryBudget(attempts=config.retries if blocks.rereadable else 0)
        retry = Retrying(lease, budget, path=remote)

        async def send() -> WritePump:
            nonlocal pflags
            try:
                if resuming is not None and not resuming.prepared:
                    await resuming.prepare(lease, remote, config)
                    sending.skip(resuming.kept)
                    if tally is not None:
                        tally.kept(resuming.kept_bytes)
                    if resuming.continuing:
                        pflags = codec.FXF_WRITE  # the kept ranges are in it: no TRUNC
                if temp is not None and resuming is None and sending.first_open is not None:
                    await sending.probe_block(sftp, target)
                sending.heed_stalls(sftp)
                return await sending.attempt(lease, target, remote, pflags)
            except RemoteError as exc:  # a WRITE refused (a full disk...) names the temp file
                if exc.path == remote:  # in place, or an error about the destination itself
                    raise
                raise named(exc, remote) from exc
            except ConnectionBroken:
                if resuming is None or resuming.prepared:
                    # Keep what was written; CREAT in case the first OPEN never got
                    # there. Until a WRITE is acknowledged (and with nothing kept
                    # from an earlier run), truncating loses nothing.
                    pflags = codec.FXF_WRITE | codec.FXF_CREAT
                    continuing = resuming is not None and resuming.continuing
                    if sending.acked == 0 and not continuing:
                        pflags |= codec.FXF_TRUNC
                raise

        pump = await retry.run(send, progress=lambda: sending.acked)
        if tally is not None:
            tally.sized(sending.offset)  # a stream's size is known now
        verified: Verified = "none"
        checked = renaming = False

        async def land() -> None:  # the whole file is on the server, under its temp name
            nonlocal verified, checked, renaming
            sftp = lease.channels[0]
            if config.verify != "none" and not checked:
                # Without a streamed hash it is a resume: its source is a file.
                source = resuming.source.path if resuming is not None else ""
                copied = sending.offset
                verified = await check_copy(
                    sftp,
                    target,
                    checks,
                    size=copied,
                    digests=await digests_of(sending.digest, source, copied, checks.specs),
                    read_back=partial(read_back, lease, target, config),
                    shown=remote,
                    remote_hash=remote_hash,
                )
                checked = True
            # A rename cut off with its connection may have been done: the temp
            # name is ours alone, so if it is gone (and the file is there), it was.
            if temp is not None and not (
                renaming and await check_landed(sftp, temp, remote, sending.offset)
            ):
                renaming = True
                renamed = time.monotonic()
                await rename_into_place(sftp, temp, remote, sending.offset, replace=overwrite)
                after.append(("rename", time.monotonic() - renamed))

        after = [("fsync_close", sending.closing)]
        await retry.run(land)  # no bytes move here: each break counts against the budget
        committed = True
        stats = replace(
            pump.stats(started, lease),
            verified=verified,
            reconnects=retry.reconnects,
            setup=setup_phases(began, opened, pump, lease.channels[0].init_rtt, after),
        )
        if resuming is not None:
            stats = replace(stats, bytes=sending.offset, resumed_bytes=resuming.kept_bytes)
        return stats
    except BaseException as exc:
        failure = exc
        raise
    finally:
        unused = sent or (sending.first_open if sending is not None else None)
        if unused is not None:  # failed before the upload took its handle
            sftp.close_when_opened(unused, temp or "")
        if resuming is not None:
            resuming.finish(committed)
        if not committed and discard is not None:
            live = [channel for channel in lease.channels if channel.broken is None]
            if cancelled(failure):  # leave within a round trip: the pool settles the REMOVE
                remove_soon((live or lease.channels)[0], discard)
            else:
                await remove_quietly((live or lease.channels)[0], discard)


async def _drop(sftp: SFTPSession, sent: asyncio.Future[codec.Reply], temp: str | None) -> None:
    """Close the handle an OPEN sent ahead got (if any), and remove ``temp`` it created."""
    with contextlib.suppress(SSHPipeError):
        sftp.close_handle_soon(await sftp.handle_from(sent, temp or ""), temp or "")
    if temp is not None:
        await remove_quietly(sftp, temp)


class _Sending:
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
        self.size = size
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

    def _send(self, pump: WritePump, offset: int, data: bytes) -> None:
        if self.resuming is not None:
            self.resuming.sent(offset, data)
        pump.send(offset, data)

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
        kept: asyncio.Future[codec.Reply] | None = None  # the FSETSTAT of the kept mode
        try:
            async with pumping(
                lease,
                config,
                self.sizing,
                size=self.size,
                shared=self.shared,
                sample=self.blocks.sample,
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
                    lane.sftp.check_status(await kept, remote)
                if config.fsync and lane.sftp.can_fsync and pump.error is None:
                    # Every WRITE is acknowledged: make them durable. The CLOSEs
                    # go right behind (leaving this block): requests on one handle
                    # are done in order, and both answers take one round trip.
                    fsynced = lane.sftp.fsync_request(lane.handle)
                    fsynced.add_done_callback(quiet)
            if fsynced is not None:
                lane.sftp.check_status(await fsynced, remote)
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
        while self.resend and pump.error is None:  # first what a dropped connection took
            if pump.room() == 0:
                await pump.wait()
                continue
            offset, length = self.resend.popitem()
            data = await self.blocks.reread(offset, length)
            while pump.room() == 0 and pump.error is None:  # as below: lanes changed
                await pump.wait()
            if pump.error is not None:
                self.resend[offset] = length
                break
            self._send(pump, offset, data)
        block = pump.block_size
        while pump.error is None:
            room = pump.room()
            if room == 0:
                await pump.wait()
                continue
            limit = self._past_kept()
            if limit is not None:
                room = min(room, -(-(limit - self.offset) // block))
            new = await self.blocks.next(self.offset, block, room)
            if limit is not None and new:  # the last block stops where a kept range starts
                over = self.offset + sum(len(data) for data in new) - limit
                if over > 0:
                    new[-1] = new[-1][: len(new[-1]) - over]
            if not new and self.on_tail is not None:
                self.on_tail()  # every byte is sent: the tree may start its next file
                self.on_tail = None
            if not new:
                break
            for data in new:
                # The room again: lanes may have changed while the disk was read
                # (Compression auto moved the file, a lane drained); sent on the
                # room counted before, a channel had 129 WRITEs of its 128.
                while pump.room() == 0 and pump.error is None:
                    await pump.wait()
                if pump.error is not None:
                    break
                if self.digest is not None:
                    self.digest.update(data)
                self._send(pump, self.offset, data)
                self.offset += len(data)
        while pump.unanswered and pump.error is None:
            await pump.wait()
        await pump.drain()


async def upload(
    lease: Lease,
    local: str,
    remote: str,
    config: TransferConfig,
    *,
    into_directory: bool = True,
    shared: SharedBytes | None = None,
    on_tail: Callable[[], None] | None = None,
    tally: Tally | None = None,
    remote_hash: RemoteHash | None = None,
    keep_mode: bool = True,
    overwrite: bool = True,
) -> TransferStats:
    """Copy ``local`` to ``remote`` (a temp name renamed into place).

    ``into_directory``: a directory at ``remote`` receives the file under its
    local name (scp); False (a tree already chose the name) makes it an error.
    ``shared``: a byte cap shared with other transfers (a tree's big files).
    ``on_tail``: called once every byte is sent (a tree then starts its next
    big file while this one's acknowledgements, CLOSE and rename go by).
    ``tally``: told the size, then each count of bytes the server acknowledged
    (and those a resumed upload kept).
    ``remote_hash``: how --verify gets the server's hash (default: an exec).
    ``keep_mode``: a file replaced keeps its mode (False: ``-p`` sets the source's).
    ``overwrite=False``: RemoteExists if something is at ``remote`` when it is committed.
    """
    source = LocalSource(local)
    source.open()
    try:
        return await _upload(
            lease,
            remote,
            config,
            source.mode,
            FileBlocks(source, in_thread=config.local_io_in_thread),
            source.path.name if into_directory else None,
            source.size,
            shared,
            on_tail,
            tally,
            UploadResume(source) if config.resume else None,
            remote_hash,
            keep_mode,
            overwrite,
        )
    finally:
        source.close()


async def upload_stream(
    lease: Lease,
    chunks: AsyncIterable[bytes],
    remote: str,
    config: TransferConfig,
    mode: int = 0o644,
    *,
    tally: Tally | None = None,
) -> TransferStats:
    return await _upload(lease, remote, config, mode, StreamBlocks(chunks), None, None, tally=tally)
