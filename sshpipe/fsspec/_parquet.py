"""Column chunks of a parquet file read ahead in one batch, for ``SSHPipeFile``.

``pq.read_table(path, columns=..., filesystem=fs)`` reads through pyarrow's
``PythonFile``, which holds a lock around each blocking ``read``: even with
``pre_buffer`` (its coalesced ``ReadAsync`` ranges go to an I/O pool, whose
threads then queue on that lock) every column chunk costs a round trip, 20
for 2 columns of 10 row groups. Nothing on our side of the lock can make
those reads overlap, so the file guesses instead: once a read that ends the
file shows a parquet footer, the metadata (parsed by pyarrow, imported only
then) says where every chunk lies, and the first read of a column asks for
that column's other chunks in one ``read_ranges`` batch (``core.parquetplan``
decides which, within ``DEFAULT_PARQUET_PREFETCH``); the reads that follow
are served from memory. A read the batch does not wholly hold goes to the
server as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.parquetplan import Chunk, ColumnPrefetch, chunks_in

if TYPE_CHECKING:
    from ..client.remotefile import RemoteFile

logger = logging.getLogger(__name__)

# The most bytes read ahead and not yet read by the reader. 64 MiB is ten
# bandwidth-delay products of 50 ms at 1 Gbit/s (a batch's round trip is a
# tenth of its transfer or less), holds two columns of a 300 MB ten-column
# file whole, and is what one download may have in flight
# (``DEFAULT_MAX_BYTES_IN_FLIGHT``): memory a reader of this client expects.
DEFAULT_PARQUET_PREFETCH = 64 * 1024 * 1024
# Parquet files whose chunks a filesystem remembers. pyarrow's dataset reads
# the footer through one open and the chunks through another, which sees no
# footer: the second open finds the chunks here by path and size. A stale
# entry (the file rewritten at the same size) is a wrong guess, bounded by
# the cap: what is served is still what the server holds at those offsets.
REMEMBERED_FILES = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefetchStats:
    """``batches``: read_ranges sent ahead, ``asked``: their bytes; ``served``:
    reads answered from them, ``served_bytes`` their bytes; ``peak``: the most
    speculative bytes at once; ``columns``: the columns seen read."""

    batches: int
    asked: int
    served: int
    served_bytes: int
    peak: int
    columns: list[int]


def parquet_chunks(footer: bytes, size: int) -> list[Chunk] | None:
    """The column chunks of a ``size``-byte file whose footer is ``footer``
    (metadata, length, ``PAR1``); None without pyarrow or when it cannot parse."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped]  # no types shipped
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        meta = pq.read_metadata(pa.BufferReader(footer))
        found: list[Chunk] = []
        for r in range(meta.num_row_groups):
            group = meta.row_group(r)
            for c in range(group.num_columns):
                col = group.column(c)
                start = col.data_page_offset
                if col.has_dictionary_page and col.dictionary_page_offset:
                    start = min(start, col.dictionary_page_offset)  # pyarrow's range too
                found.append(Chunk(start, col.total_compressed_size, r, c))
    except (OSError, ValueError, pa.ArrowException):
        return None  # a corrupt footer: the reader gets pyarrow's error as before
    return chunks_in(found, size - len(footer))  # the chunks lie before the footer


class Layouts:
    """The chunks of the last ``REMEMBERED_FILES`` parquet files parsed, by (path, size)."""

    def __init__(self, limit: int = REMEMBERED_FILES) -> None:
        self.limit = limit
        self._known: OrderedDict[tuple[str, int], list[Chunk]] = OrderedDict()

    def get(self, path: str, size: int) -> list[Chunk] | None:
        chunks = self._known.get((path, size))
        if chunks is not None:
            self._known.move_to_end((path, size))
        return chunks

    def put(self, path: str, size: int, chunks: list[Chunk]) -> None:
        self._known[(path, size)] = chunks
        self._known.move_to_end((path, size))
        while len(self._known) > self.limit:
            self._known.popitem(last=False)


class ParquetPrefetch:
    """The batches asked for ahead on ``remote`` and the bytes they brought.

    Its coroutines run on the file's event loop; ``aclose`` cancels what is
    still out and waits for it.
    """

    def __init__(self, remote: RemoteFile, plan: ColumnPrefetch) -> None:
        self.remote = remote
        self.plan = plan
        self._data: dict[Chunk, bytes] = {}
        self._batch_of: dict[Chunk, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._batches = self._asked = self._served = self._served_bytes = 0

    def __repr__(self) -> str:
        return f"<ParquetPrefetch {self.plan!r} batches={self._batches} served={self._served}>"

    @property
    def stats(self) -> PrefetchStats:
        return PrefetchStats(
            batches=self._batches,
            asked=self._asked,
            served=self._served,
            served_bytes=self._served_bytes,
            peak=self.plan.peak,
            columns=self.plan.learned,
        )

    async def serve(self, offset: int, n: int, size: int) -> bytes | None:
        """The ``n`` bytes at ``offset`` from the batches, or None: go to the server."""
        pieces = self.plan.cover(offset, n)
        if pieces is None:
            return None
        waiting = {t for c in pieces if (t := self._batch_of.get(c)) is not None}
        if waiting:
            await asyncio.wait(waiting)  # a cancelled wait leaves the batch running
        end = min(offset + n, size)
        out: list[bytes] = []
        at = offset
        for chunk in pieces:
            data = self._data.get(chunk)
            if data is None or len(data) != chunk.length:
                # Failed, or short (the file changed): the server answers this one.
                self.plan.give_up(pieces)
                for c in pieces:
                    self._data.pop(c, None)
                return None
            stop = min(end, chunk.end)
            if stop > at:
                out.append(data[at - chunk.offset : stop - chunk.offset])
                at = stop
        self._served += 1
        self._served_bytes += at - offset
        self.learn(offset, n)
        return b"".join(out)

    def learn(self, offset: int, n: int) -> None:
        """A read of ``[offset, offset + n)`` happened: free what it read, send what is next.

        Called on the loop; a batch's READs go out when the caller next
        awaits, so a read sent just after this call goes first.
        """
        step = self.plan.on_read(offset, n)
        for chunk in step.released:
            self._data.pop(chunk, None)
        if not step.planned:
            return
        task = asyncio.get_running_loop().create_task(self._batch(step.planned))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        for chunk in step.planned:
            self._batch_of[chunk] = task
        self._batches += 1
        self._asked += sum(c.length for c in step.planned)

    async def _batch(self, chunks: list[Chunk]) -> None:
        ok = False
        try:
            got = await self.remote.read_ranges([(c.offset, c.length) for c in chunks])
            ok = True
        except Exception as exc:  # a guess failed: the reads that need it go to the server
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("%s: read-ahead batch failed: %r", self.remote.name, exc)
            got = []
        finally:
            for chunk in chunks:
                self._batch_of.pop(chunk, None)
            keep = set(self.plan.landed(chunks, ok))
        for chunk, data in zip(chunks, got, strict=False):
            if chunk in keep:
                self._data[chunk] = data

    async def aclose(self) -> None:
        """Cancel the batches still out and wait for them; forget what was held."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        self._data.clear()
