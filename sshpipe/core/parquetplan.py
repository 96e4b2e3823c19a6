"""Which parquet column chunks to read ahead, learned from the reader's own reads (pure).

A parquet reader behind a serializing file wrapper (pyarrow's ``PythonFile``
under ``read_table``) asks for one column chunk at a time and waits for each:
one round trip per chunk. The file's footer says where every chunk lies, so
the first read of column ``c`` tells which bytes come next: ``c``'s chunks in
the row groups not read yet. ``ColumnPrefetch`` plans those, within a byte
cap, and the driver fetches them in one batch; later reads are served from
memory. A guess that was wrong costs bytes, never correctness: a read the
plan cannot wholly cover goes to the server as before.

``footer_span`` finds the metadata in a read that ends at the end of the
file; turning the metadata into ``Chunk``s takes a parquet library and is the
driver's (``sshpipe/fsspec/_parquet.py``); ``chunks_in`` keeps only chunks a
sane file can hold. The footer is the server's data: nothing here trusts it
beyond choosing what to read ahead.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MAGIC = b"PAR1"
# The 4-byte metadata length and the magic that end every parquet file.
FOOTER_TAIL = 8


@dataclass(frozen=True, slots=True, order=True)
class Chunk:
    """One column chunk: ``[offset, offset + length)`` of row group ``row_group``."""

    offset: int
    length: int
    row_group: int
    column: int

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True, slots=True)
class Step:
    """What one read changed: chunks to ask for now, and held ones whose bytes may go."""

    planned: list[Chunk]
    released: list[Chunk]


def footer_span(size: int, offset: int, data: bytes) -> tuple[int, int] | None:
    """Where the metadata lies, if ``data`` (read at ``offset``) ends a parquet file.

    Returns:
        ``(metadata offset, metadata length)`` when ``data`` reaches the end of
        a ``size``-byte file ending in ``PAR1`` (the length comes from its last
        8 bytes; it may lie partly before ``offset``); else None.
    """
    if offset + len(data) != size or len(data) < FOOTER_TAIL or data[-4:] != MAGIC:
        return None
    length = int.from_bytes(data[-8:-4], "little")
    start = size - FOOTER_TAIL - length
    if length == 0 or start < len(MAGIC):  # the leading magic comes first
        return None
    return start, length


def chunks_in(chunks: Iterable[Chunk], data_end: int) -> list[Chunk]:
    """The chunks worth planning, by offset: inside ``[4, data_end)``, non-empty, disjoint.

    A chunk that overlaps the one before it is dropped: the plan covers a
    read with disjoint pieces only (real writers never overlap them).
    """
    kept: list[Chunk] = []
    for chunk in sorted(chunks):
        if chunk.length <= 0 or chunk.offset < len(MAGIC) or chunk.end > data_end:
            continue
        if kept and chunk.offset < kept[-1].end:
            continue
        kept.append(chunk)
    return kept


class ColumnPrefetch:
    """Chunks asked for ahead of the reader, and what they cost in memory.

    Args:
        chunks: the file's column chunks (from ``chunks_in``: sorted, disjoint).
        cap: the most speculative bytes at once (asked for, or held unread).

    The driver calls ``cover`` before a read (the chunks asked for that hold
    all of it, or None), ``on_read`` with every read, served or not (it
    learns the columns, lets go of the chunks read, and returns the next to
    ask for), and ``landed`` when a batch's bytes came (or failed).
    """

    def __init__(self, chunks: Sequence[Chunk], cap: int) -> None:
        if cap < 0:
            raise ValueError("cap must not be negative")
        self.cap = cap
        self._chunks = list(chunks)
        self._offsets = [c.offset for c in self._chunks]
        self._by_column: dict[int, list[Chunk]] = {}
        for chunk in sorted(self._chunks, key=lambda c: (c.row_group, c.offset)):
            self._by_column.setdefault(chunk.column, []).append(chunk)
        self._cursor: dict[int, int] = {}  # learned column -> its next chunk to consider
        self._read: set[Chunk] = set()  # touched by a read (or given up): never asked again
        self._ahead: dict[Chunk, bool] = {}  # asked for: True once its bytes are held
        self._ahead_bytes = 0
        self._orphaned = 0  # bytes still in flight of chunks let go before they came
        self.peak = 0

    def __repr__(self) -> str:
        return (
            f"<ColumnPrefetch columns={sorted(self._cursor)} ahead={len(self._ahead)} "
            f"speculative={self.speculative} cap={self.cap}>"
        )

    @property
    def speculative(self) -> int:
        """Bytes asked for ahead and not yet read: in flight or held."""
        return self._ahead_bytes + self._orphaned

    @property
    def learned(self) -> list[int]:
        """The columns the reader was seen reading."""
        return sorted(self._cursor)

    def _overlapping(self, offset: int, end: int) -> list[Chunk]:
        i = max(0, bisect_right(self._offsets, offset) - 1)
        out: list[Chunk] = []
        for chunk in self._chunks[i:]:
            if chunk.offset >= end:
                break
            if chunk.end > offset:
                out.append(chunk)
        return out

    def cover(self, offset: int, length: int) -> list[Chunk] | None:
        """The chunks asked for that hold every byte of the read, in order; else None."""
        if length <= 0:
            return None
        end = offset + length
        pieces = self._overlapping(offset, end)
        at = offset
        for chunk in pieces:
            if chunk not in self._ahead or chunk.offset > at:
                return None
            at = chunk.end
        return pieces if at >= end else None

    def on_read(self, offset: int, length: int) -> Step:
        """A read of ``[offset, offset + length)`` happened: what to ask for next.

        Each chunk it touches is read (let go if it was asked for: served, or
        its bytes are no longer wanted) and its column learned; then the
        learned columns' chunks not read nor asked for yet are planned in row
        group order while they fit under the cap.
        """
        released: list[Chunk] = []
        for chunk in self._overlapping(offset, offset + length):
            self._read.add(chunk)
            held = self._drop(chunk)
            if held is False:
                self._orphaned += chunk.length  # its batch is still out
            elif held:
                released.append(chunk)
            self._cursor.setdefault(chunk.column, 0)
        return Step(planned=self._plan(), released=released)

    def _drop(self, chunk: Chunk) -> bool | None:
        held = self._ahead.pop(chunk, None)
        if held is not None:
            self._ahead_bytes -= chunk.length
        return held

    def _plan(self) -> list[Chunk]:
        room = self.cap - self.speculative
        planned: list[Chunk] = []
        while True:
            best: tuple[int, int, int] | None = None
            for column, at in self._cursor.items():
                todo = self._by_column[column]
                while at < len(todo) and (todo[at] in self._read or todo[at] in self._ahead):
                    at += 1
                self._cursor[column] = at
                if at < len(todo) and (best is None or todo[at].row_group < best[0]):
                    best = (todo[at].row_group, column, at)
            if best is None:
                break
            chunk = self._by_column[best[1]][best[2]]
            if chunk.length > room:
                break  # the nearest one first: nothing further ahead jumps the queue
            room -= chunk.length
            self._ahead[chunk] = False
            self._ahead_bytes += chunk.length
            planned.append(chunk)
        self.peak = max(self.peak, self.speculative)
        return sorted(planned)

    def landed(self, chunks: Sequence[Chunk], ok: bool) -> list[Chunk]:
        """A batch of ``chunks`` ended: which of them to keep the bytes of.

        The chunks read while in flight free their bytes now. A failed batch's
        chunks are given up (a read of them goes to the server).
        """
        keep: list[Chunk] = []
        for chunk in chunks:
            if chunk in self._ahead:
                if ok:
                    self._ahead[chunk] = True
                    keep.append(chunk)
                else:
                    self._drop(chunk)
                    self._read.add(chunk)
            else:
                self._orphaned -= chunk.length
        return keep

    def give_up(self, chunks: Iterable[Chunk]) -> None:
        """Held ``chunks`` turned out unusable (short bytes): never ask for them again."""
        for chunk in chunks:
            if self._drop(chunk) is not None:
                self._read.add(chunk)
