"""Downloading trees: list remote directories, copy files through the pipeline.

A small file costs two round trips: OPEN, then every READ (and a 1-byte
probe past the listed size, to see EOF) together with the CLOSE, which
filexfer-02 §6.1 has the server process after the reads on that handle.
Listings stream into the pipeline as they arrive (a directory of a million
entries is never held whole). Every name passes ``_untrusted.ListingCheck``
before it names anything local, and everything local is reached through
directory descriptors (``_localdir``): no symlink under the destination is
ever followed, whoever made it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import posixpath
import stat
from functools import partial
from typing import Any

from .._config import TransferConfig
from .._errors import LocalError, RemoteError, RemoteIsADirectory, SSHPipeError, UnsafePath
from .._stats import TransferStats
from ..core import codec
from ..core.readplan import EOF, Range, ReadPlan, classify_read
from ..core.treeplan import landings
from ..core.untrusted import ListingCheck, check_link_target, is_temporary_name, safe_mode
from ..local.dirfd import DirRoot, LocalDir, LocalFile, local_error, lstat, make_dir, make_link, remove, replace, set_dir_attrs, sync_dir, temp_name
from ..local.target import Batch, run_blocking, write_whole_file
from ..transfer.download import download
from ..transport.pool import Lease
from ..transport.remotefs import read_dir
from ..transport.sftp import SFTPSession, quiet, settle, status_error
from .groupcommit import GroupCommit
from .run import Item, TreeRun
from .verify import sha256_of

logger = logging.getLogger("sshpipe.tree")

SPECIAL = "a special file (only files, directories and symlinks are copied)"


class TreeGet(TreeRun):
    """Copies remote ``sources`` to the local ``dest`` (scp's layout rules)."""

    # -- finding the work --------------------------------------------------------

    # The directory everything lands under, held open: the destination the user
    # named when it is a directory, else the directory it is to be made in.
    root: DirRoot | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.committer = GroupCommit()  # with fsync: small files made durable by the batch

    async def close(self) -> None:
        try:
            await self.committer.close()
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

    async def scan_roots(self) -> None:
        dest_is_dir = os.path.isdir(self.dest)
        if self.journal is not None:  # resuming: where the first run put it
            dest_is_dir = self.journal.landing(dest_is_dir)
        if len(self.sources) > 1 and not dest_is_dir:
            raise LocalError(self.dest, "is not a directory (several sources need one)")
        placed = landings(self.sources, self.dest, dest_is_dir=dest_is_dir, join=os.path.join)
        # The user's own path: a symlink to a directory is followed there, and
        # nowhere below it.
        parent, name = os.path.split(self.dest.rstrip(os.sep) or os.sep)
        self.root = DirRoot(self.dest if dest_is_dir else parent or os.curdir)
        for source, dest in placed:
            if not dest_is_dir:
                local: LocalFile | None = self.root.top.file(name)
            elif dest == self.dest:
                local = None  # "host:." or "/": the contents go into dest itself
            else:
                local = self.root.top.file(os.path.basename(dest))
            try:
                # A named source is followed, as scp does.
                attrs = await self.on_channel(partial(SFTPSession.stat, path=source))
            except SSHPipeError as exc:
                self.refuse(exc, source)
                continue
            await self.found(Item(source, dest, attrs, attrs.kind, local=local))

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
            self.skip(item.source, SPECIAL)

    async def _follow(self, item: Item) -> None:
        attrs = await self.on_channel(lambda sftp: sftp.stat(item.source))
        if attrs.kind == "symlink":  # a server that does not follow links
            raise RemoteError(item.source, "symlink could not be followed")
        await self.found(dataclasses.replace(item, attrs=attrs, kind=attrs.kind))

    async def scan_dir(self, item: Item) -> None:
        if self.options.follow_symlinks:
            real = await self.on_channel(lambda sftp: sftp.realpath(item.source))
            if real in item.ancestors:
                self.skip(item.source, f"symlink loop: {real} is a directory above it")
                return
            item = dataclasses.replace(item, ancestors=(*item.ancestors, real))
        existed = True if item.local is None else make_dir(item.local.dir, item.local.name)
        self.made_dirs.append((item, existed))
        self.account.directories += 1
        here = self.directory(item)
        check = ListingCheck(item.source)

        async def listing(sftp: SFTPSession) -> None:
            check.again()  # a reconnect lists it from the start: what was seen is skipped
            async with contextlib.aclosing(read_dir(sftp, item.source)) as batches:
                async for batch in batches:
                    for name, attrs in batch:
                        await self._entry(item, here, check, name, attrs)

        await self.on_channel(listing)

    async def _entry(
        self, item: Item, here: LocalDir, check: ListingCheck, name: str, attrs: codec.Attrs
    ) -> None:
        """One name of a listing: refused, left out, or found (queued to be copied)."""
        try:
            if not check.accept(name):
                return
        except UnsafePath as exc:
            if exc.listing_refused is not None:
                raise  # the rest of this listing is not read
            self.refuse(exc, f"{item.source}/{name!r}")
            return
        source = posixpath.join(item.source, name)
        if is_temporary_name(name):  # a name sshpipe writes itself beside the files it copies
            self.skip(source, "an sshpipe temporary or resume file")
            return
        child = item.child(
            source, os.path.join(item.dest, name), attrs, attrs.kind, here.file(name)
        )
        await self.found(child)

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
                        lambda sftp: fetch_small(sftp, item.source, size, self.block)
                    )
                if fetched is not None:
                    pieces, final_size = fetched
                    digest = sha256_of(pieces) if self.verifier is not None else ""
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
            if fetched is not None and self.verifier is not None:
                await self.on_channel(partial(self._check, item, digest, final_size))
        except BaseException:
            if temp is not None:  # written, maybe, but never handed to the committer
                with contextlib.suppress(OSError):
                    remove(temp)
            raise
        if fetched is None:
            await self.copy_big(item)  # it grew since it was listed (or read short)
            return
        if grouped and temp is not None:
            # Outside the credits: a file waiting for the disk holds no memory. From
            # here the committer owns the temp file (it syncs and renames, or removes it).
            await self.committer.commit(temp, local)
        elif temp is not None:
            await self.local(rename_into_place, temp, local)
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
        assert item.local is not None
        mode = self.mode_of(item)
        with self.tracking() as moved:
            async with self.big_turn() as end_turn, self.big_lease() as lease:
                stats = await download(
                    lease,
                    item.source,
                    item.local,
                    self.big_config,
                    into_directory=False,
                    new_file_mode=mode & 0o777,
                    shared=self.big_bytes,
                    on_tail=end_turn,
                    known=item.attrs,
                    on_progress=moved,
                    remote_hash=self.verifier.remote_sha256 if self.verifier else None,
                    attrs=(mode, item.times) if self.options.preserve else None,
                )
            if self.verifier is not None:
                self.verifier.passed(stats.verified)
            self.account.file_done(stats.bytes, reported=moved.total)

    async def _copy_link(self, item: Item) -> None:
        assert item.local is not None
        target = await self.on_channel(lambda sftp: sftp.readlink(item.source))
        check_link_target(target, item.source)  # copied verbatim, but a symlink must hold it
        await self.local(make_link, item.local, target)
        self.account.symlinks += 1

    async def finish(self) -> None:
        """Directory modes and times, deepest first: after everything inside them.

        With fsync, each directory is synced once here: the renames of every
        file in it become durable together (one fsync per directory, not per
        file). In a worker thread: a thousand fsyncs would stall the loop.
        """
        for item, error in await run_blocking(self._finish_dirs):
            self.failed(item, error)

    def _finish_dirs(self) -> list[tuple[Item, LocalError]]:
        assert self.root is not None
        umask = current_umask()
        failures: list[tuple[Item, LocalError]] = []
        if self.config.fsync:  # where the top-level files and directories were renamed or made
            with contextlib.suppress(OSError):
                sync_dir(self.root.top)
        for item, existed in reversed(self.made_dirs):
            directory = self.directory(item)
            mode = self.mode_of(item)
            try:
                if self.options.preserve:
                    set_dir_attrs(directory, mode, item.times)
                elif not existed:
                    set_dir_attrs(directory, mode & ~umask, None)
                if self.config.fsync:
                    sync_dir(directory)
            except LocalError as exc:
                failures.append((item, exc))
            except OSError as exc:
                failures.append((item, local_error(item.dest, exc)))
        return failures


async def download_preserving(
    lease: Lease, remote: str, local: str, config: TransferConfig
) -> TransferStats:
    """One file with ``-p``: the single-file engine, the remote mode and times set before
    the rename (no setuid or setgid bit: ``safe_mode``)."""
    attrs = await lease.channels[0].stat(remote)
    if attrs.is_dir():
        raise RemoteIsADirectory(remote, "is a directory (use -r)")
    mode = safe_mode(attrs.permissions if attrs.permissions is not None else 0o644, directory=False)
    times = Item(remote, local, attrs, "file").times
    return await download(lease, remote, local, config, known=attrs, attrs=(mode, times))


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
        outcome = classify_read(path, rng, reply)
        if isinstance(outcome, codec.Data):
            plan.on_data(rng, outcome.length)
            pieces.append((rng.offset, outcome.chunks))
        elif outcome is EOF:
            plan.on_eof(rng)
        else:
            plan.on_retry(rng)
            if not failure:
                if isinstance(outcome, codec.Status):
                    outcome = status_error(outcome, path, rng.offset)
                failure.append(outcome)
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


def rename_into_place(temp: LocalFile, final: LocalFile) -> None:
    try:
        replace(temp, final)
    except OSError as exc:
        with contextlib.suppress(OSError):
            remove(temp)
        raise local_error(final, exc) from exc


def sftp_future() -> asyncio.Future[None]:
    return asyncio.get_running_loop().create_future()


def current_umask() -> int:
    """The process umask, read without changing it (other threads may be creating files)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)  # no /proc: the classic read-and-restore
    os.umask(mask)
    return mask
