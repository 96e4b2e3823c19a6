"""The buffered file ``SSHPipeFileSystem.open`` returns, over a :class:`sshpipe.RemoteFile`.

Two read-aheads, one over the other. fsspec's "readahead" cache, with a
small block (READ_BLOCK), serves a reader's small sequential reads
(``read_csv``'s, a line at a time) from memory without a trip to the event
loop thread each. Beneath it the remote file's own window (``core.readahead``)
grows while the fetches run on sequentially, so each block is already on its
way when asked for, and drops to nothing on a seek: a reader that jumps about
(pyarrow reading two columns of a parquet file) moves its ranges and a small
block more, never a big block per jump. Writes are buffered a block at a
time (the filesystem's ``blocksize``) and streamed through the remote file's
pipelined writer.

A parquet file is read further ahead by column (``_parquet``): once a read
that ends the file shows its footer, the first read of each column chunk
asks for the same column's other chunks in one batch, and the reads that
land on them are served from memory, past fsspec's cache.

The remote file is opened when this file is made, not at the first read or
write: "xb" fails with ``FileExistsError`` at ``open()``, as a local file
does, and a read knows the size from the OPEN (no STAT more).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from fsspec.asyn import sync
from fsspec.spec import AbstractBufferedFile

from ..core.parquetplan import ColumnPrefetch, footer_span
from ._oserrors import oserrors
from ._parquet import ParquetPrefetch, PrefetchStats, parquet_chunks

if TYPE_CHECKING:
    from ..client.remotefile import RemoteFile
    from ..core.stats import RemoteFileStats
    from ._filesystem import SSHPipeFileSystem


# fsspec's cache block for readers: 128 KiB, what a jump over-reads at most;
# the remote file's window beneath grows to megabytes on a sequential run.
READ_BLOCK = 128 * 1024
# Seconds a close waits for the server (a reader's CLOSE; a writer's last
# acknowledgements): a link gone silent must not hang the caller.
CLOSE_TIMEOUT = 30.0


class SSHPipeFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec is untyped
    """A remote file for fsspec callers (pandas, pyarrow): ``fs.open(path, "rb")``.

    ``parquet_prefetch``: the most bytes of a parquet file's column chunks read
    ahead (0: none); the filesystem's ``parquet_prefetch`` when not given.
    """

    def __init__(
        self,
        fs: SSHPipeFileSystem,
        path: str,
        mode: str = "rb",
        parquet_prefetch: int | None = None,
        **kwargs: Any,
    ) -> None:
        self._remote: RemoteFile | None = None
        self._stats: RemoteFileStats | None = None
        cap = fs.parquet_prefetch if parquet_prefetch is None else parquet_prefetch
        self._parquet_cap: int = max(0, cap) if mode == "rb" else 0
        self._footer_sought = self._parquet_cap > 0  # until a tail read tells
        self._prefetch: ParquetPrefetch | None = None
        self._prefetch_stats: PrefetchStats | None = None
        self._unlearned: tuple[int, int] | None = None  # a read the prefetch is still to see
        self.fetches = 0  # reads that went to the server (each a round trip)
        remote = sync(fs.loop, fs._open_remote, path, mode)
        self._remote = remote
        if mode == "rb":
            kwargs.setdefault("size", remote.size)
        try:
            super().__init__(fs, path, mode, **kwargs)
        except BaseException:
            sync(fs.loop, remote.aclose)
            raise
        if mode == "ab":
            self.loc = remote.tell()
        if self._parquet_cap and self.size:
            known = fs.parquet_layouts.get(path, self.size)
            if known is not None:  # its footer was read through another open
                self._footer_sought = False
                self._prefetch = ParquetPrefetch(remote, ColumnPrefetch(known, self._parquet_cap))

    @property
    def stats(self) -> RemoteFileStats | None:
        """The remote file's requests and bytes so far (kept after close)."""
        return self._stats if self._remote is None else self._remote.stats

    @property
    def prefetch_stats(self) -> PrefetchStats | None:
        """What the parquet read-ahead did (None: not a parquet file, or not read yet)."""
        return self._prefetch.stats if self._prefetch is not None else self._prefetch_stats

    def read(self, length: int = -1) -> bytes:
        out: bytes
        prefetch = self._prefetch
        n = 0
        if prefetch is not None and not self.closed and self.mode == "rb":
            n = self.size - self.loc if length is None or length < 0 else int(length)
        if prefetch is None or n <= 0:
            out = super().read(length)
            return out
        got: bytes | None = sync(self.fs.loop, prefetch.serve, self.loc, n, self.size)
        if got is not None:
            self.loc += len(got)
            return got
        # From the server, as without the prefetch; what this read teaches
        # is sent just behind its READs (``_read``), or after it if fsspec's
        # cache held it.
        self._unlearned = (self.loc, n)
        out = super().read(length)
        if self._unlearned is not None:
            sync(self.fs.loop, self._learn)
        return out

    async def _learn(self) -> None:
        unlearned, self._unlearned = self._unlearned, None
        if unlearned is not None and self._prefetch is not None:
            self._prefetch.learn(*unlearned)

    def _fetch_range(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        self.fetches += 1
        data = bytes(sync(self.fs.loop, self._read, start, end - start))
        if self._footer_sought:
            self._seek_footer(start, data)
        return data

    def _seek_footer(self, start: int, data: bytes) -> None:
        """Make the parquet read-ahead if ``data`` (read at ``start``) ends a parquet file."""
        if start + len(data) != self.size:
            return  # not the tail
        span = footer_span(self.size, start, data)
        if span is not None and span[0] < start:
            return  # its metadata begins earlier: a later tail read may hold it
        self._footer_sought = False
        if span is None or self._remote is None:
            return
        chunks = parquet_chunks(data[span[0] - start :], self.size)
        if chunks:
            self.fs.parquet_layouts.put(self.path, self.size, chunks)
            self._prefetch = ParquetPrefetch(
                self._remote, ColumnPrefetch(chunks, self._parquet_cap)
            )

    async def _read(self, start: int, n: int) -> bytes:
        """``n`` bytes at ``start`` through the remote file's position, where its
        read-ahead sees whether the reads run on sequentially."""
        remote = self._remote
        assert remote is not None
        if self._unlearned is not None:
            await self._learn()  # its batch starts at this read's first await: behind it
        with oserrors():
            if remote.tell() != start:
                remote.seek(start)
            return await remote.read(n)

    def _initiate_upload(self) -> None:
        """Nothing to do: the remote file was opened for writing with this one."""

    def _upload_chunk(self, final: bool = False) -> bool:
        data = self.buffer.getvalue()
        sync(self.fs.loop, self._write, data, final)
        return True

    async def _write(self, data: bytes, final: bool) -> None:
        assert self._remote is not None
        with oserrors():
            if data:
                await self._remote.write(data)
            if final:
                await self._remote.aclose()  # every WRITE acknowledged, or raised here

    def close(self) -> None:
        try:
            super().close()  # a writer's last chunk, and its close
        finally:
            remote, self._remote = self._remote, None
            prefetch, self._prefetch = self._prefetch, None
            if remote is not None:
                if not remote.closed:
                    _close_remote(_closer(remote, prefetch), self.fs.loop)
                self._stats = remote.stats
            if prefetch is not None:
                self._prefetch_stats = prefetch.stats


def _closer(
    remote: RemoteFile, prefetch: ParquetPrefetch | None
) -> Callable[[], Coroutine[Any, Any, None]]:
    async def close() -> None:
        try:
            if prefetch is not None:
                await prefetch.aclose()  # its batches end before their handle does
        finally:
            await remote.aclose()

    return close


def _close_remote(
    closing: Callable[[], Coroutine[Any, Any, None]], loop: asyncio.AbstractEventLoop
) -> None:
    """Run ``closing`` (a remote file's close) on ``loop``, waiting for it where a wait can end.

    A file left open is closed by ``__del__`` whenever the garbage collector
    gets to it (pyarrow leaves its files to it): on the loop's own thread,
    where waiting would block the loop, it closes as a task; at interpreter
    exit, when fsspec's loop thread has stopped, it is left to go with its
    connection.
    """
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        task = loop.create_task(closing())
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)
    elif running is None and not sys.is_finalizing() and loop.is_running():
        sync(loop, closing, timeout=CLOSE_TIMEOUT)


# Closes started by _close_remote on the loop, referenced until they end.
_CLOSING: set[asyncio.Task[None]] = set()
