"""Which byte range to ask for next when downloading: the pure read planner.

No I/O here. The driver asks ``next_range()``, sends a READ, and reports what
came back with ``on_data()`` / ``on_eof()``. The planner keeps:

* a *frontier*: the next never-requested offset, advanced one block at a time;
* *holes*: ranges that came back short and must be asked again, exactly at
  ``offset + received`` for the missing length (asyncssh and OpenSSH do the same:
  a short read is not EOF, filexfer-02 §6.4 lets the server return less);
* the lowest offset at which the server answered EOF (ranges answered EOF are
  parked as holes above it, so nothing is lost if the file grows after all).

The server's file size (from FSTAT) is only a hint: the frontier stops there
and sends one *probe* past it, so a file that grew is read on until EOF and a
file that shrank ends where the server says it ends. The result is exactly what
the server returned; ``changed`` records that the file was not what FSTAT said.

``classify_read`` says what a reply to a READ means (data, EOF or a failure),
for every reader: the pipelined read pump and a tree's small files alike.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from . import codec
from .errors import ProtocolError


@dataclass(frozen=True, slots=True)
class Range:
    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length


class ReadPlan:
    """Plans READ requests for one remote file.

    Args:
        block_size: bytes per READ request.
        size_hint: the size FSTAT reported, or None when unknown.
        probe_length: length of the probe past ``size_hint`` (default one
            block). A small file's probe asks for 1 byte: EOF costs nothing
            then, and growth shows all the same.
    """

    def __init__(
        self, *, block_size: int, size_hint: int | None, probe_length: int | None = None
    ) -> None:
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        if probe_length is not None and probe_length <= 0:
            raise ValueError("probe_length must be positive")
        self.probe_length = probe_length or block_size
        self.block_size = block_size
        self.size_hint = size_hint
        self.first_size = size_hint  # kept: ``size_hint`` goes once the file grew past it
        self.frontier = 0
        self.holes: list[Range] = []
        self.eof_at: int | None = None
        self.outstanding = 0
        self.received = 0  # bytes accepted, below eof_at or not
        self.max_received_end = 0
        self.short_reads = 0
        self.changed = False
        self._probe_out = False

    @classmethod
    def resuming(cls, *, block_size: int, size: int, have: list[Range]) -> ReadPlan:
        """A plan for a file of ``size`` bytes of which the ranges ``have`` already arrived.

        Only the gaps are asked for (a block at a time), then the probe past
        ``size`` as usual.
        """
        plan = cls(block_size=block_size, size_hint=size)
        gaps = missing(size, have)
        for gap in gaps:
            plan._owe(gap.offset, gap.end)
        plan.received = size - sum(gap.length for gap in gaps)
        plan.frontier = size
        plan.max_received_end = max((min(rng.end, size) for rng in have), default=0)
        return plan

    def _owe(self, start: int, end: int) -> None:
        for offset in range(start, end, self.block_size):
            self.holes.append(Range(offset, min(self.block_size, end - offset)))

    def __repr__(self) -> str:
        return (
            f"<ReadPlan frontier={self.frontier} holes={len(self.holes)} "
            f"outstanding={self.outstanding} eof_at={self.eof_at} received={self.received}>"
        )

    # -- asking -----------------------------------------------------------

    def next_range(self, limit: int | None = None) -> Range | None:
        """The next range to request, or None when nothing should be sent now.

        ``limit``: at most this many bytes (Compression auto's probe train asks
        for short blocks); the rest of a longer hole stays owed.
        """
        for index, hole in enumerate(self.holes):
            if self.eof_at is None or hole.offset < self.eof_at:
                if limit is not None and hole.length > limit:
                    self.holes[index] = Range(hole.offset + limit, hole.length - limit)
                    return self._issue(Range(hole.offset, limit))
                del self.holes[index]
                return self._issue(hole)
        if self.eof_at is not None:
            return None  # the frontier never passes a known EOF
        if self.size_hint is not None and self.frontier >= self.size_hint:
            if self._probe_out:
                return None
            self._probe_out = True  # one request past the hint finds EOF or growth
            return self._issue_frontier(self.probe_length)
        length = self.block_size if limit is None else min(self.block_size, limit)
        if self.size_hint is not None and self.frontier < self.size_hint:
            length = min(length, self.size_hint - self.frontier)
        return self._issue_frontier(length)

    def put_back(self, rng: Range) -> None:
        """``rng`` from ``next_range`` was not sent after all (the rate limit held it):
        it is the first one asked next."""
        self.outstanding -= 1
        self.holes.insert(0, rng)

    def _issue_frontier(self, length: int) -> Range:
        rng = Range(self.frontier, length)
        self.frontier += length
        return self._issue(rng)

    def _issue(self, rng: Range) -> Range:
        self.outstanding += 1
        return rng

    # -- answers ----------------------------------------------------------

    def on_data(self, rng: Range, count: int) -> None:
        """``count`` bytes arrived for the request ``rng`` (0 < count <= rng.length)."""
        if not 0 < count <= rng.length:
            raise ValueError(f"reply of {count} bytes for a request of {rng.length}")
        self.outstanding -= 1
        self.received += count
        end = rng.offset + count
        self.max_received_end = max(self.max_received_end, end)
        if self.size_hint is not None and end > self.size_hint:
            self._grew()
        if count < rng.length:
            self.short_reads += 1
            self.holes.append(Range(end, rng.length - count))
        if self.eof_at is not None and end > self.eof_at:
            # Data past a reported EOF: the file grew. The ranges that got EOF are
            # parked in ``holes``, so clearing EOF makes them be asked again.
            self.changed = True
            self.eof_at = None

    def on_eof(self, rng: Range) -> None:
        """The server answered EOF for the request ``rng``: the file ends at or before it."""
        self.outstanding -= 1
        self.holes.append(rng)  # parked: asked again only if the file turns out to grow
        if self.eof_at is None or rng.offset < self.eof_at:
            self.eof_at = rng.offset
        if self.size_hint is not None and self.eof_at < self.size_hint:
            self.changed = True  # shrank below what FSTAT said
        if self.max_received_end > self.eof_at:
            self.changed = True  # we hold bytes the server now says do not exist

    def on_retry(self, rng: Range) -> None:
        """A request was lost (e.g. its channel failed): ask for the range again."""
        self.outstanding -= 1
        self.holes.append(rng)

    def _grew(self) -> None:
        self.changed = True
        self.size_hint = None  # pipeline freely again; EOF will stop us
        self._probe_out = False

    # -- state ------------------------------------------------------------

    @property
    def all_asked(self) -> bool:
        """Every byte up to the expected end has been asked for (the tail is in flight)."""
        return self.eof_at is not None or (self._probe_out and self.size_hint is not None)

    @property
    def done(self) -> bool:
        """True when every byte below EOF has arrived and nothing is outstanding."""
        if self.outstanding or self.eof_at is None:
            return False
        return not any(hole.offset < self.eof_at for hole in self.holes)

    @property
    def final_size(self) -> int:
        """The file's size as the server last described it (valid once ``done``)."""
        if self.eof_at is None:
            raise RuntimeError("transfer not finished")
        return self.eof_at


def missing(size: int, have: list[Range]) -> list[Range]:
    """The ranges of ``[0, size)`` that no range of ``have`` covers, in order.

    ``have`` may be unsorted, overlap, or reach past ``size``.
    """
    gaps: list[Range] = []
    cursor = 0
    for rng in sorted(have, key=lambda r: r.offset):
        if rng.offset > cursor:
            gaps.append(Range(cursor, min(rng.offset, size) - cursor))
        cursor = max(cursor, rng.end)
        if cursor >= size:
            break
    if cursor < size:
        gaps.append(Range(cursor, size - cursor))
    return [gap for gap in gaps if gap.length > 0]


class ReadEnd(enum.Enum):
    EOF = "eof"


EOF = ReadEnd.EOF

# What a READ's reply means: its payload, the end of the file, or a failure:
# the server's failure STATUS (for the caller to name: ``status_error``), the
# channel's exception, or a ProtocolError for a reply no READ may get.
ReadOutcome = codec.Data | Literal[ReadEnd.EOF] | codec.Status | BaseException


def classify_read(path: str, rng: Range, reply: codec.Reply | BaseException) -> ReadOutcome:
    """The meaning of ``reply`` to the READ of ``rng`` of ``path``.

    Data of 1 to ``rng.length`` bytes is data (fewer is a short read, re-asked
    by the plan); STATUS EOF is the end. Anything else fails the read: empty
    or overlong data (a server that sends more than was asked for is broken or
    hostile), any other STATUS, any other kind of reply, or the channel's error.
    """
    if isinstance(reply, codec.Data):
        if 0 < reply.length <= rng.length:
            return reply
        return ProtocolError(
            f"{path}: server returned {reply.length} bytes for a read of {rng.length} "
            f"at offset {rng.offset}"
        )
    if isinstance(reply, codec.Status):
        return EOF if reply.code == codec.FX_EOF else reply
    if isinstance(reply, BaseException):
        return reply
    return ProtocolError(f"{path}: unexpected {type(reply).__name__} reply to a read")
