"""Which ranges of a remote partial file a resumed upload may keep: the pure part.

The journal lists every WRITE the server acknowledged, with the SHA-256 of
the bytes sent. An acknowledgement says the server wrote them, not that they
are still there (a crash of the server loses its page cache; someone may have
touched the file since), so each range is read back and kept only if it still
hashes to what the journal says. No I/O here: the driver feeds the bytes read
back, in any order and cut anywhere, to :class:`ReadBackCheck`.
"""

from __future__ import annotations

import bisect
import hashlib

from .readplan import Range

Entry = tuple[int, int, str]  # (offset, length, SHA-256 hex) of one acknowledged WRITE


def latest_disjoint(entries: list[Entry], size: int) -> list[Entry]:
    """The entries still describing the file, sorted by offset.

    A later entry that overlaps an earlier one wrote over it (a range sent
    again after a failed check, a run with another block size), so the
    earlier one is dropped; so is anything reaching past ``size``.
    """
    starts: list[int] = []
    kept: list[Entry] = []
    for entry in reversed(entries):
        offset, length, _ = entry
        if length <= 0 or offset < 0 or offset + length > size:
            continue
        at = bisect.bisect_left(starts, offset)
        if at > 0 and kept[at - 1][0] + kept[at - 1][1] > offset:
            continue  # overlaps a later write, the one below
        if at < len(kept) and kept[at][0] < offset + length:
            continue  # overlaps a later write, the one above
        starts.insert(at, offset)
        kept.insert(at, entry)
    return kept


class ReadBackCheck:
    """Hashes the bytes read back from each journaled range; collects those that match.

    Args:
        entries: disjoint journal entries (see :func:`latest_disjoint`).
    """

    def __init__(self, entries: list[Entry]) -> None:
        self._entries = sorted(entries)
        self._starts = [offset for offset, _, _ in self._entries]
        self._pieces: dict[int, list[tuple[int, memoryview]]] = {}  # entry index -> pieces
        self._got: dict[int, int] = {}
        self.good: list[Range] = []
        self.bad = 0  # ranges read back whole whose hash differs

    def __repr__(self) -> str:
        return f"<ReadBackCheck good={len(self.good)} bad={self.bad} open={len(self._pieces)}>"

    def add(self, offset: int, data: bytes) -> None:
        """``data`` was read back at ``offset``; a piece may span ranges or a part of one."""
        end = offset + len(data)
        view = memoryview(data)
        index = max(0, bisect.bisect_right(self._starts, offset) - 1)
        while index < len(self._entries) and self._entries[index][0] < end:
            start, length, _ = self._entries[index]
            low, high = max(start, offset), min(start + length, end)
            if low < high:
                self._pieces.setdefault(index, []).append((low, view[low - offset : high - offset]))
                self._got[index] = self._got.get(index, 0) + high - low
                if self._got[index] >= length:
                    self._settle(index)
            index += 1

    def _settle(self, index: int) -> None:
        start, length, expected = self._entries[index]
        digest = hashlib.sha256()
        for _, piece in sorted(self._pieces.pop(index), key=lambda item: item[0]):
            digest.update(piece)
        if self._got.pop(index) == length and digest.hexdigest() == expected:
            self.good.append(Range(start, length))
        else:
            self.bad += 1

    @property
    def kept(self) -> list[Range]:
        """The ranges that matched, sorted (a range never read back whole is not among them)."""
        return sorted(self.good, key=lambda rng: rng.offset)
