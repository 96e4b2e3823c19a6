"""``RemoteFile``: a remote file held open for random access (``Client.open``).

The object keeps what an ``io`` file keeps (position, mode, closed) and the
lease of the channel its handle is on; the engine half
(``transfer/remotefile.py``) keeps the handle and what is in flight on it.
It loads the engine only when opened, as the client does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Generator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..core.errors import ClosedError, UsageError
from ..core.remotestat import RemoteStat, remote_stat
from ..core.stats import RemoteFileStats

if TYPE_CHECKING:
    from ..core.config import TransferConfig
    from ..transfer.remotefile import OpenFile
    from ..transport.pool import ChannelPool

# "rb" reads; "wb" creates or truncates; "xb" creates a new file; "ab" writes on at the end.
MODES = ("rb", "wb", "xb", "ab")

_NO_STATS = RemoteFileStats(
    requests=0,
    bytes_received=0,
    bytes_written=0,
    short_reads_reissued=0,
    read_ahead=0,
    peak_read_ahead=0,
    seeks=0,
    peak_bytes_in_flight=0,
)


class RemoteFile:
    """A remote file open for reading ("rb") or writing ("wb", "xb", "ab").

    Made by :meth:`Client.open`; open it with ``async with`` (closed on
    leaving) or ``f = await client.open(...)`` and close it with
    ``await f.aclose()``. It holds a lease on one SFTP channel of the
    client's pool until closed, a light one: other open files and metadata
    requests (``stat``, ``ls``) share that channel rather than open one.
    Reads: ``read``/``readinto`` at the position (with a
    read-ahead that grows while reads are sequential and drops on a seek),
    ``pread`` anywhere (many tasks may call it at once), ``read_ranges``
    (every range's READs sent at once). Writes stream through the upload's
    pipelined writer at the growing end of the file. Use the position
    (``read``, ``write``, ``seek``) from one task at a time.
    """

    def __init__(
        self,
        ready: Callable[[], Awaitable[ChannelPool]],
        path: str,
        mode: str,
        config: TransferConfig,
        read_ahead: int | None,
    ) -> None:
        if mode not in MODES:
            raise UsageError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if read_ahead is not None and read_ahead < 0:
            raise UsageError("read_ahead must not be negative")
        self._ready = ready
        self.name = path
        self.mode = mode
        self._config = config
        self._read_ahead = read_ahead
        self._file: OpenFile | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._opening = False
        self._closed = False
        self._pos = 0
        self._final_stats = _NO_STATS
        self._lock = asyncio.Lock()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("open" if self._file else "unopened")
        return f"<RemoteFile {self.name!r} mode={self.mode!r} {state} pos={self._pos}>"

    # -- opening and closing -----------------------------------------------

    async def _open(self) -> RemoteFile:
        if self._closed:
            raise ClosedError(f"{self.name}: file closed")
        if self._file is not None or self._opening:
            raise UsageError(f"{self.name}: already opened")
        self._opening = True
        pool = await self._ready()
        from ..transfer.channelspec import channel_spec
        from ..transfer.remotefile import open_file

        stack = contextlib.AsyncExitStack()
        try:
            lease = await stack.enter_async_context(
                pool.lease(channel_spec(self._config), light=True)
            )
            self._file = await open_file(
                lease, self.name, self.mode, self._config, self._read_ahead
            )
        except BaseException:
            await stack.aclose()  # the channel goes back (settling, if cancelled)
            self._opening = False
            raise
        self._stack = stack
        if self.mode == "ab":
            self._pos = self._file.writer.offset if self._file.writer else 0
        return self

    def __await__(self) -> Generator[Any, None, RemoteFile]:
        return self._open().__await__()

    async def __aenter__(self) -> RemoteFile:
        if self._file is None:
            await self._open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the file; calling it twice is fine.

        Opened for writing, it sends what is buffered and waits for every
        WRITE's acknowledgement before the CLOSE: a failure the server
        reports for any of them is raised here (the handle is closed anyway).
        """
        if self._closed:
            return
        self._closed = True
        file, stack = self._file, self._stack
        self._file = self._stack = None
        try:
            if file is not None:
                await file.close()
        finally:
            if file is not None:
                self._final_stats = file.stats()  # what it did stays readable
            if stack is not None:
                await stack.aclose()

    @property
    def closed(self) -> bool:
        return self._closed

    def _open_file(self) -> OpenFile:
        if self._file is None:
            if self._closed:
                raise ClosedError(f"{self.name}: file closed")
            raise UsageError(f"{self.name}: not opened yet (await it, or use async with)")
        return self._file

    # -- the position -------------------------------------------------------

    def tell(self) -> int:
        """The position ``read`` and ``write`` go on from."""
        self._open_file()
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move the position (``whence`` 0: from the start, 1: from here, 2: from the end).

        Only a reader seeks: a writer's bytes go on at the end of what it wrote.
        The end is the size known (at open, or the last :meth:`stat`).

        Returns:
            The new position.

        Raises:
            UsageError: a bad ``whence``, a negative result, or a writer's seek.
        """
        file = self._open_file()
        if whence == 0:
            pos = offset
        elif whence == 1:
            pos = self._pos + offset
        elif whence == 2:
            pos = (file.attrs.size or 0) + offset
        else:
            raise UsageError(f"whence must be 0, 1 or 2, not {whence!r}")
        if pos < 0:
            raise UsageError(f"{self.name}: negative position {pos}")
        if file.writer is not None and pos != self._pos:
            raise UsageError(f"{self.name}: a file open for writing does not seek")
        self._pos = pos
        return pos

    @property
    def size(self) -> int | None:
        """The file's size when it was opened (or last :meth:`stat`); None if not told.

        A writer's is the bytes written so far, at least.
        """
        file = self._open_file()
        if file.writer is not None:
            return max(file.attrs.size or 0, file.writer.written)
        return file.attrs.size

    @property
    def attributes(self) -> RemoteStat:
        """What the server said of the file at open (or the last :meth:`stat`), asking nothing."""
        return remote_stat(self.name, self._open_file().attrs)

    async def stat(self) -> RemoteStat:
        """What the server says of the open file now (FSTAT); ``size`` follows it."""
        file = self._open_file()
        attrs = await file.fstat()
        if file.reader is not None:
            file.reader.size_hint = attrs.size
        return remote_stat(self.name, attrs)

    @property
    def stats(self) -> RemoteFileStats:
        """Requests sent and bytes moved so far, and the read-ahead's window."""
        return self._file.stats() if self._file is not None else self._final_stats

    # -- reading ------------------------------------------------------------

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes from the position (all to the end if ``n`` < 0); it moves on.

        Fewer than ``n`` come back only at the end of the file (``b""`` there).

        Raises:
            RemoteError, ConnectionBroken, ProtocolError; ClosedError: the file
            (or its client) was closed; UsageError: not open for reading.
        """
        file = self._open_file()
        async with self._lock:
            if n >= 0:
                data = await file.read(self._pos, n)
                self._pos += len(data)
                return data
            parts: list[bytes] = []
            while True:
                want = max((file.attrs.size or 0) - self._pos, 1024 * 1024)
                data = await file.read(self._pos, want)
                self._pos += len(data)
                parts.append(data)
                if len(data) < want:
                    return b"".join(parts)

    async def readinto(self, buffer: bytearray | memoryview) -> int:
        """Read up to ``len(buffer)`` bytes into ``buffer``; how many came."""
        data = await self.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    async def pread(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``offset``, without moving the position.

        Its READs go out at once (as many as the flight budget allows); many
        tasks may call it together. Short only at the end of the file.
        """
        return await self._open_file().pread(offset, n)

    async def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(offset, length)``, in the order given.

        Every range's READs are sent at once, within the client's flight
        budget; overlapping ranges are read once. A range past the end of
        the file comes back short (or empty), as ``pread``'s would.

        Raises:
            UsageError: a negative offset or length. As :meth:`read`.
        """
        return await self._open_file().read_ranges(ranges)

    # -- writing ------------------------------------------------------------

    async def write(self, data: bytes) -> int:
        """Queue ``data`` at the end of what was written; ``len(data)``.

        Whole blocks are sent at once; while the flight budget is full it
        waits for acknowledgements (backpressure). A failure the server
        reported for an earlier WRITE is raised by the next call.

        Raises:
            RemoteError (a full disk...), ConnectionBroken; ClosedError;
            UsageError: not open for writing. TypeError: not bytes.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"write() takes bytes, not {type(data).__name__}")
        file = self._open_file()
        async with self._lock:
            await file.write(bytes(data) if not isinstance(data, bytes) else data)
            self._pos += len(data)
        return len(data)

    async def flush(self) -> None:
        """Send what is buffered and wait until the server acknowledged every WRITE."""
        file = self._open_file()
        async with self._lock:
            await file.flush()
