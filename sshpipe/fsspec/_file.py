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

The remote file is opened when this file is made, not at the first read or
write: "xb" fails with ``FileExistsError`` at ``open()``, as a local file
does, and a read knows the size from the OPEN (no STAT more).
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING, Any

from fsspec.asyn import sync
from fsspec.spec import AbstractBufferedFile

from ._oserrors import oserrors

if TYPE_CHECKING:
    from .._remotefile import RemoteFile
    from .._stats import RemoteFileStats
    from ._filesystem import SSHPipeFileSystem


# fsspec's cache block for readers: 128 KiB, what a jump over-reads at most;
# the remote file's window beneath grows to megabytes on a sequential run.
READ_BLOCK = 128 * 1024
# Seconds a close waits for the server (a reader's CLOSE; a writer's last
# acknowledgements): a link gone silent must not hang the caller.
CLOSE_TIMEOUT = 30.0


class SSHPipeFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec is untyped
    """A remote file for fsspec callers (pandas, pyarrow): ``fs.open(path, "rb")``."""

    def __init__(self, fs: SSHPipeFileSystem, path: str, mode: str = "rb", **kwargs: Any) -> None:
        self._remote: RemoteFile | None = None
        self._stats: RemoteFileStats | None = None
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

    @property
    def stats(self) -> RemoteFileStats | None:
        """The remote file's requests and bytes so far (kept after close)."""
        return self._stats if self._remote is None else self._remote.stats

    def _fetch_range(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        return bytes(sync(self.fs.loop, self._read, start, end - start))

    async def _read(self, start: int, n: int) -> bytes:
        """``n`` bytes at ``start`` through the remote file's position, where its
        read-ahead sees whether the reads run on sequentially."""
        remote = self._remote
        assert remote is not None
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
            if remote is not None:
                if not remote.closed:
                    _close_remote(remote, self.fs.loop)
                self._stats = remote.stats


def _close_remote(remote: RemoteFile, loop: asyncio.AbstractEventLoop) -> None:
    """Close ``remote`` on ``loop``, waiting for it where a wait can end.

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
        task = loop.create_task(remote.aclose())
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)
    elif running is None and not sys.is_finalizing() and loop.is_running():
        sync(loop, remote.aclose, timeout=CLOSE_TIMEOUT)


# Closes started by _close_remote on the loop, referenced until they end.
_CLOSING: set[asyncio.Task[None]] = set()
