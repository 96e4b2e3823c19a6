"""One entry of a tree: where it is read from, where it goes, what it is; the
directory it was listed in (``Folder``); and which of its failures stop the whole
tree."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import (
    ClosedError,
    ConnectionBroken,
    HashUnavailable,
    LocalNoSpace,
    ProtocolError,
    SSHPipeError,
    UnsafePath,
)
from .._stats import ProgressCallback
from ..core import codec
from ..local.dirfd import LocalFile


@dataclass(frozen=True, kw_only=True)
class TreeOptions:
    """How a tree (or several sources) is copied; see ``Client.get``."""

    recursive: bool = False
    preserve: bool = False
    follow_symlinks: bool = False
    fail_fast: bool = False
    progress: ProgressCallback | None = None
    # The sources are patterns, expanded on the server as the tree goes (get).
    patterns: bool = False


@dataclass(frozen=True, slots=True)
class Item:
    """One entry to copy: read from ``source``, written to ``dest``.

    ``attrs`` are the source's (size, permissions, times); ``kind`` is "file",
    "dir" or "symlink" (a followed link takes its target's kind).
    """

    source: str
    dest: str
    attrs: codec.Attrs
    kind: str
    # The directory it was listed in; None for a source named by the user.
    parent: Folder | None = None
    # A download's destination, reached by directory descriptors (``dest`` is
    # its path for messages and journals). None: the entry is the download's
    # root directory itself.
    local: LocalFile | None = None

    @property
    def depth(self) -> int:
        """Directories between it and the source it was found under (0: a source)."""
        return 0 if self.parent is None else self.parent.depth + 1

    @property
    def size(self) -> int:
        return self.attrs.size or 0

    @property
    def times(self) -> tuple[int, int] | None:
        atime, mtime = self.attrs.atime, self.attrs.mtime
        return (atime, mtime) if atime is not None and mtime is not None else None


@dataclass(slots=True, eq=False)
class Folder:
    """A directory of the tree, made at the destination, from its listing until its
    last entry is done.

    Then its mode and times are set (``TreeRun.entry_done``) and it is done in
    its own parent: a tree holds the directories still in progress, never all
    of them until the end. The chain of parents is also what ``-L`` checks a
    link against, and how deep the tree is.
    """

    item: Item
    existed: bool  # before this copy made it
    parent: Folder | None
    depth: int
    # With follow_symlinks: who it really is (the server's real path of it, or
    # its device and inode), so a link back to a folder above is a loop. A
    # link to a sibling is not: it is copied again, as cp -rL and rsync -L do.
    identity: object = None
    # Its listing (until it ends), and each of its entries queued and not done.
    pending: int = 1

    def __repr__(self) -> str:
        return f"<Folder {self.item.source!r} depth={self.depth} pending={self.pending}>"

    def above(self, identity: object) -> bool:
        """Whether ``identity`` is this folder's or one's above it."""
        folder: Folder | None = self
        while folder is not None:
            if folder.identity == identity:
                return True
            folder = folder.parent
        return False


def aborts_tree(exc: SSHPipeError) -> bool:
    """Errors after which every other file would fail too: stop rather than list them all."""
    if isinstance(exc, UnsafePath):
        return False
    # HashUnavailable: "hash" asked of a server that cannot hash fails every file alike.
    return isinstance(
        exc, ConnectionBroken | ClosedError | ProtocolError | LocalNoSpace | HashUnavailable
    )
