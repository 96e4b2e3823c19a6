"""Downloading trees: what a download does where the bytes land, on the local side.

The scanner (``scan``) lists the remote directories; here each directory is
made, each small file written whole, each symlink made, and each directory's
mode, times and sync are set once all in it is done. A small file costs two round trips
(``smallread.fetch_small``). Every listed name has passed the scanner's name
gate before it names anything local, and everything local is reached through
directory descriptors (``local.dirfd``): no symlink under the destination is
ever followed, whoever made it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Callable
from functools import partial
from typing import Any

from ..core.checkfile import VerifyPlan
from ..core.config import TransferConfig
from ..core.errors import LocalError, RemoteIsADirectory, SSHPipeError
from ..core.stats import TransferStats
from ..core.untrusted import check_link_target, others_may_write, safe_mode
from ..durability import ledger
from ..local.dirfd import (
    DirRoot,
    LocalDir,
    LocalFile,
    local_error,
    lstat,
    make_dir,
    make_link,
    remove,
    replace,
    set_dir_attrs,
    sync_dir,
    temp_name,
)
from ..local.target import run_blocking, write_whole_file
from ..transfer.download import download
from ..transfer.progress import Tally
from ..transfer.verify import Digests
from ..transport.pool import Lease
from ..transport.remotefs import stat_by_name
from ..transport.sftp import SFTPSession
from .groupcommit import GroupCommit
from .item import Folder, Item
from .run import TreeRun
from .scan import RemoteSide
from .smallread import fetch_small, read_back_small
from .verify import digests_of_pieces

logger = logging.getLogger("sshpipe.tree")


class TreeGet(TreeRun):
    """Copies remote ``sources`` to the local ``dest`` (scp's layout rules)."""

    dest_error = LocalError
    # The directory everything lands under, held open: the destination the user
    # named when it is a directory, else the directory it is to be made in.
    root: DirRoot | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.committer = GroupCommit()  # with fsync: small files made durable by the batch
        # -p: a server's write bit for others only where the user's umask keeps one.
        self.others_write = others_may_write(current_umask())

    def services(self) -> list[contextlib.AbstractAsyncContextManager[None]]:
        return [*super().services(), self.committer.running()]

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            if self.root is not None:
                self.root.close()

    async def dest_size(self, item: Item) -> int | None:
        info = lstat(item.local) if item.local is not None else None
        return info.st_size if info is not None and stat.S_ISREG(info.st_mode) else None

    def directory(self, item: Item) -> LocalDir:
        """The local directory a directory entry is copied into."""
        assert self.root is not None
        if item.local is None:
            return self.root.top
        return item.local.dir.child(item.local.name)

    # -- where things land ---------------------------------------------------------

    def source_side(self) -> RemoteSide:
        return RemoteSide(self.on_channel)

    def join_dest(self, directory: str, name: str) -> str:
        return os.path.join(directory, name)

    async def dest_is_dir(self) -> bool:
        return os.path.isdir(self.dest)

    def place_root(self, dest: str, dest_is_dir: bool) -> LocalFile | None:
        # The user's own path: a symlink to a directory is followed there, and
        # nowhere below it.
        if self.root is None:
            parent = os.path.dirname(self.dest.rstrip(os.sep) or os.sep)
            self.root = DirRoot(
                self.dest if dest_is_dir else parent or os.curdir, temps=ledger.local_temps()
            )
        if not dest_is_dir:
            return self.root.top.file(os.path.basename(self.dest.rstrip(os.sep) or os.sep))
        if dest == self.dest:
            return None  # "host:." or "/": the contents go into dest itself
        return self.root.top.file(os.path.basename(dest))

    async def make_dir(self, item: Item) -> bool:
        if item.local is None:
            return True
        existed = make_dir(item.local.dir, item.local.name)
        if existed and self.journal is not None and self.journal.earlier:
            # Resumed: what a killed run was writing here left its temp files.
            await self.local(ledger.sweep_local_dir, item.local.dir.child(item.local.name))
        return existed

    def local_dir(self, item: Item) -> LocalDir:
        return self.directory(item)

    # -- copying ---------------------------------------------------------------

    async def copy_small(self, item: Item) -> None:
        if item.kind == "symlink":
            await self._copy_link(item)
            return
        local = item.local
        assert local is not None  # only a directory can be the root itself
        size = item.size
        # With fsync a file is made durable with the others written meanwhile
        # (GroupCommit), then renamed; with --verify it is renamed once checked.
        # In place there is no later rename to wait for.
        grouped = self.config.fsync and not self.config.inplace
        deferred = (grouped or self.verifier is not None) and not self.config.inplace
        temp = local.sibling(temp_name(local.name)) if deferred else None
        try:
            # -R counts READs of data, as for one file: the 1-byte probe is not one.
            async with self.credits.hold(max(1, -(-size // self.block)), size + 1):
                async with self.handles:
                    fetched = await self.on_channel(
                        lambda sftp: fetch_small(
                            sftp, item.source, size, self.block, pacer=self.lease.pacer
                        )
                    )
                final_size = None if fetched is None else fetched[1]
                if fetched is not None:
                    pieces = fetched[0]
                    if self.verifier is not None:
                        checks = self.verifier.plan()
                        digests = digests_of_pieces(pieces, checks.specs)
                    await self.local(
                        write_whole_file,
                        local,
                        pieces,
                        mode=self.mode_of(item),
                        exact_mode=self.options.preserve,
                        times=item.times if self.options.preserve else None,
                        fsync=self.config.fsync and not grouped,
                        inplace=self.config.inplace,
                        leave_as=temp,
                        syncs=self.config.fsync and not grouped,
                    )
                    # Written: its bytes leave the credits here and must leave memory
                    # with them, not wait for the check and the batch's sync (200
                    # files of 1 MiB grew a 16 MiB tree by 106 MiB when they did).
                    del pieces
                del fetched
            if final_size is not None and self.verifier is not None:
                await self.on_channel(partial(self._check, item, checks, digests, final_size))
        except BaseException:
            if temp is not None:  # written, maybe, but never handed to the committer
                with contextlib.suppress(OSError):
                    remove(temp)
            raise
        if final_size is None:
            await self.copy_big(item)  # it grew since it was listed (or read short)
            return
        if grouped and temp is not None:
            # Outside the credits: a file waiting for the disk holds no memory. From
            # here the committer owns the temp file (it syncs and renames, or removes it).
            await self.committer.commit(temp, local)
        elif temp is not None:
            await self.local(rename_into_place, temp, local)
        self.account.file_done(final_size, listed=item.size)

    async def _check(
        self, item: Item, checks: VerifyPlan, digests: Digests, size: int, sftp: SFTPSession
    ) -> None:
        """--verify of a small file read whole (its hashes), against the server's copy."""
        assert self.verifier is not None
        await self.verifier.check(
            sftp,
            item.source,
            checks,
            digests=digests,
            size=size,
            read_back=partial(read_back_small, sftp, item.source, size, self.block),
            shown=item.source,
            # A read-once file may be gone after its read: the size its listing stated.
            stated_size=item.size if sftp.caps.quirks.read_once else None,
        )

    async def move_big(
        self,
        lease: Lease,
        item: Item,
        on_tail: Callable[[], None],
        tally: Tally,
    ) -> TransferStats:
        assert item.local is not None
        mode = self.mode_of(item)
        return await download(
            lease,
            item.source,
            item.local,
            self.big_config,
            into_directory=False,
            new_file_mode=mode & 0o777,
            shared=self.big_bytes,
            on_tail=on_tail,
            known=item.attrs,
            tally=tally,
            remote_hash=self.remote_hash,
            attrs=(mode, item.times) if self.options.preserve else None,
        )

    async def big_done(self, item: Item) -> None:
        """Nothing: ``download`` set its mode and times before the rename."""

    async def _copy_link(self, item: Item) -> None:
        assert item.local is not None
        target = await self.on_channel(lambda sftp: sftp.readlink(item.source))
        check_link_target(target, item.source)  # copied verbatim, but a symlink must hold it
        await self.local(make_link, item.local, target)
        self.account.symlinks += 1

    def needs_finishing(self, folder: Folder) -> bool:
        return self.options.preserve or not folder.existed or self.config.fsync

    async def finish_dirs(self, folders: list[Folder]) -> list[SSHPipeError | None]:
        """Directory modes and times, after everything inside them.

        With fsync, each directory is synced once here: the renames of every
        file in it become durable together (one fsync per directory, not per
        file). In a worker thread, for the directories done meanwhile: a
        thousand fsyncs would stall the loop.
        """
        return await run_blocking(self._finish_dirs, folders)

    def _finish_dirs(self, folders: list[Folder]) -> list[SSHPipeError | None]:
        umask = current_umask()
        errors: list[SSHPipeError | None] = []
        for folder in folders:
            item = folder.item
            directory = self.directory(item)
            mode = self.mode_of(item)
            try:
                if self.options.preserve:
                    set_dir_attrs(directory, mode, item.times)
                elif not folder.existed:
                    set_dir_attrs(directory, mode & ~umask, None)
                if self.config.fsync:
                    sync_dir(directory)
                errors.append(None)
            except LocalError as exc:
                errors.append(exc)
            except OSError as exc:
                errors.append(local_error(item.dest, exc))
        return errors

    async def finish(self) -> None:
        """With fsync, the destination itself: where the sources were renamed or made."""
        if self.config.fsync and self.root is not None:
            with contextlib.suppress(OSError):
                await run_blocking(sync_dir, self.root.top)


async def download_preserving(
    lease: Lease, remote: str, local: str, config: TransferConfig, tally: Tally | None = None
) -> TransferStats:
    """One file with ``-p``: the single-file engine, the remote mode and times set before
    the rename (no setuid or setgid bit, no write for others unless the umask keeps
    one: ``safe_mode``)."""
    attrs = await stat_by_name(lease.channels[0], remote)
    if attrs.is_dir():
        raise RemoteIsADirectory(remote, "is a directory (use -r)")
    permissions = attrs.permissions if attrs.permissions is not None else 0o644
    others_write = others_may_write(current_umask())
    mode = safe_mode(permissions, directory=False, others_write=others_write)
    times = Item(remote, local, attrs, "file").times
    return await download(
        lease, remote, local, config, known=attrs, attrs=(mode, times), tally=tally
    )


def rename_into_place(temp: LocalFile, final: LocalFile) -> None:
    try:
        replace(temp, final)
    except OSError as exc:
        with contextlib.suppress(OSError):
            remove(temp)
        raise local_error(final, exc) from exc


def current_umask() -> int:
    """The process umask, read without changing it (other threads may be creating files)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # no /proc: the classic read-and-restore
    os.umask(mask)
    return mask
