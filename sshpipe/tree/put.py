"""Uploading trees: what an upload does where the bytes land, on the server.

The scanner (``scan``) walks the local directories; here each remote
directory is made, each small file written and renamed, each symlink made,
and each directory's mode and times are set once all in it is done. A small file costs
three round trips: OPEN of a temporary name; every WRITE, the FSETSTAT of
``-p`` and the CLOSE together (filexfer-02 §6.1: in order on one handle);
then the rename into place, so no file is ever seen half-written under its
final name.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..core import codec
from ..core.checkfile import VerifyPlan
from ..core.errors import (
    ConnectionBroken,
    RemoteError,
    RemoteIsADirectory,
    RemoteNotFound,
    SSHPipeError,
)
from ..core.servercaps import SYMLINK_REFUSED
from ..core.stats import TransferStats
from ..durability import ledger
from ..local.dirfd import local_error
from ..local.source import read_whole_file
from ..transfer.inorder import in_order, refused_out_of_order
from ..transfer.lanes import cancelled, capped_write
from ..transfer.progress import Tally
from ..transfer.upload import upload
from ..transfer.verify import Digests
from ..transport.pacing import Pacer
from ..transport.pool import Lease
from ..transport.remoteplace import (
    Landing,
    attrs_taken,
    check_landed,
    discard_temp,
    keep_existing_mode,
    may_be_alike,
    remote_temp_name,
    remove_quietly,
    rename_into_place,
    replaced_by,
)
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession
from .item import Folder, Item
from .remotesync import RemoteSync
from .run import TreeRun
from .scan import LocalSide
from .smallread import read_back_small
from .verify import digests_of_pieces

logger = logging.getLogger("sshpipe.tree")

# Why a link is left out of a tree put to a server that makes none.
NO_SYMLINKS = "a symlink, and the server makes none (-L copies what it points to)"


class TreePut(TreeRun):
    """Copies local ``sources`` to the remote ``dest`` (scp's layout rules)."""

    writes = True
    dest_error = RemoteError

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Temp files of uploads cut off by a dropped connection, removed at the end.
        self.stale_temps: list[str] = []
        # Directories this run made: no file in them is replaced, so none is asked
        # for the mode it keeps (``put_small``'s STAT).
        self.fresh_dirs: set[str] = set()
        self.remote_sync = RemoteSync(self.commands)

    def services(self) -> list[contextlib.AbstractAsyncContextManager[None]]:
        return [*super().services(), self.remote_sync.running()]

    async def dest_size(self, item: Item) -> int | None:
        try:
            attrs = await self.on_channel(partial(SFTPSession.lstat, path=item.dest))
        except RemoteNotFound:
            return None
        return attrs.size if attrs.kind == "file" else None

    # -- where things land ---------------------------------------------------------

    def source_side(self) -> LocalSide:
        return LocalSide()

    def join_dest(self, directory: str, name: str) -> str:
        return posixpath.join(directory, name)

    async def dest_is_dir(self) -> bool:
        try:
            return (await self.on_channel(partial(SFTPSession.stat, path=self.dest))).is_dir()
        except RemoteNotFound:
            return False

    def place_root(self, dest: str, dest_is_dir: bool) -> None:
        return None  # remote paths need nothing held open

    def local_dir(self, item: Item) -> None:
        return None

    async def make_dir(self, item: Item) -> bool:
        mode = (self.mode_of(item) | 0o700) & 0o777  # ours to fill; its mode is set at the end

        async def make(sftp: SFTPSession) -> bool:
            """Whether it existed. Repeated after a reconnect, ours counts as existing
            (its mode is then left alone, rather than risk changing someone else's)."""
            try:
                await sftp.mkdir(item.dest, codec.Attrs(permissions=mode))
                return False
            except RemoteError as exc:
                try:  # OpenSSH answers a plain FAILURE when it exists: is it a directory?
                    existed = (await sftp.stat(item.dest)).is_dir()
                except SSHPipeError:
                    raise exc from None
                if not existed:
                    raise RemoteError(item.dest, "exists and is not a directory") from exc
                return True

        existed = await self.on_channel(make)
        if not existed:
            self.fresh_dirs.add(item.dest)
        if existed and self.journal is not None and self.journal.earlier:
            # Resumed: what a killed run was writing here left its temp files.
            await self.on_channel(partial(ledger.sweep_dir, directory=item.dest))
        return existed

    # -- copying ---------------------------------------------------------------

    async def copy_small(self, item: Item) -> None:
        if item.kind == "symlink":
            await self._copy_link(item)
            return
        size = item.size
        # -R counts WRITEs of data, as for one file (OPEN, CLOSE, rename are not).
        async with self.credits.hold(max(1, -(-size // self.block)), size):
            data = await self.local(read_whole_file, item.source, size)
            if data is None:
                length = None  # it grew since it was listed
            else:
                length = len(data)
                async with self.handles:
                    sent = await self.on_channel(partial(self._send_small, item, data))
            # Sent: its bytes leave the credits here and must leave memory with
            # them, not wait for the commit (a batch's sync): 200 files of 1 MiB
            # grew a 16 MiB tree by 85 MiB when each kept its data to the end.
            del data
        if length is None:
            await self.copy_big(item)
            return
        if sent is not None:  # outside the credits and handles: it holds neither now
            await self.on_channel(partial(self._commit_small, item, sent))
        self.account.file_done(length, listed=item.size)

    async def _send_small(self, item: Item, data: bytes, sftp: SFTPSession) -> _Sent | None:
        """Write the file under a new temp name (each attempt its own: a lost one is
        removed at the end) and close it; rename it too, unless it must wait.

        It waits (returned, for ``_commit_small``) with --verify, and with fsync
        where the server can ``sync -f`` a batch (``RemoteSync``); otherwise
        fsync@openssh.com, if asked, went with its writes.
        """
        temp = item.dest if self.config.inplace else remote_temp_name(sftp, item.dest)
        batched = self.config.fsync and temp != item.dest and await self.remote_sync.usable()
        waits = batched or self.verifier is not None
        # In a directory this run made, nothing is there to replace (or keep the mode of).
        maybe_there = posixpath.dirname(item.dest) not in self.fresh_dirs
        try:
            landing = await put_small(
                sftp,
                item.dest,
                data,
                temp=temp,
                block=capped_write(self.block, len(data), sftp, item.dest),
                mode=self.mode_of(item),
                times=item.times if self.options.preserve else None,
                fsync=self.config.fsync and not batched,
                rename=not waits,
                keep_mode=not self.options.preserve and maybe_there,
                maybe_there=maybe_there,
                pacer=self.lease.pacer,
            )
        except ConnectionBroken:
            if temp != item.dest:
                self.stale_temps.append(temp)
            raise
        if not waits:
            return None
        if self.verifier is None:
            return _Sent(temp, landing, None, {}, batched)
        checks = self.verifier.plan()
        return _Sent(temp, landing, checks, digests_of_pieces([(0, [data])], checks.specs), batched)

    async def _commit_small(self, item: Item, sent: _Sent, sftp: SFTPSession) -> None:
        """Check, sync and rename a written file; repeated after a reconnect (see ``_Sent``)."""
        renamed_here = sent.temp != item.dest
        if sent.renaming and await check_landed(sftp, sent.temp, item.dest, sent.landing):
            return  # the rename went through before the connection did
        try:
            if self.verifier is not None and sent.checks is not None:
                await self.verifier.check(
                    sftp,
                    sent.temp,
                    sent.checks,
                    digests=sent.digests,
                    size=sent.landing.size,
                    read_back=partial(
                        read_back_small, sftp, sent.temp, sent.landing.size, self.block
                    ),
                    shown=item.dest,
                )
            directory = posixpath.dirname(sent.temp) or "."
            if sent.batched and not await self.remote_sync.sync(directory):
                await fsync_remote_file(sftp, sent.temp, item.dest)
            if renamed_here:
                sent.renaming = True
                await rename_into_place(sftp, sent.temp, item.dest, sent.landing)
        except ConnectionBroken:
            raise  # run again on the new connection: the temp file is still there
        except BaseException:
            if renamed_here:
                await remove_quietly(sftp, sent.temp)
            raise

    async def copy_big(self, item: Item) -> None:
        """A big file, in file order where the server needs it (``transfer.inorder``)."""
        caps = self.pool.server_caps
        self.big_config = in_order(self.big_config, caps)
        try:
            await super().copy_big(item)
        except RemoteError as exc:
            if not refused_out_of_order(exc, self.big_config):
                raise
            caps.sequential_writes = True
            self.big_config = in_order(self.big_config, caps)
            await super().copy_big(item)

    async def move_big(
        self,
        lease: Lease,
        item: Item,
        on_tail: Callable[[], None],
        tally: Tally,
    ) -> TransferStats:
        return await upload(
            lease,
            item.source,
            item.dest,
            self.big_config,
            into_directory=False,
            shared=self.big_bytes,
            on_tail=on_tail,
            tally=tally,
            remote_hash=self.remote_hash,
            keep_mode=not self.options.preserve,  # -p: ``big_done`` sets the source's
        )

    async def big_done(self, item: Item) -> None:
        if self.options.preserve:
            attrs = self.final_attrs(item)
            await self.on_channel(lambda sftp: sftp.set_attrs(item.dest, attrs))

    async def _copy_link(self, item: Item) -> None:
        """The link as a link; where the server makes none, skipped and said (rclone's
        sftp backend does the same: ``-L`` copies what each points to instead)."""
        caps = self.pool.server_caps
        if caps.symlinks_off:
            self.skip(item.source, NO_SYMLINKS)
            return
        try:
            target = os.readlink(item.source)
        except OSError as exc:
            raise local_error(item.source, exc) from exc
        try:
            await self.on_channel(partial(_make_link, target, item.dest))
        except RemoteError as exc:
            if not caps.refused_symlink(exc.status):
                raise
            if caps.adapt(SYMLINK_REFUSED):
                logger.warning("%s; %s", SYMLINK_REFUSED, exc)
            self.skip(item.source, NO_SYMLINKS)
            return
        self.account.symlinks += 1

    def final_attrs(self, item: Item) -> codec.Attrs:
        times = item.times if self.options.preserve else None
        return codec.Attrs(
            permissions=self.mode_of(item),
            atime=times[0] if times else None,
            mtime=times[1] if times else None,
        )

    def needs_finishing(self, folder: Folder) -> bool:
        mode = self.mode_of(folder.item)
        return self.options.preserve or (not folder.existed and mode | 0o700 != mode)

    async def finish_dirs(self, folders: list[Folder]) -> list[SSHPipeError | None]:
        """Directory modes and times after their contents, for those done meanwhile."""
        todo = [(folder.item, self.final_attrs(folder.item)) for folder in folders]
        return await self.on_channel(partial(_set_dir_attrs, todo))

    async def finish(self) -> None:
        """Temp files lost to a dropped connection go; with fsync, the renames are synced."""
        stale, self.stale_temps = self.stale_temps, []
        for temp in stale:  # what a drop left of them (if anything was made) goes now
            await self.on_channel(partial(_discard, temp))
        if self.remote_sync.used:  # and the renames themselves, as a download's directory fsync
            await self.on_channel(lambda _: self.remote_sync.sync_all())


async def _set_dir_attrs(
    todo: list[tuple[Item, codec.Attrs]], sftp: SFTPSession
) -> list[SSHPipeError | None]:
    """SETSTAT each directory, pipelined on one channel (served in order); an error or None each.

    None too where the server takes no SETSTAT (``SFTPSession.setstat_refused``).
    """
    if sftp.caps.setstat_off:
        return [None for _ in todo]
    pending = [
        (
            item,
            sftp.request(
                partial(
                    codec.encode_path_attrs_request,
                    codec.FXP_SETSTAT,
                    path=item.dest.encode(),
                    attrs=attrs,
                )
            ),
        )
        for item, attrs in todo
    ]
    errors: list[SSHPipeError | None] = []
    for item, future in pending:
        try:
            sftp.check_status(await future, item.dest)
            errors.append(None)
        except ConnectionBroken:
            for _, rest in pending:
                rest.add_done_callback(quiet)
            raise
        except RemoteError as exc:
            errors.append(None if sftp.setstat_refused(exc) else exc)
        except SSHPipeError as exc:
            errors.append(exc)
    return errors


async def _discard(temp: str, sftp: SFTPSession) -> None:
    await discard_temp(sftp.temps, [sftp], temp, at_once=False)


@dataclass(slots=True)
class _Sent:
    """A small upload written and closed under ``temp``, waiting for its check, sync, rename."""

    temp: str
    landing: Landing  # its size, and what its rename must show
    checks: VerifyPlan | None  # with --verify: the checks chosen as it was hashed
    digests: Digests  # and its hashes
    batched: bool  # durable by the next sync -f (else fsynced with its writes, if asked)
    renaming: bool = False  # the rename was sent: after a drop, a temp gone means it was done


async def fsync_remote_file(sftp: SFTPSession, path: str, shown: str) -> None:
    """fsync@openssh.com on a file already written and closed (if the server offers it)."""
    if not sftp.can_fsync:
        return
    handle = await sftp.open(path, codec.FXF_WRITE)
    try:
        await sftp.fsync(handle, shown)
    finally:
        await sftp.close_handle(handle, shown)


async def _make_link(target: str, path: str, sftp: SFTPSession) -> None:
    """A symlink at ``path``; something there already is replaced, never a directory."""
    try:
        await sftp.symlink(target, path)
    except RemoteError as exc:
        try:
            there = await sftp.lstat(path)
        except SSHPipeError:
            raise exc from None
        if there.is_dir():
            raise RemoteIsADirectory(path, "is a directory, not replaced by a symlink") from exc
        await sftp.remove(path)
        await sftp.symlink(target, path)


def _sent(
    *futures: asyncio.Future[codec.Reply] | None,
) -> tuple[asyncio.Future[codec.Reply], ...]:
    return tuple(future for future in futures if future is not None)


def _write(handle: bytes, offset: int, chunk: bytes, request_id: int) -> bytes:
    return codec.encode_write_header(request_id, handle, offset, len(chunk)) + chunk


async def put_small(
    sftp: SFTPSession,
    dest: str,
    data: bytes,
    *,
    temp: str,
    block: int,
    mode: int,
    times: tuple[int, int] | None,
    fsync: bool = True,
    rename: bool = True,
    keep_mode: bool = True,
    maybe_there: bool = True,
    pacer: Pacer | None = None,
) -> Landing:
    """Write ``data`` to ``temp`` (a new name beside ``dest``) and rename it into place.

    ``pacer``: the rate limit its WRITEs wait for, all together, once it is open.

    ``fsync``: the server fsyncs it (``fsync@openssh.com``, if offered) before
    the CLOSE. ``temp`` == ``dest`` writes ``dest`` in place, nothing renamed.
    ``rename`` False leaves the written temp file to the caller (removed on error).
    ``maybe_there``: a file may be at ``dest`` (a STAT goes with the OPEN: the
    rename must show it replaced); False in a directory this run made.
    ``keep_mode``: that file keeps its mode and owner
    (``remoteplace.keep_existing_mode``); False when ``-p`` sets the source's.

    Returns:
        What its rename must show (``remoteplace.Landing``; the caller's to
        rename with, unless ``rename``); in place, its size alone.

    Raises:
        RemoteError: naming ``dest`` (the temp name is ours, not the user's).
    """
    inplace = temp == dest
    if sftp.caps.setstat_off:
        times = None  # the server takes no FSETSTAT: the file lands without them
    flags = codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_TRUNC
    if not inplace:
        flags |= codec.FXF_EXCL
    existing = sftp.stat_request(dest) if (keep_mode or maybe_there) and not inplace else None
    if existing is not None:
        existing.add_done_callback(quiet)
    try:
        try:
            handle = await sftp.open(temp, flags, codec.Attrs(permissions=mode & 0o777))
        except RemoteError as exc:
            raise type(exc)(dest, exc.reason, status=exc.status) from exc
        replies: list[tuple[int | None, asyncio.Future[codec.Reply]]] = []
        attrs_set: list[asyncio.Future[codec.Reply]] = []  # FSETSTATs: a refusal is learned
        replaced: codec.Attrs | None = None
        if existing is not None:
            try:
                replaced = await replaced_by(existing)  # on a server in order: answered
                kept = (
                    await keep_existing_mode(sftp, handle, existing, mode & 0o777)
                    if keep_mode
                    else None
                )
            except BaseException:  # cancelled: the handle is ours to close, its answer nobody's
                sftp.close_handle_soon(handle, temp)
                sftp.settle_later(existing)
                raise
            if kept is not None:
                replies.append((None, kept))
                attrs_set.append(kept)
        if pacer is not None:
            try:
                await pacer.acquire(len(data))
            except BaseException:  # cancelled: as above
                sftp.close_handle_soon(handle, temp)
                sftp.settle_later(*(future for _, future in replies), *_sent(existing))
                raise
        replies += [
            (offset, sftp.request(partial(_write, handle, offset, data[offset : offset + block])))
            for offset in range(0, len(data), block)
        ]
        restore: codec.Attrs | None = None
        if times is not None:  # -p: after the writes, so the mtime stays
            atime, mtime = times
            if (
                replaced is not None
                and replaced.kind == "file"
                and replaced.size == len(data)
                and replaced.mtime == mtime
            ):
                # Alike to the second (a re-upload of the same source): given a mark
                # instead, which its rename must show, and its own mtime back after.
                restore, mtime = codec.Attrs(atime=atime, mtime=mtime), mtime ^ 1
            attrs = codec.Attrs(permissions=mode, atime=atime, mtime=mtime)
            attrs_set.append(
                sftp.request(
                    partial(
                        codec.encode_handle_attrs_request,
                        codec.FXP_FSETSTAT,
                        handle=handle,
                        attrs=attrs,
                    )
                )
            )
            replies.append((None, attrs_set[-1]))
        if fsync and sftp.can_fsync:  # after the writes, before the CLOSE: in order
            replies.append((None, sftp.fsync_request(handle)))
        # The file as written, to tell it from a file of its size there after the
        # rename: asked before the CLOSE, on its handle (in order). With -p its
        # mtime is known: it was just set.
        stated = None
        if times is None and may_be_alike(existing, len(data)):
            stated = sftp.request(
                partial(codec.encode_handle_request, codec.FXP_FSTAT, handle=handle)
            )
            stated.add_done_callback(quiet)
        replies.append(
            (
                None,
                sftp.request(partial(codec.encode_handle_request, codec.FXP_CLOSE, handle=handle)),
            )
        )
        failure: SSHPipeError | None = None
        set_here = True  # False: the server refused an FSETSTAT (learned, said once)
        try:
            for offset, future in replies:
                try:
                    reply = await future
                    if future in attrs_set:
                        set_here = attrs_taken(sftp, reply, dest) and set_here
                    else:
                        sftp.check_status(reply, dest, offset, write=offset is not None)
                except SSHPipeError as exc:
                    failure = failure or exc  # wait for the rest: the CLOSE must be answered
        except asyncio.CancelledError:
            # Not waited for: the WRITEs' answers and the CLOSE's come to the pool.
            sftp.settle_later(*(future for _, future in replies), *_sent(stated, existing))
            raise
        if failure is not None:
            raise failure
        if inplace:
            return Landing(len(data))  # nothing to rename: its size, for --verify
        stat = await stated if stated is not None else None  # answered before the CLOSE
        written = stat.attrs if isinstance(stat, codec.AttrsReply) else None
        if times is not None and set_here:  # what is sure of it: no other mtime is it
            written = codec.Attrs(size=len(data), mtime=mtime)
        elif not set_here:
            restore = None  # not marked: the rename's proof rests on the temp name gone
        landing = Landing(len(data), replaced, written, restore)
        if rename:
            await rename_into_place(sftp, temp, dest, landing)
        return landing
    except BaseException as exc:
        if not inplace:  # cancelled, it leaves at once: the pool settles the REMOVE
            await discard_temp(sftp.temps, [sftp], temp, at_once=cancelled(exc))
        raise
