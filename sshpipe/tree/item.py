"""One entry of a tree: where it is read from, where it goes, what it is; the
directory it was listed in (``Folder``); and which of its failures stop the whole
tree."""

from __future__ import annotations

from dataclasses import dataclass

from ..core import codec
from ..core.errors import (
    ClosedError,
    ConnectError,
    ConnectionBroken,
    HashUnavailable,
    LocalNoSpace,
    ProtocolError,
    SSHPipeError,
    UnsafePath,
)
from ..core.stats import ProgressCallback
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
    # Listed as a symlink, followed (-L): ``attrs`` and ``kind`` are its target's.
    linked: bool = False

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
    # With follow_symlinks: who it really is, so a link back to a folder above
    # is a loop. A link to a sibling is not: it is copied again, as cp -rL and
    # rsync -L do.
    identity: Identity | None = None
    # Its listing (until it ends), and each of its entries queued and not done.
    pending: int = 1

    def __repr__(self) -> str:
        return f"<Folder {self.item.source!r} depth={self.depth} pending={self.pending}>"

    def above(self, identity: Identity) -> bool:
        """Whether ``identity`` is this folder's or one's above it (at most ``max_depth``)."""
        folder: Folder | None = self
        while folder is not None:
            if folder.identity is not None and identity.same_as(folder.identity):
                return True
            folder = folder.parent
        return False


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a directory really is, for ``-L``'s loop check.

    Locally its device and inode. Over SFTP v3 there is no inode: its real
    path (REALPATH, kept as a keyed hash however long the server made it).
    An honest server resolves links there, so a link back up is seen at
    once. One that does not (it answers a link's own path) is seen to: then
    a directory that looks the same as one above (size, owner, mode and
    modification time; not the access time, which the listing itself moves)
    is taken for it. Whatever a server answers, the depth limit ends a loop.
    """

    real: object
    looks: tuple[int | None, ...] | None = None
    # Reached through a link that REALPATH left unresolved: judged by its looks.
    unresolved: bool = False

    def same_as(self, other: Identity) -> bool:
        if self.real == other.real:
            return True
        return self.unresolved and self.looks is not None and self.looks == other.looks


def aborts_tree(exc: SSHPipeError) -> bool:
    """Errors after which every other file would fail too: stop rather than list them all.

    A connection that cannot be had is every file's: a host key refused, the
    credentials refused, a server that still refuses or drops us once the
    retry budget is spent (``ConnectError``, raised by a reconnect or by a
    big file's new connection), as a connection lost for good is
    (``ConnectionBroken``: the tree's one reconnect gave up). The tree stops
    with that one error, its own exit code, not a list of the same line.
    """
    if isinstance(exc, UnsafePath):
        return False
    return isinstance(exc, _SHARED_FAILURES)


# What every entry of a tree meets alike once one has. HashUnavailable: "hash"
# asked of a server that cannot hash fails every file alike.
_SHARED_FAILURES = (
    ConnectError,
    ConnectionBroken,
    ClosedError,
    ProtocolError,
    LocalNoSpace,
    HashUnavailable,
)
