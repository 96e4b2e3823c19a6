"""Running a tree: many files in one pipeline under one budget, big files striped.

``sftp -r``, ``scp -r`` and asyncssh copy one file at a time and pay 3-7
round trips per file. Here every stage overlaps (``get`` and ``put`` fill in
the two directions)::

    scanners (DIRS_IN_FLIGHT directories listed at once, READDIR pipelined)
        ├──> small-file workers (FILES_IN_FLIGHT at once, over PIPELINE_CHANNELS
        │    channels): OPEN, then every READ/WRITE and the CLOSE in one round trip
        └──> big-file workers (BIG_ACTIVE moving data at once): the single-file
             engine, striped over its own channels with its own flow controller

The byte budget (``TransferConfig.max_bytes_in_flight``) is split so the
pipeline and the big-file workers together never hold more than it: a big file
among many small ones still gets its share, and memory stays bounded. Open
handles stay under the server's ``max_open_handles`` on every channel
(``channels``). ``TreeRun`` holds the workers, the accounting of what was
done, failed or skipped, and the progress callbacks.

What a tree holds is bounded whatever a server lists. Every queue has a size,
in entries and in their paths' characters. The directories found wait on a
stack: the tree is walked depth first, so a wide level waits as a few entries
per level, not whole; when the stack is full the scanner lists the directory
itself, further down (one scanner at a time: ``queue_dir``). A tree deeper
than ``max_depth`` stops. A directory is done (its mode and times set) once
everything in it is (``entry_done``), so only those in progress are kept. The
names listings remember share a budget (``core.untrusted.NameBudget``).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from ..core.checkfile import choose_check_file
from ..core.compresspolicy import route_by_name
from ..core.config import TransferConfig
from ..core.errors import (
    ConnectionBroken,
    IncompleteTransfer,
    SSHPipeError,
    TransferError,
)
from ..core.flight import SharedBytes
from ..core.stats import CompressionReport, TransferStats, TreeStats
from ..core.text import clip, printable
from ..core.treeplan import TreeAccount, is_small, split_budget
from ..core.untrusted import MAX_LISTED_FAILURES, NameBudget, safe_mode
from ..durability.treejournal import TreeJournal, tree_header
from ..local.dirfd import LocalDir, LocalFile
from ..local.target import run_blocking
from ..transfer.channelspec import channel_spec
from ..transfer.lanes import sizing_of
from ..transfer.progress import Reporter, Tally
from ..transfer.verify import RemoteHash, read_once_level
from ..transport.commands import RemoteCommands
from ..transport.compressroute import RoutedLease
from ..transport.pool import Lease, Pool
from ..transport.sftp import SFTPSession
from .batch import Batcher
from .channels import Credits, TreeChannels, stepping_aside
from .item import Folder, Item, TreeOptions, aborts_tree
from .progress import tracking
from .recovery import Recovery
from .scan import Scanner, Side
from .tasks import run_all, task_group
from .verify import TreeVerifier

logger = logging.getLogger("sshpipe.tree")

_T = TypeVar("_T")

# Four sftp-server processes work in parallel (2 cores here, more on servers),
# and four 2 MiB server windows let small uploads fill ~80 MB/s at 100 ms.
PIPELINE_CHANNELS = 4
# Files open at once: each costs 2-3 round trips, so at 100 ms 512 of them
# move ~2,000 files/s; a handle each, well under sshd's ~1,000 per channel.
FILES_IN_FLIGHT = 512
# Big files moving data at once; they share one byte budget (SharedBytes).
# More at once only split the link and restart each one's flow controller.
BIG_ACTIVE = 2
# Big files under way: a file's turn ends when its last byte is asked for, so
# the next one opens and ramps up while the last round trip and CLOSE go by.
BIG_WORKERS = 2 * BIG_ACTIVE
DIRS_IN_FLIGHT = 16  # directories listed at once (each holds a handle while listed)
# Characters of paths one queue may hold, besides its number of entries: a
# server's tree 64 levels deep in 255-byte names makes each entry's source and
# destination 16 KB apiece, and 5,120 of them would be 160 MiB.
QUEUED_PATH_CHARS = 8 << 20
# Directories found and not yet listed. A stack: the newest is listed first, so
# the tree goes down before it goes wide and the stack seldom fills; when it is
# full, a scanner lists the directory itself (``queue_dir``).
DIRS_QUEUED = 4096


class TreeRun(abc.ABC):
    """What get and put trees share: queues, workers, accounting, progress, the budget.

    The scanner (``scan``) finds the work; the direction provides the source
    side, where things land and how they are made, ``copy_small``,
    ``move_big``, and ``finish``.
    """

    def __init__(
        self,
        lease: Lease,
        pool: Pool,
        options: TreeOptions,
        config: TransferConfig,
        sources: list[str],
        dest: str,
    ) -> None:
        self.sources = sources
        self.dest = dest
        self.lease = lease
        channels = list(lease.channels)
        self.channels = TreeChannels(channels)
        self.pool = pool
        self.options = options
        self.config = config
        # Sized once, from the first channel (its limits learned): every small
        # file and listing uses it.
        sizes = sizing_of(config, channels[0], write=self.writes)
        self.block = sizes.block
        budget, big_budget = split_budget(config.max_bytes_in_flight)
        wanted = config.channels or PIPELINE_CHANNELS
        self.credits = Credits(max_requests=sizes.request_cap(wanted), max_bytes=budget)
        # Each big file's controller may aim for all of the big files' share,
        # and all of them together are held to it.
        self.big_config = replace(
            config,
            max_bytes_in_flight=big_budget,
            min_bytes_in_flight=min(config.min_bytes_in_flight, big_budget),
        )
        self.big_bytes = SharedBytes(big_budget)
        self.big_turns = asyncio.Semaphore(BIG_ACTIVE)
        # What Compression auto did with each big file (small ones go plain).
        self.compression: list[tuple[str, CompressionReport]] = []
        self.account = TreeAccount(started=time.perf_counter())
        cap = self.channels.slots[0].cap * wanted
        self.files_in_flight = max(1, min(FILES_IN_FLIGHT, cap))
        # Files holding a remote handle (open, read or written, closed). Files
        # past that, waiting for their check, sync or rename, hold none: as many
        # again may wait there, so the slow steps do not starve the pipeline.
        self.handles = asyncio.Semaphore(self.files_in_flight)
        self.workers = 2 * self.files_in_flight
        # Bounded: a scan far ahead of the copies holds memory and learns nothing.
        self.small: asyncio.Queue[Item | None] = EntryQueue(10 * FILES_IN_FLIGHT)
        self.big: asyncio.Queue[Item | None] = EntryQueue(10 * FILES_IN_FLIGHT)
        # Room for the scanners' stop signs too (``_dir_done``), the stack being empty then.
        self.dirs: asyncio.Queue[Item | None] = EntryStack(max(DIRS_QUEUED, DIRS_IN_FLIGHT))
        self._dirs_pending = 0
        # The scanner listing directories itself, the stack being full (``queue_dir``).
        self._descender: asyncio.Task[Any] | None = None
        # What the listings open at once may remember, together.
        self.names = NameBudget()
        # Directories whose entries are all done, their modes and times set together.
        self.finished_dirs: Batcher[Folder, SSHPipeError | None] = Batcher(self.finish_dirs)
        # The server's shell, for what a command does better than SFTP (sync, sha256sum).
        self.commands = RemoteCommands(lambda: self.channels.slots[0].sftp)
        verifying = config.verify != "none"
        check_file = choose_check_file(channels[0].extensions, channels[0].profile.software)
        level: str = config.verify
        if verifying and not self.writes and channels[0].caps.quirks.read_once:
            # Before any file is opened: a hash would need a second read.
            level = read_once_level(channels[0].caps, level, sources[0] if sources else dest)
        self.verifier = TreeVerifier(level, self.commands, check_file) if verifying else None
        # -r --resume: the files an earlier run finished are skipped.
        header = tree_header(channels[0].peer, upload=self.writes, sources=sources, dest=dest)
        self.journal = TreeJournal(header) if config.resume else None
        self.scanner = Scanner(self, self.source_side())
        self.recovery = Recovery(
            lease,
            config,
            progress=lambda: self.account.bytes_done + self.account.files_done,
            healed=self._healed,
            label=sources[0] if sources else dest,
        )

    writes = False  # True for uploads: the block size follows the server's write limit

    # What a destination that cannot take several sources is refused with.
    dest_error: type[TransferError]

    # -- the direction's own -----------------------------------------------------

    @abc.abstractmethod
    def source_side(self) -> Side:
        """Where the sources are read from, for the scanner."""

    @abc.abstractmethod
    def join_dest(self, directory: str, name: str) -> str:
        """The destination path of ``name`` in the destination ``directory``."""

    @abc.abstractmethod
    async def dest_is_dir(self) -> bool:
        """Whether the destination the user named is a directory now."""

    @abc.abstractmethod
    def place_root(self, dest: str, dest_is_dir: bool) -> LocalFile | None:
        """A source landing at ``dest``: its local file for a download (None for put, and
        for the destination directory itself)."""

    @abc.abstractmethod
    async def make_dir(self, item: Item) -> bool:
        """Make the directory ``item`` is copied to; whether it existed before."""

    @abc.abstractmethod
    def local_dir(self, item: Item) -> LocalDir | None:
        """The local directory a download's directory entry is copied into (None for put)."""

    @abc.abstractmethod
    async def copy_small(self, item: Item) -> None:
        """A small file or a symlink, through the pipeline."""

    @abc.abstractmethod
    async def move_big(
        self,
        lease: Lease,
        item: Item,
        on_tail: Callable[[], None],
        tally: Tally,
    ) -> TransferStats:
        """A big file through the single-file engine (``copy_big`` holds the turn and lease)."""

    @abc.abstractmethod
    async def big_done(self, item: Item) -> None:
        """After a big file is copied and checked (put sets its -p attributes here)."""

    @abc.abstractmethod
    def needs_finishing(self, folder: Folder) -> bool:
        """Whether ``folder``, its entries all done, has anything set (``finish_dirs``)."""

    @abc.abstractmethod
    async def finish_dirs(self, folders: list[Folder]) -> list[SSHPipeError | None]:
        """Modes and times of directories whose entries are all done; an error or None each."""

    @abc.abstractmethod
    async def finish(self) -> None:
        """Whatever is left once everything is copied."""

    @abc.abstractmethod
    async def dest_size(self, item: Item) -> int | None:
        """The size of what is at ``item.dest`` now (None: nothing there)."""

    def services(self) -> list[contextlib.AbstractAsyncContextManager[None]]:
        """What runs tasks of its own while the tree runs (the batches of checks, syncs)."""
        verifying = [self.verifier.running()] if self.verifier is not None else []
        return [self.finished_dirs.running(), *verifying]

    async def close(self) -> None:
        """Let go of what the run holds; called last, also after a failure or cancel."""
        await self.commands.close()

    # -- running ---------------------------------------------------------------

    async def run(self) -> TreeStats:
        """Scan and copy everything; raise IncompleteTransfer if anything failed."""
        if self.journal is not None:
            self.journal.open()
        finished = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                for service in self.services():
                    await stack.enter_async_context(service)
                await stack.enter_async_context(self.recovery.running())
                if self.options.progress is not None:
                    reporter = Reporter(self.options.progress, self.account.counts)
                    await stack.enter_async_context(reporter.running())
                await self._copy_all()
                await self.finish()
                finished = True
        finally:
            await self.close()
            if self.journal is not None:
                self.journal.finish(complete=finished and not self.account.failures)
        stats = replace(
            self.account.stats(time.perf_counter()),
            reconnects=self.recovery.reconnects,
            verified=(self.verifier.weakest if self.verifier is not None else None) or "none",
            compression=tuple(self.compression),
        )
        if stats.failures:
            raise IncompleteTransfer(stats)
        return stats

    async def _copy_all(self) -> None:
        """The scan and the workers, with more channels opened beside them while they run.

        The channels are opened for the work: once it is done, what is still
        being opened is given up on. A server that leaves a channel's set-up
        unanswered holds it up to the stall timeout, and a tree that had copied
        everything would wait for that (or, before set-ups had a deadline, for ever).
        """
        async with task_group() as group:
            growth = [group.create_task(self._grow()), group.create_task(self._warm_up())]
            try:
                await run_all(
                    [
                        self._scan(),
                        *(self._scanner() for _ in range(DIRS_IN_FLIGHT)),
                        *(
                            self._worker(self.small, partial(self._copy, self.copy_small))
                            for _ in range(self.workers)
                        ),
                        *(
                            self._worker(self.big, partial(self._copy, self.copy_big))
                            for _ in range(BIG_WORKERS)
                        ),
                    ]
                )
            finally:
                for task in growth:
                    task.cancel()

    async def _copy(self, job: Callable[[Item], Coroutine[Any, Any, None]], item: Item) -> None:
        """Copy one entry, unless an earlier run of this copy did (``--resume``)."""
        if item.kind != "file":
            await job(item)
            return
        self.account.started_file(item.source)
        try:
            await self._copy_file(job, item)
        finally:
            self.account.ended_file(item.source)

    async def _copy_file(
        self, job: Callable[[Item], Coroutine[Any, Any, None]], item: Item
    ) -> None:
        journal = self.journal
        if journal is None:
            await job(item)
            return
        copied = journal.copied_before(item.dest, item.size, item.attrs.mtime)
        if copied and await self.dest_size(item) == item.size:  # and nobody changed it since
            self.account.copied_before(item.size)
            return
        await job(item)
        journal.record(item.dest, item.size, item.attrs.mtime)

    async def queue_file(self, item: Item) -> None:
        """Queue a file for the pipeline or a big-file worker, by its size; a link for
        the pipeline."""
        small = True
        if item.kind == "file":
            self.account.found_file(item.size)
            # A small file's READs or WRITEs all go at once: no more than the pipeline may have.
            blocks = -(-item.size // self.block)
            small = (
                is_small(item.size, self.credits.max_bytes) and blocks <= self.credits.max_requests
            )
            if self.lease.pacer is not None:
                # Under a rate limit a file larger than the bucket goes through a pump,
                # paced block by block, not all at once (what it would lend ahead).
                small = small and item.size <= self.lease.pacer.bucket.burst
        queue = self.small if small else self.big
        if item.parent is not None:
            item.parent.pending += 1
        if queue.full():
            async with stepping_aside():  # the workers it waits for may need its handle
                await queue.put(item)
        else:
            queue.put_nowait(item)

    async def on_channel(self, operation: Callable[[SFTPSession], Awaitable[_T]]) -> _T:
        """Run one remote step on a pipeline channel (``TreeChannels.run``); if the
        connection drops (or goes silent) under it, it waits for the tree's one
        reconnect and runs again from scratch, so it must be safe to repeat."""
        while True:
            seen = self.recovery.generation
            try:
                return await self.channels.run(operation)
            except ConnectionBroken as exc:
                broken = exc
            await self.recovery.heal(seen, broken)

    async def _healed(self, channels: list[SFTPSession]) -> None:
        """After a reconnect: the live channels, and more opened as at the start; after a
        stall, the small files' requests (on any channel) kept to one channel's cap."""
        self.channels = TreeChannels(channels)
        learned = self.pool.server_caps.requests
        if learned is not None:
            self.credits.max_requests = min(self.credits.max_requests, learned)
        await self._grow()  # one channel is enough to go on

    async def queue_dir(self, item: Item) -> None:
        """A directory to list: on the stack, or, the stack full, listed here and now.

        One scanner at a time goes down (``_descender``): it never waits for
        the stack, so the stack always moves, and it takes the tree to its
        depth limit at once when every directory holds more than the stack
        (a server's made-up tree 100,000 wide at every level). What it holds
        meanwhile is one listing per level. The others wait for room.
        """
        if item.parent is not None:
            item.parent.pending += 1
        this = asyncio.current_task()
        if self.dirs.full() and self._descender in (None, this):
            outer, self._descender = self._descender, this
            try:
                async with stepping_aside():  # the listings below need handles
                    await self._scan_one(item)
            finally:
                self._descender = outer
            return
        self._dirs_pending += 1
        if self.dirs.full():
            async with stepping_aside():
                await self.dirs.put(item)
        else:
            self.dirs.put_nowait(item)

    async def copy_big(self, item: Item) -> None:
        """A big file, striped on channels of its own, in its turn at the link."""
        self.account.started_file(item.source, big=True)  # ``_copy`` ends it
        with tracking(self.account) as moved:
            async with self.big_turn() as end_turn, self.big_lease(item) as lease:
                stats = await self.move_big(lease, item, end_turn, moved)
                if isinstance(lease, RoutedLease) and lease.report is not None:
                    self.compression.append((item.source, lease.report()))
            if self.verifier is not None:
                self.verifier.passed(stats.verified)
            await self.big_done(item)
            self.account.file_done(stats.bytes, reported=moved.total, listed=item.size)

    @property
    def remote_hash(self) -> RemoteHash | None:
        """How a big file's --verify gets the server's SHA-256: in the tree's batches."""
        return self.verifier.remote_hash if self.verifier is not None else None

    @contextlib.asynccontextmanager
    async def big_turn(self) -> AsyncIterator[Callable[[], None]]:
        """A big file's turn at the link; call what it yields to end the turn early."""
        await self.big_turns.acquire()
        ended = False

        def end() -> None:
            nonlocal ended
            if not ended:
                ended = True
                self.big_turns.release()

        try:
            yield end
        finally:
            end()

    @contextlib.asynccontextmanager
    async def big_lease(self, item: Item) -> AsyncIterator[Lease]:
        """TreeChannels for a big file from the client's pool.

        Its transfer reconnects on its own; getting the channels is ours: a
        connection that drops as they open waits for the tree's reconnect.
        """
        async with contextlib.AsyncExitStack() as stack:
            while True:
                seen = self.recovery.generation
                try:
                    lease = await stack.enter_async_context(
                        self.pool.lease(channel_spec(self.big_config))
                    )
                    break
                except ConnectionBroken as exc:
                    broken = exc
                await self.recovery.heal(seen, broken)
            lease.pacer = self.lease.pacer  # one rate limit for the whole tree
            if isinstance(lease, RoutedLease):
                lease.hint = route_by_name(item.source)
            yield lease

    async def _warm_up(self) -> None:
        """Open a channel per big file to come while the tree is scanned: 4 round trips saved.

        They wait in the client's pool, idle, where the first big files' leases
        find them. Only for recursive copies, where big files are likely and the
        scan takes a few round trips anyway. Opening as many as an upload's
        first guess wants (7 at 100 ms) was slower: 4.7 s instead of 4.3 s for
        4 x 64 MiB among 1,000 small files.
        """
        if self.options.recursive:
            with contextlib.suppress(SSHPipeError):
                await self.pool.warm(channel_spec(self.big_config), BIG_ACTIVE)

    async def _grow(self) -> None:
        """The first channel starts the work; the others join as they open.

        A channel or connection that cannot be opened only stops the growth
        (as a single file's ``Grower``): the work goes on with the channels it has.
        """
        missing = PIPELINE_CHANNELS - len(self.channels.slots)
        if missing > 0 and self.lease.can_grow:
            try:
                await self.lease.add(missing, self.channels.add)
            except SSHPipeError as exc:
                logger.debug("%s: no more pipeline channels: %s", self.lease, exc)

    async def _scan(self) -> None:
        self._dirs_pending += 1  # the roots count as one directory until they are queued
        await self.scanner.roots()
        await self._dir_done()

    async def _scan_one(self, item: Item) -> None:
        """List one directory; once it and all it holds are done, so is it in its parent."""
        folder: Folder | None = None

        async def listing() -> None:
            nonlocal folder
            folder = await self.scanner.directory(item)

        await self.guarded(listing(), item)
        await self.entry_done(folder if folder is not None else item.parent)

    async def entry_done(self, folder: Folder | None) -> None:
        """An entry of ``folder`` is done (or its own listing is).

        The last one done finishes the folder (its mode and times, set after
        its contents: ``finish_dirs``), which is then an entry done in its own
        parent, and so on up.
        """
        while folder is not None:
            folder.pending -= 1
            if folder.pending:
                return
            if self.needs_finishing(folder):
                error = await self.finished_dirs.submit(folder)
                if error is not None:
                    self.failed(folder.item, error, counted=True)
            folder = folder.parent

    async def _dir_done(self) -> None:
        """One directory listed; after the last, every worker is told to stop when idle.

        Not in a ``finally``: when the transfer is torn down the workers are
        gone, and a put on a full queue would wait for ever.
        """
        self._dirs_pending -= 1
        if self._dirs_pending:
            return
        self.account.scan_done = True
        for _ in range(DIRS_IN_FLIGHT):
            self.dirs.put_nowait(None)
        for _ in range(self.workers):
            await self.small.put(None)
        for _ in range(BIG_WORKERS):
            await self.big.put(None)

    async def _scanner(self) -> None:
        while (item := await self.dirs.get()) is not None:
            await self._scan_one(item)
            await self._dir_done()

    async def _worker(
        self, queue: asyncio.Queue[Item | None], job: Callable[[Item], Coroutine[Any, Any, None]]
    ) -> None:
        while (item := await queue.get()) is not None:
            await self.guarded(job(item), item)
            await self.entry_done(item.parent)

    async def guarded(self, work: Coroutine[Any, Any, None], item: Item) -> None:
        """Run one item's work; its failure is recorded, not raised (unless it must be)."""
        try:
            await work
        except SSHPipeError as exc:
            if self.options.fail_fast or aborts_tree(exc):
                raise
            logger.debug("%s failed: %s", printable(item.source), exc)
            self.failed(item, exc)

    def listing_failed(self, folder: Folder, exc: SSHPipeError) -> None:
        """A directory made could not be listed (whole): recorded, or raised as ``guarded``."""
        if self.options.fail_fast or aborts_tree(exc):
            raise exc
        logger.debug("%s failed: %s", printable(folder.item.source), exc)
        self.failed(folder.item, exc, counted=True)

    def failed(self, item: Item, exc: SSHPipeError, *, counted: bool = False) -> None:
        """``item`` failed; ``counted``: a directory that was made (a file counts when
        found, a link once made)."""
        self.account.failed(item.source, exc, is_file=item.kind == "file", counted=counted)

    # A copy may take the source's write bit for others (put: the user's own files).
    others_write = True

    def mode_of(self, item: Item) -> int:
        """The permissions ``item`` gets: with -p all but setuid/setgid (``safe_mode``),
        else the rwx ones."""
        mode = item.attrs.permissions if item.attrs.permissions is not None else 0o644
        if self.options.preserve:
            return safe_mode(mode, directory=item.kind == "dir", others_write=self.others_write)
        return mode & 0o777

    async def local(
        self, func: Callable[..., _T], *args: object, syncs: bool = False, **kwargs: object
    ) -> _T:
        """Local file work: in a thread, or on the loop (the CLI; see local_io_in_thread).

        Work that ``syncs`` (an fsync waits for the disk, ~0.35 ms a file here)
        always goes to a thread: on the loop it would stall every other file,
        in threads the file system batches the syncs (1,000 x 16 KiB on
        loopback: 0.67 s on the loop, 0.61 s in threads, 0.35 s without fsync).
        """
        call = partial(func, *args, **kwargs)
        if self.config.local_io_in_thread or syncs:
            return await run_blocking(call)
        return call()

    def refuse(self, exc: SSHPipeError, where: str) -> None:
        """A name or entry that is refused outright: recorded, or raised with fail_fast
        (or when every other entry would meet it too: ``aborts_tree``)."""
        if self.options.fail_fast or aborts_tree(exc):
            raise exc
        if len(self.account.failures) < MAX_LISTED_FAILURES:  # then only counted
            logger.warning("%s", exc)
        self.account.failed(where, exc)

    def skip(self, path: str, why: str) -> None:
        """Leave ``path`` out, saying why (the first MAX_LISTED_FAILURES are logged)."""
        if len(self.account.skipped_paths) < MAX_LISTED_FAILURES:
            logger.warning("skipping %s: %s", printable(path), printable(clip(why)))
        self.account.skipped(path)


class PathBound(asyncio.Queue[Item | None]):
    """A queue of entries full at its number of them, or at QUEUED_PATH_CHARS of their paths."""

    _chars = 0

    def full(self) -> bool:
        return super().full() or self._chars >= QUEUED_PATH_CHARS

    def _put(self, item: Item | None) -> None:
        super()._put(item)
        self._chars += _chars_of(item)

    def _get(self) -> Item | None:
        item: Item | None = super()._get()
        self._chars -= _chars_of(item)
        return item


def _chars_of(item: Item | None) -> int:
    return 0 if item is None else len(item.source) + len(item.dest)


class EntryQueue(PathBound, asyncio.Queue[Item | None]):
    """First in, first out."""


class EntryStack(PathBound, asyncio.LifoQueue[Item | None]):
    """Last in, first out: the tree is walked depth first."""
