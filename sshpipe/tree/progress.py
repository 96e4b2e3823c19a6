"""A big file's bytes in a tree's progress: counted as they move, taken back if it fails."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..core.treeplan import TreeAccount


class BigTally:
    """A big file's ``Tally``: its bytes go into the tree's account as they move, and
    how many is remembered (taken back if it fails; counted done when it is)."""

    def __init__(self, account: TreeAccount) -> None:
        self.account = account
        self.total = 0
        self.kept_total = 0

    def moved(self, count: int) -> None:
        self.total += count
        self.account.moved(count)

    def kept(self, count: int) -> None:
        self.total += count
        self.kept_total += count
        self.account.moved(count, kept=True)

    def sized(self, size: int | None) -> None:
        """Nothing: the listed size is in the total until the file is done (``file_done``)."""

    def take_back(self) -> None:
        self.account.moved(-(self.total - self.kept_total))
        self.account.moved(-self.kept_total, kept=True)
        self.total = self.kept_total = 0


@contextlib.contextmanager
def tracking(account: TreeAccount) -> Iterator[BigTally]:
    """A big file's tally for the block; if the block fails, its bytes are taken back.

    The tree's account stays true; the reports never go backwards
    (``ProgressMeter``), and a retry of the file is not counted twice.
    """
    moved = BigTally(account)
    try:
        yield moved
    except BaseException:
        moved.take_back()
        raise
