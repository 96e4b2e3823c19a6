"""One entry of a tree: where it is read from, where it goes, what it is; and which
of its failures stop the whole tree."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import (
    ClosedError,
    ConnectError,
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
    # With follow_symlinks: who the directories above this entry really are
    # (real path or device/inode), so a link back to one of them is a loop. A
    # link to a sibling is not: it is copied again, as cp -rL and rsync -L do.
    ancestors: tuple[object, ...] = ()
    # A download's destination, reached by directory descriptors (``dest`` is
    # its path for messages and journals). None: the entry is the download's
    # root directory itself.
    local: LocalFile | None = None

    def child(
        self, source: str, dest: str, attrs: codec.Attrs, kind: str, local: LocalFile | None = None
    ) -> Item:
        return Item(source, dest, attrs, kind, self.ancestors, local)

    @property
    def size(self) -> int:
        return self.attrs.size or 0

    @property
    def times(self) -> tuple[int, int] | None:
        atime, mtime = self.attrs.atime, self.attrs.mtime
        return (atime, mtime) if atime is not None and mtime is not None else None


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
