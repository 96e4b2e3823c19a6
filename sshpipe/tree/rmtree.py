"""Removing a remote tree (``Client.rmtree``): many REMOVEs and RMDIRs in flight at once.

Depth first, streamed: a directory's entries are acted on batch by batch as
its listing arrives (``transport.remotefs.read_dir``): a file's or link's
REMOVE is sent at once, a subdirectory is walked as soon as a batch names it.
Up to ``WALKERS`` directories (fewer on a server with few handles) are
walked side by side, each in a task of its parent's group; past that, a
subdirectory waits for a walker to finish (or, when every other walker waits
too, is walked in its parent's task). So a tree of many small
directories does not cost every directory's round trips one after another.
A directory's RMDIR goes once its own entries are
answered: filexfer-02 §6.1 lets a server answer requests in any order.

Bounded on any tree: at most ``REMOVES_IN_FLIGHT`` requests owed, and one
listing batch (and one directory handle) per level being walked.

Links are removed, never followed: a listing's attributes are LSTAT's, and
the top path is also asked for with READLINK (ProFTPD's LSTAT follows a link).
Every listed name passes ``ListingCheck``: never ``.``/``..``, never a ``/``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from ..core import codec
from ..core.errors import RemoteError
from ..core.servercaps import handle_cap
from ..core.untrusted import ListingCheck
from ..transport.remotefs import read_dir
from ..transport.remoteops import join
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession
from .tasks import task_group

Builder = Callable[[int], bytes]  # a request, given its id

# Requests owed at once: as many as a transfer's READs (DEFAULT_REQUESTS),
# so a tree of small files costs a round trip per 128 entries.
REMOVES_IN_FLIGHT = 128
# Directories walked side by side, at most. asyncssh's rmtree walks every
# directory at once (no limit); with 64 we match it at 50 ms on a wide tree
# and a deep one (benchmarks/bench_rmtree.py: 200 x 5 files 1.25 s vs 1.30 s,
# 20 x 25 files 0.65 s vs 0.65 s). Each walker holds a directory handle per
# level it is deep, so a server gets half the handles we would keep open on
# it (``core.servercaps.handle_cap``): 32 on Green End's 128-slot table.
WALKERS = 64
# Listings of one directory made before giving up on emptying it: a server
# may skip entries of a directory changed while it is listed (POSIX leaves it
# unspecified), and a second listing finds them.
PASSES = 3
# Answers that mean the entry is gone, as rmtree wants (another client
# removed it meanwhile, or an earlier pass did).
_GONE = (codec.FX_OK, codec.FX_NO_SUCH_FILE)


class _Removal:
    """One rmtree: the request budget, the walkers free, what is owed (for a cancel)."""

    def __init__(self, sftp: SFTPSession, *, walkers: int) -> None:
        self.sftp = sftp
        self.slots = asyncio.Semaphore(REMOVES_IN_FLIGHT)
        self.free = walkers - 1  # walkers that may start; the first is the caller's task
        self.busy = 1  # walkers running (waiting for a free one included)
        self.waiting = 0  # of those, waiting for one to finish (or for their own)
        self._changed = asyncio.Event()
        self.owed: set[asyncio.Future[codec.Reply]] = set()

    def changed(self) -> None:
        """A walker finished or began to wait: the waiting ones look again."""
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def wait_for_change(self) -> None:
        self.waiting += 1
        self.changed()  # the others may all be waiting now
        event = self._changed
        try:
            await event.wait()
        finally:
            self.waiting -= 1

    async def send(self, build: Builder) -> asyncio.Future[codec.Reply]:
        await self.slots.acquire()
        try:
            future = self.sftp.request(build)
        except BaseException:
            self.slots.release()
            raise
        self.owed.add(future)
        future.add_done_callback(self._answered)
        return future

    def _answered(self, future: asyncio.Future[codec.Reply]) -> None:
        self.owed.discard(future)
        self.slots.release()

    def abandon(self, cancelled: bool) -> None:
        """Nobody reads the answers still owed; a cancel lets the pool wait for them."""
        owed, self.owed = list(self.owed), set()
        if cancelled:
            self.sftp.settle_later(*owed)
        else:
            for future in owed:
                future.add_done_callback(quiet)


async def rmtree(sftp: SFTPSession, path: str) -> None:
    """Remove directory ``path`` and everything in it (``Client.rmtree``).

    Raises:
        RemoteNotFound: nothing at ``path``.
        RemoteError: ``path`` is a symlink or not a directory, or an entry
            could not be removed (the first such error; the rest is left).
        UnsafePath: a listing held a name that is not one plain component.
    """
    name = codec.wire(path)
    link = sftp.request(lambda rid: codec.encode_path_request(codec.FXP_READLINK, rid, name))
    link.add_done_callback(quiet)
    attrs = await sftp.lstat(path)
    if attrs.kind == "symlink" or isinstance(await link, codec.Name):
        raise RemoteError(path, "is a symbolic link: rmtree does not follow it (remove() it)")
    if not attrs.is_dir():
        raise RemoteError(path, "not a directory")
    limits = await sftp.learn_limits()
    handles = handle_cap(limits.max_open_handles if limits else 0, sftp.caps.handles)
    removal = _Removal(sftp, walkers=min(WALKERS, max(1, handles // 2)))
    try:
        await _walk(removal, path)
    except BaseException as exc:
        removal.abandon(isinstance(exc, asyncio.CancelledError))
        raise


async def _walk(removal: _Removal, directory: str) -> None:
    sftp = removal.sftp
    for attempt in range(PASSES):
        sent: list[tuple[asyncio.Future[codec.Reply], str]] = []
        check = ListingCheck(directory)
        parked = False
        try:
            async with (
                task_group() as walkers,
                contextlib.aclosing(read_dir(sftp, directory)) as batches,
            ):
                async for batch in batches:
                    for entry_name, entry in batch:
                        if not check.accept(entry_name):
                            continue
                        path = join(directory, entry_name)
                        if entry.kind != "dir":  # a link is "symlink": removed, not followed
                            sent.append((await removal.send(_remove(path)), path))
                        else:
                            await _place(removal, walkers, path)
                    sent = _unanswered(sftp, sent)  # a million files: not a million futures
                # It waits for its walkers now, as one waiting for a walker
                # does: theirs may not wait on it (``_place``).
                removal.waiting += 1
                parked = True
                removal.changed()
        finally:
            if parked:
                removal.waiting -= 1
        for future, path in sent:  # its entries are gone before it is asked to go
            _check(sftp, await future, path)
        reply = await (await removal.send(_rmdir(directory)))
        if isinstance(reply, codec.Status) and reply.code in _GONE:
            return
        if attempt == PASSES - 1:
            sftp.check_status(reply, directory)


async def _place(removal: _Removal, walkers: asyncio.TaskGroup, directory: str) -> None:
    """Walk ``directory`` in a walker of its own, once one is free.

    Waiting is only for as long as another walker is at work (it will finish,
    or wait too); when every other one waits (for a free walker, or for the
    walkers it started), this one walks it itself: the walkers never all wait
    for each other.
    """
    while removal.free == 0 and removal.waiting + 1 < removal.busy:
        await removal.wait_for_change()
    if removal.free == 0:
        await _walk(removal, directory)
        return
    removal.free -= 1
    removal.busy += 1
    walkers.create_task(_walker(removal, directory))


async def _walker(removal: _Removal, directory: str) -> None:
    try:
        await _walk(removal, directory)
    finally:
        removal.free += 1
        removal.busy -= 1
        removal.changed()


def _unanswered(
    sftp: SFTPSession, sent: list[tuple[asyncio.Future[codec.Reply], str]]
) -> list[tuple[asyncio.Future[codec.Reply], str]]:
    """The requests of ``sent`` still owed; the answered ones checked (raises the first error)."""
    for future, path in sent:
        if future.done():
            _check(sftp, future.result(), path)
    return [(future, path) for future, path in sent if not future.done()]


def _check(sftp: SFTPSession, reply: codec.Reply, path: str) -> None:
    if not (isinstance(reply, codec.Status) and reply.code in _GONE):
        sftp.check_status(reply, path)


def _remove(path: str) -> Builder:
    name = codec.wire(path)
    return lambda rid: codec.encode_path_request(codec.FXP_REMOVE, rid, name)


def _rmdir(path: str) -> Builder:
    name = codec.wire(path)
    return lambda rid: codec.encode_path_request(codec.FXP_RMDIR, rid, name)
