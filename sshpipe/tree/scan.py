"""Finding a tree's work, the same for both directions: roots, directories, entries.

The scanner reads the source side through a ``Side``: ``RemoteSide``, the
server's listings and stats over SFTP (get), or ``LocalSide``, the local
file system (put). What depends on the destination (is it a directory,
where an entry lands, how a directory is made) it asks of the run
(``TreeGet``, ``TreePut``). Everything else happens here, once: scp's
landing rules, the name gate for a server's listings, symlink loops, the
depth limit, and the sorting of each entry into a directory to list, a small
or big file, a symlink, or something left out.

The scanner knows the run only as a ``ScanRun``, what it asks of one:
``run.py`` imports this module, never the other way round.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Protocol, TypeVar

from ..core import codec
from ..core.config import TransferConfig
from ..core.errors import (
    LocalError,
    RemoteError,
    RemoteIsADirectory,
    RemoteNotFound,
    SSHPipeError,
    TooDeep,
    TransferError,
    UnsafePath,
)
from ..core.treeplan import Landings, TreeAccount, elided, has_magic, landings
from ..core.untrusted import ListingCheck, NameBudget, is_temporary_name
from ..durability.treejournal import TreeJournal
from ..local.dirfd import LocalDir, LocalFile, local_error
from ..transport.remotefs import Entry, glob_walk, read_dir, stat_by_name
from ..transport.sftp import SFTPSession
from .channels import stepping_aside
from .item import Folder, Identity, Item, TreeOptions, aborts_tree

_T = TypeVar("_T")

SPECIAL = "a special file (only files, directories and symlinks are copied)"


class OnChannel(Protocol):
    """``TreeRun.on_channel``: one remote step, run again after a reconnect."""

    def __call__(self, operation: Callable[[SFTPSession], Awaitable[_T]]) -> Awaitable[_T]: ...


class ScanRun(Protocol):
    """What the scanner asks of the tree it finds work for (``run.TreeRun``)."""

    sources: list[str]
    dest: str
    options: TreeOptions
    config: TransferConfig
    account: TreeAccount
    names: NameBudget  # what the listings open at once may remember, together
    journal: TreeJournal | None  # -r --resume's

    # What a destination that cannot take several sources is refused with.
    @property
    def dest_error(self) -> type[TransferError]: ...

    def join_dest(self, directory: str, name: str) -> str: ...

    async def dest_is_dir(self) -> bool: ...

    def place_root(self, dest: str, dest_is_dir: bool) -> LocalFile | None: ...

    async def make_dir(self, item: Item) -> bool: ...

    def local_dir(self, item: Item) -> LocalDir | None: ...

    async def queue_file(self, item: Item) -> None: ...

    async def queue_dir(self, item: Item) -> None: ...

    def listing_failed(self, folder: Folder, exc: SSHPipeError) -> None: ...

    def refuse(self, exc: SSHPipeError, where: str) -> None: ...

    def skip(self, path: str, why: str) -> None: ...


class Side(Protocol):
    """The source side of a tree, as the scanner reads it."""

    # Names from a server: each passes the name gate (``ListingCheck``), and
    # sshpipe's own temporary names are left out, before it names anything.
    untrusted: bool
    # What a directory named without -r is refused with.
    is_a_directory: type[TransferError]
    # How its paths are named in messages ("remote", "local").
    side: str

    def join(self, directory: str, name: str) -> str: ...

    async def stat(self, path: str) -> codec.Attrs:
        """``path``'s attributes, a symlink followed; SSHPipeError if there are none."""
        ...

    async def identity(self, item: Item) -> tuple[Identity, str]:
        """Who the directory ``item`` really is, and how a link back to it is described."""
        ...

    async def list_dir(self, path: str, entry: Entry, started: Callable[[], None]) -> None:
        """``entry`` for each name in ``path``, with its attributes (a symlink not followed).

        ``started`` is told before each attempt: a listing cut by a reconnect
        is read again from the start.
        """
        ...


class RemoteSide:
    """The server's files, for a download: every request on the tree's pipeline channels."""

    untrusted = True
    is_a_directory: type[TransferError] = RemoteIsADirectory
    side = "remote"

    def __init__(self, on_channel: OnChannel) -> None:
        self._on_channel = on_channel

    def join(self, directory: str, name: str) -> str:
        return posixpath.join(directory, name)

    async def stat(self, path: str) -> codec.Attrs:
        return await self._on_channel(lambda sftp: stat_by_name(sftp, path))

    async def identity(self, item: Item) -> tuple[Identity, str]:
        real = await self._on_channel(lambda sftp: sftp.realpath(item.source))
        # A link's real path is never its own: the server did not resolve it.
        unresolved = item.linked and posixpath.normpath(real) == posixpath.normpath(item.source)
        attrs = item.attrs
        looks = (attrs.size, attrs.uid, attrs.gid, attrs.permissions, attrs.mtime)
        return Identity(hash(real), looks, unresolved), f"{real} is a directory above it"

    async def list_dir(self, path: str, entry: Entry, started: Callable[[], None]) -> None:
        async def listing(sftp: SFTPSession) -> None:
            started()
            async with contextlib.aclosing(read_dir(sftp, path)) as batches:
                async for batch in batches:
                    for name, attrs in batch:
                        await entry(name, attrs)

        await self._on_channel(listing)


class LocalSide:
    """The local files, for an upload."""

    untrusted = False
    is_a_directory: type[TransferError] = LocalError
    side = "local"

    def join(self, directory: str, name: str) -> str:
        return os.path.join(directory, name)

    async def stat(self, path: str) -> codec.Attrs:
        return attrs_of(_stat(path))

    async def identity(self, item: Item) -> tuple[Identity, str]:
        info = _stat(item.source)
        return Identity((info.st_dev, info.st_ino)), "it is a directory above itself"

    async def list_dir(self, path: str, entry: Entry, started: Callable[[], None]) -> None:
        started()
        try:  # read whole: the directory is not held open while the entries are queued
            with os.scandir(path) as listing:
                entries = [(each.name, each.stat(follow_symlinks=False)) for each in listing]
        except OSError as exc:
            raise local_error(path, exc) from exc
        for name, info in entries:
            await entry(name, attrs_of(info))


def attrs_of(info: os.stat_result) -> codec.Attrs:
    """A local file's attributes, as a server would send them."""
    return codec.Attrs(
        size=info.st_size,
        permissions=info.st_mode,
        atime=int(info.st_atime),
        mtime=int(info.st_mtime),
    )


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as exc:
        raise local_error(path, exc) from exc


class Scanner:
    """Walks a tree's sources through ``side`` and queues what it finds on ``run``."""

    def __init__(self, run: ScanRun, side: Side) -> None:
        self.run = run
        self.side = side

    async def roots(self) -> None:
        """The named sources: where each lands (scp's rules), then what each is.

        With ``patterns``, a source with wildcards stands for its matches,
        taken as its listings give them (``glob_walk``), never all at once.
        """
        run = self.run
        dest_is_dir = await run.dest_is_dir()
        if run.journal is not None:  # resuming: where the first run put it
            dest_is_dir = run.journal.landing(dest_is_dir)
        globs = [run.options.patterns and has_magic(source) for source in run.sources]
        named = [source for source, glob in zip(run.sources, globs, strict=True) if not glob]
        if len(run.sources) > 1 and not dest_is_dir:
            raise run.dest_error(run.dest, "is not a directory (several sources need one)")
        # Two named sources in one place are refused before anything is copied.
        landings(named, run.dest, dest_is_dir=dest_is_dir, join=run.join_dest)
        placing = _Placing(self, Landings(run.dest, dest_is_dir=dest_is_dir, join=run.join_dest))
        for source, glob in zip(run.sources, globs, strict=True):
            if not glob:
                await placing.take(source, None)
                continue
            walked = await glob_walk(
                self.side.list_dir,
                source,
                partial(placing.take, pattern=source),
                budget=run.names,
                going_down=stepping_aside,
            )
            if not walked:
                missing = RemoteNotFound(source, "no match")
                if len(run.sources) == 1:
                    raise missing  # nothing else to copy: the command's own error
                run.refuse(missing, source)
        await placing.end()

    async def root(
        self, source: str, attrs: codec.Attrs | None, landings: Landings, pattern: str = ""
    ) -> None:
        """One source, placed: the attributes its listing gave, else (and for a link) a
        stat, since a named source is followed as scp does."""
        run = self.run
        dest = landings.place(source, pattern=pattern)
        if dest is None:
            return  # named twice
        local = run.place_root(dest, landings.dest_is_dir)
        if attrs is None or attrs.kind == "symlink":
            try:
                attrs = await self.side.stat(source)
            except SSHPipeError as exc:
                if aborts_tree(exc):
                    raise
                run.refuse(exc, source)
                return
        await self.found(Item(source, dest, attrs, attrs.kind, local=local))

    async def found(self, item: Item) -> None:
        """Queue an entry by what it is: a directory to list, a file, a symlink; or leave it."""
        run = self.run
        if item.kind == "file":
            await run.queue_file(item)
        elif item.kind == "dir":
            if not run.options.recursive:
                refused = self.side.is_a_directory(item.source, "is a directory (use -r)")
                run.refuse(refused, item.source)
            else:
                await run.queue_dir(item)
        elif item.kind == "symlink" and run.options.follow_symlinks:
            await self._follow(item)
        elif item.kind == "symlink":
            await run.queue_file(item)
        else:
            run.skip(item.source, SPECIAL)

    async def _follow(self, item: Item) -> None:
        try:
            attrs = await self.side.stat(item.source)
            if attrs.kind == "symlink":  # a server that does not follow links
                raise RemoteError(item.source, "symlink could not be followed")
        except SSHPipeError as exc:
            if aborts_tree(exc):
                raise
            self.run.refuse(exc, item.source)  # a dangling link, or one we may not follow
            return
        await self.found(replace(item, attrs=attrs, kind=attrs.kind, linked=True))

    async def directory(self, item: Item) -> Folder | None:
        """Make the directory at the destination, then list it: each entry is ``found``.

        Returns the folder made (its listing over, failed or not); None when
        it was left out (a symlink loop).

        Raises:
            TooDeep: it is more than ``max_depth`` directories down.
        """
        run = self.run
        depth, limit = item.depth, run.config.max_depth
        if depth >= limit:
            top = item.parent
            while top is not None and top.parent is not None:
                top = top.parent
            shown = elided(item.source, top.item.source if top is not None else "")
            raise TooDeep(item.source, limit, side=self.side.side, shown=shown)
        identity = None
        if run.options.follow_symlinks:
            # The depth limit is what ends a loop whatever the server says; a
            # real path seen above is the early catch (a server may answer
            # REALPATH with a new path each time, but not an honest one).
            identity, described = await self.side.identity(item)
            if item.parent is not None and item.parent.above(identity):
                run.skip(item.source, f"symlink loop: {described}")
                return None
        existed = await run.make_dir(item)
        folder = Folder(item, existed, item.parent, depth, identity)
        run.account.directories += 1
        here = run.local_dir(item)
        check = ListingCheck(item.source, run.names) if self.side.untrusted else None

        async def entry(name: str, attrs: codec.Attrs) -> None:
            if check is not None and not self._passes(item, check, name):
                return
            local = here.file(name) if here is not None else None
            source = self.side.join(item.source, name)
            dest = run.join_dest(item.dest, name)
            await self.found(Item(source, dest, attrs, attrs.kind, folder, local))

        try:
            await self.side.list_dir(item.source, entry, check.again if check else _nothing)
        except SSHPipeError as exc:
            run.listing_failed(folder, exc)  # or raised: it stops the tree
        finally:
            if check is not None:
                check.close()
        return folder

    def _passes(self, item: Item, check: ListingCheck, name: str) -> bool:
        """The name gate: a server's name that may name something here, or why not."""
        try:
            if not check.accept(name):
                return False
        except UnsafePath as exc:
            if exc.listing_refused is not None:
                raise  # the rest of this listing is not read
            self.run.refuse(exc, f"{item.source}/{name!r}")
            return False
        if is_temporary_name(name):  # a name sshpipe writes itself beside the files it copies
            self.run.skip(self.side.join(item.source, name), "an sshpipe temporary or resume file")
            return False
        return True


class _Placing:
    """The sources as they come, one held back until a second shows they are several.

    A single source lands as the destination when it is not a directory
    (scp); several need a directory. A glob says how many it names only as
    its listings go, so its first match waits for the next, or for the end.
    """

    def __init__(self, scanner: Scanner, landings: Landings) -> None:
        self._scanner = scanner
        self._landings = landings
        self._first: tuple[str, codec.Attrs | None, str] | None = None
        self._count = 0

    async def take(self, source: str, attrs: codec.Attrs | None, *, pattern: str = "") -> None:
        self._count += 1
        if self._count == 1:
            self._first = (source, attrs, pattern)
            return
        run = self._scanner.run
        if not self._landings.dest_is_dir:
            raise run.dest_error(run.dest, "is not a directory (several sources need one)")
        await self.end()
        await self._scanner.root(source, attrs, self._landings, pattern)

    async def end(self) -> None:
        if self._first is not None:
            (source, attrs, pattern), self._first = self._first, None
            await self._scanner.root(source, attrs, self._landings, pattern)


def _nothing() -> None:
    pass
