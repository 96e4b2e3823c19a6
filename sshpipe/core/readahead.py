"""How far a random-access reader reads ahead of what it was asked for (pure).

A remote file read with small ``read(n)`` calls pays a round trip per call
unless the bytes after ``n`` are already on their way. Reading ahead helps a
sequential reader and only wastes the link for one that seeks, so the window
follows the access pattern, as Linux's readahead does:

- a read that starts where the last one ended is *sequential*: the window is
  as large as the sequential run so far (at least ``minimum``, at most
  ``maximum``). It doubles each time the reader consumes a window's worth,
  once per round of reading, as the flow controller's startup doubles its
  target once per round trip (``core.flowcontrol``);
- any other read is a *seek*: the run and the window drop to nothing, so a
  random read moves only the bytes it asked for.

The first read of a file at offset 0 counts as sequential (files are mostly
read from the start): it reads ``minimum`` ahead.

No I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ReadAhead:
    """The read-ahead window of one reader.

    Args:
        minimum: the window of a sequential read with no run yet (a block).
        maximum: the largest window (the reader's memory bound).
    """

    minimum: int
    maximum: int
    next_offset: int = 0  # where a sequential read would start
    run: int = 0  # bytes read sequentially since the last seek
    window: int = 0
    peak: int = 0  # the largest window so far
    seeks: int = 0

    def __post_init__(self) -> None:
        if self.minimum < 0 or self.maximum < 0:
            raise ValueError("read-ahead sizes must not be negative")
        self.minimum = min(self.minimum, self.maximum)

    def on_read(self, offset: int, length: int) -> int:
        """A read of ``length`` bytes at ``offset``: the bytes to have asked for after it."""
        if offset == self.next_offset:
            self.window = min(self.maximum, max(self.minimum, self.run))
            self.run += length
        else:
            self.seeks += 1
            self.window = 0
            self.run = length
        self.next_offset = offset + length
        self.peak = max(self.peak, self.window)
        return self.window

    def ended(self, end: int) -> None:
        """The last read came back short, at the end of the file: it ended at ``end``.

        A read from there is still sequential (an ``io`` reader's last call).
        """
        self.next_offset = min(self.next_offset, end)
