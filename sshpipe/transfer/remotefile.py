"""One remote file held open for random access: the engine half of ``sshpipe.RemoteFile``.

``open_file`` opens the path on the lease's first channel in the mode asked
for and gives an ``OpenFile``: reads go through ``randomread`` (ranges at
once, a read-ahead for ``read``), writes through ``remotewrite`` (the write
pump). The public object (``sshpipe.client.remotefile``) keeps the position, the
lock and the lease; this keeps the handle and what is in flight on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core import codec
from ..core.config import TransferConfig
from ..core.errors import RemoteExists, RemoteOpenFailed, SSHPipeError, UsageError
from ..core.flight import FlightBudget
from ..core.rangeread import cut, spans
from ..core.readahead import ReadAhead
from ..core.readplan import Range
from ..core.stats import RemoteFileStats
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession
from .lanes import Handles, open_lanes, sizing_for
from .randomread import Fetch, Fetcher, SequentialReader, fetched
from .readpump import open_for_read
from .remotewrite import FileWriter

# The read-ahead's ceiling when the caller sets none: 8 MiB keeps an 80 ms
# link near 100 MB/s for a sequential reader, while a file held open stays
# small next to a download's 64 MiB budget (``get``/``stream`` go further).
DEFAULT_READ_AHEAD = 8 * 1024 * 1024

_WRITE_FLAGS = {
    "wb": codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_TRUNC,
    "xb": codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_EXCL,
    # Not FXF_APPEND: with O_APPEND the server's pwrite ignores the offset
    # (Linux), and pipelined WRITEs answered out of order would land shuffled.
    # The file's size at open is where the writes start instead.
    "ab": codec.FXF_WRITE | codec.FXF_CREAT,
}


class OpenFile:
    """A handle on a remote file, with its reader or its writer."""

    def __init__(
        self,
        handles: Handles,
        attrs: codec.Attrs,
        reader: SequentialReader | None,
        writer: FileWriter | None,
    ) -> None:
        self.handles = handles
        self.attrs = attrs
        self.reader = reader
        self.writer = writer
        self.fetcher = reader.fetcher if reader is not None else None

    @property
    def path(self) -> str:
        return self.handles.path

    def _fetcher(self) -> Fetcher:
        if self.fetcher is None:
            raise UsageError(f"{self.path}: not open for reading")
        return self.fetcher

    def _writer(self) -> FileWriter:
        if self.writer is None:
            raise UsageError(f"{self.path}: not open for writing")
        return self.writer

    async def read(self, pos: int, n: int) -> bytes:
        self._fetcher()
        assert self.reader is not None
        return await self.reader.read(pos, n)

    async def pread(self, offset: int, n: int) -> bytes:
        if offset < 0 or n < 0:
            raise UsageError(f"pread({offset}, {n}): negative offset or length")
        fetcher = self._fetcher()
        return await fetched(fetcher, fetcher.fetch(offset, n))

    async def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        fetcher = self._fetcher()
        try:
            covering = spans(ranges)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        fetches: list[tuple[Range, Fetch]] = [
            (span, fetcher.fetch(span.offset, span.length)) for span in covering
        ]
        try:
            covered = [(span, await fetch.future) for span, fetch in fetches]
        except BaseException:
            for _, fetch in fetches:
                fetcher.abandon(fetch)
            raise
        return cut(ranges, covered)

    async def write(self, data: bytes) -> None:
        await self._writer().write(data)

    async def flush(self) -> None:
        if self.writer is not None:
            await self.writer.flush()

    async def fstat(self) -> codec.Attrs:
        lane = self.handles.lanes[0]
        self.attrs = await lane.sftp.fstat(lane.handle, self.path)
        return self.attrs

    def stats(self) -> RemoteFileStats:
        fetcher, writer = self.fetcher, self.writer
        budget = fetcher.budget if fetcher else self._writer().pump.budget
        policy = self.reader.policy if self.reader is not None else None
        return RemoteFileStats(
            requests=(fetcher.requests if fetcher else 0) + (writer.requests if writer else 0),
            bytes_received=fetcher.bytes if fetcher else 0,
            bytes_written=writer.written if writer else 0,
            short_reads_reissued=fetcher.short_reads if fetcher else 0,
            read_ahead=policy.window if policy else 0,
            peak_read_ahead=policy.peak if policy else 0,
            seeks=policy.seeks if policy else 0,
            peak_bytes_in_flight=budget.peak_bytes,
        )

    async def close(self) -> None:
        """Send what is pending, wait for a writer's acknowledgements, CLOSE the handle.

        A read's CLOSE is sent and not waited for (as a download's); a
        write's is, since its answer may be the first word of a failure.
        """
        if self.writer is not None:
            await self.writer.close()
            return
        if self.reader is not None:
            self.reader.drop()
        if self.fetcher is not None:
            self.fetcher.stop()
            self.fetcher.budget.release()
            if self.fetcher.unanswered:
                # READs in flight nobody wants: the pool lets them come in
                # before it lends the channel again.
                self.handles.lanes[0].sftp.unsettled = True
        self.handles.release()


async def open_file(
    lease: Lease, path: str, mode: str, config: TransferConfig, read_ahead: int | None
) -> OpenFile:
    """Open ``path`` on the lease's first channel in ``mode`` (``_remotefile.MODES``).

    Raises:
        RemoteNotFound,
        RemoteIsADirectory, RemotePermissionDenied...; RemoteExists ("xb").
    """
    sftp = lease.channels[0]
    if mode == "rb":
        handles, attrs = await open_for_read([sftp], path, None)
    else:
        handles = await _open_for_write(sftp, path, mode)
        attrs = codec.Attrs()
    try:
        sizing = await sizing_for(config, sftp, write=mode != "rb")
        lane = handles.lanes[0]
        if mode != "rb":
            if mode == "ab":
                attrs = await sftp.fstat(lane.handle, path)
            writer = FileWriter(lease, handles, config, sizing, attrs.size or 0)
            return OpenFile(handles, attrs, None, writer)
        ceiling = DEFAULT_READ_AHEAD if read_ahead is None else read_ahead
        budget = FlightBudget(
            max_requests=sizing.request_cap(1),
            max_bytes=max(1, min(config.max_bytes_in_flight, lane.cap)),
            shared=sftp.client_bytes,
        )
        fetcher = Fetcher(lane, path, sizing.block, budget, lease.pacer)
        policy = ReadAhead(minimum=sizing.block, maximum=ceiling)
        reader = SequentialReader(fetcher, policy, attrs.size)
        return OpenFile(handles, attrs, reader, None)
    except BaseException as exc:
        await handles.close_after(exc)
        raise


async def _open_for_write(sftp: SFTPSession, path: str, mode: str) -> Handles:
    try:
        return await open_lanes([sftp], path, _WRITE_FLAGS[mode], codec.Attrs(), write=True)
    except RemoteOpenFailed as exc:
        # A bare FAILURE is also how EEXIST comes back (SFTP v3 has no code
        # for it): for "xb", what is there says whether it was that.
        if mode == "xb" and await _exists(sftp, path):
            raise RemoteExists(path, "already exists", status=exc.status) from exc
        raise


async def _exists(sftp: SFTPSession, path: str) -> bool:
    try:
        await sftp.lstat(path)
    except SSHPipeError:
        return False
    return True
