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
from collections.abc import AsyncIterable, Callable
from dataclasses import replace

from ..core import codec
from ..core.config import TransferConfig
from ..core.errors import ConnectionBroken, IntegrityError, RemoteError, SSHPipeError, UsageError
from ..core.flight import SharedBytes
from ..core.retry import RetryBudget
from ..core.stats import TransferStats, Verified
from ..durability.putresume import UploadResume, remote_resume_name
from ..local.source import LocalSource
from ..transport.pool import Lease
from ..transport.remoteplace import (
    Landing,
    check_landed,
    discard_temp,
    landing_of,
    named,
    refuse_existing,
    remote_temp_name,
    rename_into_place,
    replaced_by,
    resolve_remote_target,
)
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession
from .blocksource import BlockSource, FileBlocks, StreamBlocks
from .inorder import in_order
from .lanes import cancelled, capped_write, initial_channels, sizing_for
from .progress import Tally
from .pumpsetup import setup_phases, take_setup
from .readback import prepare_resume
from .retrying import Retrying
from .sending import Sending
from .verify import RemoteHash, plan_for, verify_copy
from .writepump import WritePump

# A stream's file: readable by all, as a new file from ``cp`` or ``cat >`` (the umask aside).
STREAM_MODE = 0o644


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
    config = in_order(config, sftp.caps)  # the server's profile is known now
    began, opened = time.monotonic(), take_setup(sftp)
    committed = False
    temp: str | None = None  # renamed into place at the end
    discard: str | None = None  # removed if the upload fails
    sent: asyncio.Future[codec.Reply] | None = None  # the first OPEN, not yet answered
    sending: Sending | None = None
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
            temp = discard = target = remote_temp_name(sftp, remote)
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
                temp = discard = target = remote_temp_name(sftp, remote)
                existing = sftp.stat_request(remote)  # answered before the next OPEN
        if existing is not None:
            existing.add_done_callback(quiet)
            if not overwrite:  # fail before a byte is sent; the commit decides for sure
                await refuse_existing(existing, remote)
        sizing = await sizing_for(config, sftp, write=True)
        block = capped_write(sizing.block, size, sftp, remote)
        sizing = replace(sizing, block=block) if block != sizing.block else sizing
        checks = plan_for(config.verify, sftp, remote_hash)
        sending = Sending(
            config, sizing, blocks, size, mode, shared, on_tail, tally, resuming, checks.specs
        )
        if tally is not None:
            tally.sized(size)
        sending.first_open, sent = sent, None
        sending.existing = existing if keep_mode else None
        sending.replaced = existing
        budget = RetryBudget(attempts=config.retries if blocks.rereadable else 0)
        retry = Retrying(lease, budget, path=remote)

        async def send() -> WritePump:
            nonlocal pflags
            try:
                if resuming is not None and not resuming.prepared:
                    await prepare_resume(resuming, lease, remote, config)
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
        # What the rename must show: the file written, not the one it replaces.
        proof = Landing(sending.offset, await replaced_by(existing), sending.written)

        def unchanged() -> None:
            """The source is the file it was when opened: sent as it changed, the copy
            is of no version of it, whatever a check of the bytes sent finds (the
            mirror of a get's check against the server's file as it is now)."""
            nonlocal discard
            try:
                blocks.check_unchanged()
            except IntegrityError:
                if resuming is not None and temp is not None:
                    # Its journal is of a file that is gone: the partial goes as a
                    # temporary file does (the ledger's, so a lost REMOVE is swept).
                    discard = temp
                    sftp.temps.adopt(temp)
                raise

        async def land() -> None:  # the whole file is on the server, under its temp name
            nonlocal verified, checked, renaming
            sftp = lease.channels[0]
            unchanged()  # before --verify, which would blame the bytes
            if not checked:  # a land() retried after its check passed goes on to the rename
                # Without a streamed hash it is a resume: its source is a file.
                verified = await verify_copy(
                    sftp,
                    lease,
                    target,
                    config,
                    size=sending.offset,
                    local=resuming.source.path if resuming is not None else "",
                    streamed=sending.digest,
                    plan=checks,
                    shown=remote,
                    remote_hash=remote_hash,
                )
                checked = True
                unchanged()  # and after it: the server's hash may take a while
            # A rename cut off with its connection may have been done: the temp
            # name is ours alone, so if it is gone (and the file is there), it was.
            if temp is not None and not (
                renaming and await check_landed(sftp, temp, remote, proof)
            ):
                renaming = True
                renamed = time.monotonic()
                await rename_into_place(sftp, temp, remote, proof, replace=overwrite)
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
            # Its OPEN went on ``sftp``: that channel first (it answers in order);
            # with none left up (a reconnect that failed) it stays in the ledger.
            # Cancelled, it leaves within a round trip: the pool settles the REMOVE.
            channels = [sftp, *lease.channels]
            await discard_temp(sftp.temps, channels, discard, at_once=cancelled(failure))


async def _drop(sftp: SFTPSession, sent: asyncio.Future[codec.Reply], temp: str) -> None:
    """Close the handle an OPEN sent ahead got (if any), and remove ``temp`` it created."""
    with contextlib.suppress(SSHPipeError):
        sftp.close_handle_soon(await sftp.handle_from(sent, temp), temp)
    await discard_temp(sftp.temps, [sftp], temp, at_once=False)


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

    A pipe (a FIFO: ``<(command)``, /dev/stdin piped) is streamed as
    ``upload_stream`` streams, its file created with mode 0644 (umask aside):
    read once, it is not resumed, nor sent again after a drop.

    Raises:
        LocalError: ``local`` is missing, unreadable, a directory, a device or a socket.
        UsageError: ``config.resume`` for a pipe.
    """
    source = LocalSource(local)
    source.open()
    try:
        blocks: BlockSource
        if source.pipe:
            if config.resume:
                raise UsageError(f"{local}: is a pipe: --resume needs a file it can read again")
            mode, blocks, size = STREAM_MODE, StreamBlocks(source.chunks()), None
        else:
            mode, size = source.mode, source.size
            blocks = FileBlocks(source, in_thread=config.local_io_in_thread)
        return await _upload(
            lease,
            remote,
            config,
            mode,
            blocks,
            source.path.name if into_directory else None,
            size,
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
    mode: int = STREAM_MODE,
    *,
    tally: Tally | None = None,
) -> TransferStats:
    return await _upload(lease, remote, config, mode, StreamBlocks(chunks), None, None, tally=tally)
