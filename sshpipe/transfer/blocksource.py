"""Where an upload's bytes come from: a local file (read again after a drop) or a stream."""

from __future__ import annotations

from collections.abc import AsyncIterable

from ..core.compresspolicy import Ratio
from ..core.errors import IntegrityError
from ..core.flight import SharedBytes
from ..local.source import LocalSource
from .holding import holding

# A put's sample for Compression auto: four 64 KiB pieces (core.compresspolicy's
# SAMPLE_BYTES), one pread each: well under a millisecond from the page cache.
SAMPLE_PIECE = 64 * 1024
SAMPLE_PIECES = 4


class BlockSource:
    """Where an upload's blocks come from, in file order."""

    rereadable = False  # can a range be read again after a dropped connection?

    async def next(self, offset: int, block: int, count: int) -> list[bytes]:
        raise NotImplementedError

    async def reread(self, offset: int, length: int) -> bytes:
        raise NotImplementedError

    async def ratio(self, shared: SharedBytes | None) -> float | None:
        """zlib's ratio on a few blocks spread over the data, read ahead (Compression
        auto), each charged to ``shared`` while it is read; None if there are none."""
        return None

    def check_unchanged(self) -> None:
        """Before the copy takes its name: IntegrityError if the source changed since it
        was opened (a stream is what it yielded: nothing to compare)."""


class FileBlocks(BlockSource):
    """A local file's blocks (``LocalSource``), read again after a dropped connection."""

    rereadable = True

    def __init__(self, source: LocalSource, *, in_thread: bool) -> None:
        self.source = source
        self.in_thread = in_thread
        self._ratio: Ratio | None = None  # sampled once, for every attempt

    async def next(self, offset: int, block: int, count: int) -> list[bytes]:
        return await self.source.read_blocks(offset, block, count, in_thread=self.in_thread)

    async def ratio(self, shared: SharedBytes | None) -> float | None:
        """``SAMPLE_PIECES`` blocks of ``SAMPLE_PIECE`` bytes at even steps over the file
        (a CSV's header and body, a tar's mixed members); a short file whole. One at
        a time, and only their counts kept: 200 puts at once kept 50 MiB of samples
        for their whole upload when each kept its four blocks."""
        if self._ratio is None:
            ratio = Ratio()
            size = self.source.size
            step = max(SAMPLE_PIECE, size // SAMPLE_PIECES)
            for offset in range(0, min(size, step * SAMPLE_PIECES), step):
                await self._sample(ratio, offset, shared)
            self._ratio = ratio
        return self._ratio.value

    async def _sample(self, ratio: Ratio, offset: int, shared: SharedBytes | None) -> None:
        async with holding(shared, SAMPLE_PIECE):
            for piece in await self.source.read_blocks(
                offset, SAMPLE_PIECE, 1, in_thread=self.in_thread
            ):
                ratio.add(piece)

    async def reread(self, offset: int, length: int) -> bytes:
        blocks = await self.source.read_blocks(offset, length, 1, in_thread=self.in_thread)
        data = blocks[0] if blocks else b""
        if len(data) != length:  # the file shrank under us: what was sent is gone
            raise IntegrityError(
                str(self.source.path), "changed while it was uploaded: it shrank", offset=offset
            )
        return data

    def check_unchanged(self) -> None:
        self.source.check_unchanged()


class StreamBlocks(BlockSource):
    """Re-cuts an async iterable of bytes of any sizes into full blocks."""

    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._iter = aiter(chunks)
        self._pending = bytearray()
        self._ended = False

    async def next(self, offset: int, block: int, count: int) -> list[bytes]:
        while not self._ended and len(self._pending) < block:
            try:
                chunk = await anext(self._iter)
            except StopAsyncIteration:
                self._ended = True
                break
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise TypeError(f"put_stream needs bytes, got {type(chunk).__name__}")
            self._pending += chunk
        cut = min(len(self._pending), block)
        if cut == 0:
            return []
        with memoryview(self._pending) as view:  # one copy, not slice-then-bytes
            data = bytes(view[:cut])
        del self._pending[:cut]
        return [data]
