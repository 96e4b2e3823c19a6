"""asyncssh's receive buffer as the chunks the socket gave, read in place (``InputBuffer``).

asyncssh keeps received bytes in one ``bytes`` object and, for every SSH
packet, re-slices the rest of it (``self._inpbuf = self._inpbuf[n:]``): with
256 KiB socket reads and OpenSSH's ~32 KiB packets every byte was copied
about eight times, 14% of a download's CPU. A bytearray consumed from its
front (the first stand-in) still copied every byte once as it was appended,
and again whenever CPython shrank the array below half its allocation: 3.6%
of a download's CPU in ``memmove`` (perf, 256 MiB get on loopback).

Here each read's ``bytes`` is kept as it came, behind a memoryview, and a
packet is read where it lies (``front``); only one that straddles two reads
is joined (a packet's worth, once per read). What asyncssh does with its
buffer works as before: ``+=``, ``len``, truth, ``buf[:n]``/``buf[a:b]``
(copies, as before), ``buf[n:]`` (consumes) and ``find`` (the banner).
"""

from __future__ import annotations

from collections import deque


class InputBuffer:
    """Received bytes not yet consumed, as views of the reads that brought them."""

    __slots__ = ("_chunks", "_size")

    def __init__(self, data: bytes = b"") -> None:
        self._chunks: deque[memoryview] = deque()
        self._size = 0
        self += data

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __iadd__(self, data: bytes | bytearray | memoryview) -> InputBuffer:
        if data:
            # A read's own bytes are kept; anything mutable is copied, as it may change.
            view = memoryview(data if type(data) is bytes else bytes(data))
            self._chunks.append(view)
            self._size += len(view)
        return self

    def front(self, size: int) -> memoryview:
        """The first ``size`` bytes (at most what there is) as one view, joined if need be."""
        size = min(size, self._size)
        if not size:
            return memoryview(b"")
        first = self._chunks[0]
        if len(first) < size:
            first = self._join(size)
        return first[:size]

    def consume(self, size: int) -> None:
        """Drop the first ``size`` bytes (at most what there is)."""
        size = min(size, self._size)
        self._size -= size
        chunks = self._chunks
        while size:
            first = chunks[0]
            if len(first) > size:
                chunks[0] = first[size:]
                return
            chunks.popleft()
            size -= len(first)

    def _join(self, size: int) -> memoryview:
        """The chunks holding the first ``size`` bytes made one: those bytes copied, no more."""
        chunks = self._chunks
        pieces: list[memoryview] = []
        need = size
        while need:
            chunk = chunks.popleft()
            if len(chunk) > need:
                chunks.appendleft(chunk[need:])
                chunk = chunk[:need]
            pieces.append(chunk)
            need -= len(chunk)
        joined = memoryview(b"".join(pieces))
        chunks.appendleft(joined)
        return joined

    # -- what asyncssh itself does with its buffer ---------------------------

    def __getitem__(self, key: slice) -> bytes | InputBuffer:
        start, stop, step = key.indices(self._size)
        if key.stop is None and key.step is None:
            self.consume(start)  # ``buf = buf[n:]``: what asyncssh keeps is the rest
            return self
        if step != 1:
            raise ValueError("asyncssh's receive buffer is read in order")
        return bytes(self.front(stop)[start:]) if stop > start else b""

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        """``bytes.find`` over what is buffered (asyncssh looks for the banner's end)."""
        # Only up to ``end`` is copied (asyncssh bounds its banner search so); not
        # where either bound counts from the end, which is the whole buffer's.
        stop = self._size
        if end is not None and end >= 0 and start >= 0:
            stop = min(end, stop)
        return bytes(self.front(stop)).find(sub, start, end)
