"""Downloading trees: list remote directories, copy files through the pipeline.

A small file costs two round trips: OPEN, then every READ (and a 1-byte
probe past the listed size, to see EOF) together with the CLOSE, which
filexfer-02 §6.1 has the server process after the reads on that handle.
Every local name is checked (``_treeplan.ListingCheck``) before it is joined
to the destination, and a directory is never entered through a symlink.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import stat
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from . import _codec as codec
from ._config import TransferConfig
from ._download import download
from ._errors import LocalError, RemoteError, RemoteIsADirectory, SSHPipeError, UnsafePath
from ._groupcommit import GroupCommit
from ._lanes import LanePool
from ._localio import Batch, fsync_directory, local_error, temp_name, write_whole_file
from ._readplan import Range, ReadPlan
from ._remotefs import list_dir
from ._sftp import SFTPSession, quiet, settle, status_error
from ._stats import TransferStats
from ._tree import Item, TreeRun
from ._treeplan import ListingCheck, landing
from ._treeverify import sha256_of


class TreeGet(TreeRun):
    """Copies remote ``sources`` to the local ``dest`` (scp's layout rules)."""

    # -- finding the work --------------------------------------------------------

    # Destinations the user named: a symlink to a directory is fine there, it is theirs.
    _roots: set[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.committer = GroupCommit()  # with fsync: small files made durable by the batch

    async def close(self) -> None:
        await self.committer.close()
        await super().close()

    async def dest_size(self, item: Item) -> int | None:
        try:
            info = os.lstat(item.dest)
        except OSError:
            return None
        return info.st_size if stat.S_ISREG(info.st_mode) else None

    async def scan_roots(self) -> None:
        self._roots = set()
        dest_is_dir = os.path.isdir(self.dest)
        if self.journal is not None:  # resuming: where the first run put it
            dest_is_dir = self.journal.landing(dest_is_dir)
        if len(self.sources) > 1 and not dest_is_dir:
            raise LocalError(self.dest, "is not a directory (several sources need one)")
        for source in self.sources:
            dest = landing(source, self.dest, dest_is_dir=dest_is_dir, join=os.path.join)
            self._roots.add(dest)
            try:
                # A named source is followed, as scp does.
                attrs = await self.on_channel(partial(SFTPSession.stat, path=source))
            except SSHPipeError as exc:
                self.refuse(exc, source)
                continue
            await self.found(Item(source, dest, attrs, attrs.kind))

    async def found(self, item: Item) -> None:
        if item.kind == "file":
            await self.queue_file(item)
        elif item.kind == "dir":
            if not self.options.recursive:
                self.refuse(RemoteIsADirectory(item.source, "is a directory (use -r)"), item.source)
            else:
                self.queue_dir(item)
        elif item.kind == "symlink" and self.options.follow_symlinks:
            await self.guarded(self._follow(item), item)
        elif item.kind == "symlink":
            await self.small.put(item)
        else:
            self.skip(item.source, "special file")

    async def _follow(self, item: Item) -> None:
        attrs = await self.on_channel(lambda sftp: sftp.stat(item.source))
        if attrs.kind == "symlink":  # a server that does not follow links
            raise RemoteError(item.source, "symlink could not be followed")
        await self.found(item.child(item.source, item.dest, attrs, attrs.kind))

    async def scan_dir(self, item: Item) -> None:
        if self.options.follow_symlinks:
            real = await self.on_channel(lambda sftp: sftp.realpath(item.source))
            if real in item.ancestors:
                self.skip(item.source, f"symlink loop: {real} is a directory above it")
                return
            item = replace(item, ancestors=(*item.ancestors, real))
        existed = make_local_dir(item.dest, follow=item.dest in self._roots)
        self.made_dirs.append((item, existed))
        self.account.directories += 1
        source = item.source
        entries = await self.on_channel(lambda sftp: list_dir(sftp, source))
        check = ListingCheck(item.source)
        for name, attrs in entries:
            try:
                if not check.accept(name):
                    continue
            except UnsafePath as exc:
                self.refuse(exc, f"{item.source}/{name!r}")
                continue
            child = item.child(
                posixpath.join(item.source, name), os.path.join(item.dest, name), attrs, attrs.kind
            )
            await self.found(child)

    # -- copying ---------------------------------------------------------------

    async def copy_small(self, item: Item) -> None:
        if item.kind == "symlink":
            await self._copy_link(item)
            return
        size = item.size
        # With fsync a file is made durable with the others written meanwhile
        # (GroupCommit), then renamed; with --verify it is renamed once checked.
        # In place there is no later rename to wait for.
        grouped = self.config.fsync and not self.config.inplace
        deferred = (grouped or self.verifier is not None) and not self.config.inplace
        temp = temp_name(item.dest) if deferred else None
        try:
            # -R counts READs of data, as for one file: the 1-byte probe is not one.
            async with self.credits.hold(max(1, -(-size // self.block)), size + 1):
                async with self.handles:
                    fetched = await self.on_channel(
                        lambda sftp: fetch_small(sftp, item.source, size, self.block)
                    )
                if fetched is not None:
                    pieces, final_size = fetched
                    digest = sha256_of(pieces) if self.verifier is not None else ""
                    await self.local(
                        write_whole_file,
                        item.dest,
                        pieces,
                        mode=self.mode_of(item),
                        exact_mode=self.options.preserve,
                        times=item.times if self.options.preserve else None,
                        fsync=self.config.fsync and not grouped,
                        inplace=self.config.inplace,
                        leave_as=temp,
                        syncs=self.config.fsync and not grouped,
                    )
            if fetched is not None and self.verifier is not None:
                await self.on_channel(partial(self._check, item, digest, final_size))
        except BaseException:
            if temp is not None:  # written, maybe, but never handed to the committer
                with contextlib.suppress(OSError):
                    temp.unlink()
            raise
        if fetched is None:
            await self.copy_big(item)  # it grew since it was listed (or read short)
            return
        if grouped and temp is not None:
            # Outside the credits: a file waiting for the disk holds no memory. From
            # here the committer owns the temp file (it syncs and renames, or removes it).
            await self.committer.commit(temp, item.dest)
        elif temp is not None:
            await self.local(rename_local, temp, item.dest)
        self.account.file_done(final_size)

    async def _check(self, item: Item, digest: str, size: int, sftp: SFTPSession) -> None:
        """--verify of a small file read whole (its digest), against the server's copy."""
        assert self.verifier is not None
        await self.verifier.check(
            item.source,
            digest=digest,
            size=size,
            remote_size=partial(size_of, sftp, item.source),
            read_back=partial(read_back_small, sftp, item.source, size, self.block),
            shown=item.source,
        )

    async def copy_big(self, item: Item) -> None:
        with self.tracking() as moved:
            async with self.big_turn() as end_turn, self.big_lease() as lease:
                stats = await download(
                    lease,
                    item.source,
                    item.dest,
                    self.big_config,
                    into_directory=False,
                    new_file_mode=self.mode_of(item) & 0o777,
                    shared=self.big_bytes,
                    on_tail=end_turn,
                    known=item.attrs,
                    on_progress=moved,
                    remote_hash=self.verifier.remote_sha256 if self.verifier else None,
                )
            if self.verifier is not None:
                self.verifier.passed(stats.verified)
            if self.options.preserve:
                await self.local(set_local_attrs, item.dest, self.mode_of(item), item.times)
            self.account.file_done(stats.bytes, reported=moved.total)

    async def _copy_link(self, item: Item) -> None:
        target = await self.on_channel(lambda sftp: sftp.readlink(item.source))
        await self.local(make_local_link, item.dest, target)
        self.account.symlinks += 1

    async def finish(self) -> None:
        """Directory modes and times, deepest first: after everything inside them.

        With fsync, each directory is synced once here: the renames of every
        file in it become durable together (one fsync per directory, not per file).
        """
        umask = current_umask()
        if self.config.fsync:  # where the top-level files and directories were renamed or made
            for parent in {os.path.dirname(os.path.abspath(root)) for root in self._roots}:
                with contextlib.suppress(OSError):
                    fsync_directory(parent)
        for item, existed in reversed(self.made_dirs):
            mode = self.mode_of(item)
            try:
                if self.options.preserve:
                    set_local_attrs(item.dest, mode, item.times)
                elif not existed:
                    os.chmod(item.dest, mode & ~umask)
                if self.config.fsync:
                    fsync_directory(item.dest)
            except LocalError as exc:
                self.failed(item, exc)
            except OSError as exc:
                self.failed(item, local_error(item.dest, exc))


async def download_preserving(
    lanes: LanePool, remote: str, local: str, config: TransferConfig
) -> TransferStats:
    """One file with ``-p``: the single-file engine, then the remote mode and times."""
    attrs = await lanes.channels[0].stat(remote)
    if attrs.is_dir():
        raise RemoteIsADirectory(remote, "is a directory (use -r)")
    if os.path.isdir(local):  # scp: into a directory keeps the remote name
        local = os.path.join(local, posixpath.basename(remote.rstrip("/")))
    stats = await download(lanes, remote, local, config, into_directory=False, known=attrs)
    mode = attrs.permissions if attrs.permissions is not None else 0o644
    set_local_attrs(local, mode & 0o7777, Item(remote, local, attrs, "file").times)
    return stats


async def fetch_small(
    sftp: SFTPSession, path: str, size: int, block: int
) -> tuple[Batch, int] | None:
    """A small remote file's bytes, in one round trip after the OPEN.

    Returns:
        (pieces, size), or None when the file grew past ``size`` or a read came
        back short (the handle is closed by then: the caller starts over).
    """
    handle = await sftp.open(path, codec.FXF_READ)
    plan = ReadPlan(block_size=block, size_hint=size, probe_length=1)
    done = sftp_future()
    pieces: Batch = []
    failure: list[BaseException] = []

    def on_reply(rng: Range, reply: codec.Reply | BaseException) -> None:
        if isinstance(reply, codec.Data) and 0 < reply.length <= rng.length:
            plan.on_data(rng, reply.length)
            pieces.append((rng.offset, reply.chunks))
        elif isinstance(reply, codec.Status) and reply.code == codec.FX_EOF:
            plan.on_eof(rng)
        else:
            plan.on_retry(rng)
            if not failure:
                failure.append(
                    reply
                    if isinstance(reply, BaseException)
                    else status_error(reply, path, rng.offset)
                    if isinstance(reply, codec.Status)
                    else SSHPipeError(f"remote: {path}: bad reply to a read")
                )
        if plan.outstanding == 0 and not done.done():
            done.set_result(None)

    while (rng := plan.next_range()) is not None:
        try:
            sftp.send_read(handle, rng.offset, rng.length, partial(on_reply, rng))
        except BaseException as exc:  # the channel broke: the reply will never come
            on_reply(rng, exc)
            break
    closing = sftp.request(lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, handle))
    try:
        await done
    except asyncio.CancelledError:
        await settle(closing)  # the server answers the READs before it: nothing left behind
        raise
    if failure:
        closing.add_done_callback(quiet)
        raise failure[0]
    sftp.check_status(await closing, path)
    if plan.max_received_end > size or not plan.done:
        return None
    return pieces, plan.final_size


async def size_of(sftp: SFTPSession, path: str) -> int | None:
    return (await sftp.stat(path)).size


async def read_back_small(sftp: SFTPSession, path: str, size: int, block: int) -> str:
    """SHA-256 of a small remote file read again (a file that grew no longer matches)."""
    fetched = await fetch_small(sftp, path, size, block)
    return sha256_of(fetched[0]) if fetched is not None else "(a file larger than copied)"


def rename_local(temp: Path, path: str) -> None:
    try:
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise local_error(path, exc) from exc


def sftp_future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


def make_local_dir(path: str, *, follow: bool = False) -> bool:
    """Create ``path`` (private until its mode is set at the end); True if it existed.

    An existing symlink is refused (entering it could write outside the
    destination) unless ``follow``: the destination the user named.
    """
    try:
        os.mkdir(path, 0o700)
        return False
    except FileExistsError:
        pass
    except OSError as exc:
        raise local_error(path, exc) from exc
    info = os.stat(path) if follow else os.lstat(path)
    if stat.S_ISDIR(info.st_mode):
        return True
    kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a directory"
    raise LocalError(path, f"exists and is {kind}; a directory was expected")


def make_local_link(path: str, target: str) -> None:
    """Make ``path`` a symlink to ``target``, replacing a file or link there atomically."""
    temp = str(temp_name(path))
    try:
        os.symlink(target, temp)
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise local_error(path, exc) from exc


def set_local_attrs(path: str, mode: int, times: tuple[int, int] | None) -> None:
    try:
        os.chmod(path, mode)
        if times is not None:
            os.utime(path, times)
    except OSError as exc:
        raise local_error(path, exc) from exc


def current_umask() -> int:
    """The process umask, read without changing it (other threads may be creating files)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # no /proc: the classic read-and-restore
    os.umask(mask)
    return mask
