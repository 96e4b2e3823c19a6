"""``RemoteStat``: what the server says of one remote path, typed (pure: no I/O).

Built from SFTP v3 attributes (filexfer-02 §5). Every field but ``path`` and
``name`` may be None: a server sends only the attributes it has. The fields
are what fsspec's ``info()`` dicts carry (name, size, type, mode, mtime), so
a filesystem layer maps one to the other without asking the server again.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Literal

from .codec import Attrs

RemoteKind = Literal["file", "directory", "symlink", "other"]

_KINDS: dict[str, RemoteKind] = {"file": "file", "dir": "directory", "symlink": "symlink"}


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteStat:
    """One remote path's attributes, as STAT, LSTAT or a listing gave them.

    Attributes:
        path: the remote path, as asked (for a listing: the directory joined
            with the entry's name).
        name: its last component.
        type: "file", "directory", "symlink" (LSTAT and listings only: STAT
            follows links) or "other" (fifo, socket, device).
        size: bytes, or None when the server sent no size.
        mode: the permission and type bits (``st_mode``), or None.
        mtime, atime: seconds since the epoch, or None.
        uid, gid: numeric owner and group, or None.
    """

    path: str
    name: str
    type: RemoteKind
    size: int | None = None
    mode: int | None = None
    mtime: int | None = None
    atime: int | None = None
    uid: int | None = None
    gid: int | None = None

    def is_dir(self) -> bool:
        return self.type == "directory"

    def is_file(self) -> bool:
        return self.type == "file"

    def is_symlink(self) -> bool:
        return self.type == "symlink"


def remote_stat(path: str, attrs: Attrs, name: str | None = None) -> RemoteStat:
    """The ``RemoteStat`` of ``path`` from the attributes the server sent for it.

    A server that sends no permissions says nothing of the type either; it is
    taken for a file (as ``Attrs.kind`` does: an OPEN would say otherwise).
    """
    if name is None:
        name = posixpath.basename(path.rstrip("/")) or path
    return RemoteStat(
        path=path,
        name=name,
        type=_KINDS.get(attrs.kind, "other"),
        size=attrs.size,
        mode=attrs.permissions,
        mtime=attrs.mtime,
        atime=attrs.atime,
        uid=attrs.uid,
        gid=attrs.gid,
    )
