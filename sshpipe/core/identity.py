"""Whether a file is still the one it was: a local source by its stat, a remote file by its attrs.

A put reads its source for as long as the upload takes (and again after a
dropped connection); a file rewritten meanwhile makes a copy of no version of
it, which a hash of what was sent cannot see: it matches what the server got.
So the source's ``LocalIdentity`` (device, inode, size, mtime, ctime) is taken
when it is opened and compared before the copy takes its name, and a resume
journal records it: ``change`` says what differs, in words. The ctime catches
a rewrite that kept the size and put the mtime back (``touch -r``, ``cp -p``
over it): no write leaves it as it was.

SFTP v3 shows no inode (filexfer-02 §5), so a remote file is told apart by
what it shows (``same_file``: its type and mode, size, owner and mtime; not
its atime, which reading it moves). ``rename_problem`` is the verdict on a
RENAME the server said it did, from what is seen under both names after it:
the old name must be gone, and the new one must not still name the file it
was to replace.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from .codec import Attrs


@dataclass(frozen=True, slots=True)
class LocalIdentity:
    """What a local file is: its device and inode, and what a write changes (size, mtime, ctime)."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, info: os.stat_result) -> LocalIdentity:
        return cls(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)

    def header(self) -> dict[str, int]:
        """As a resume journal's header records it (JSON)."""
        return {
            "dev": self.device,
            "ino": self.inode,
            "size": self.size,
            "mtime_ns": self.mtime_ns,
            "ctime_ns": self.ctime_ns,
        }

    def from_header(self, header: Mapping[str, object]) -> LocalIdentity:
        """The identity a journal's header recorded; a field it lacks (a journal of an
        older sshpipe, which kept only the size and mtime) is taken as this one's."""

        def field(key: str, default: int) -> int:
            value = header.get(key, default)
            return value if isinstance(value, int) else -1  # not ours: differs

        return LocalIdentity(
            field("dev", self.device),
            field("ino", self.inode),
            field("size", self.size),
            field("mtime_ns", self.mtime_ns),
            field("ctime_ns", self.ctime_ns),
        )


def change(was: LocalIdentity, now: LocalIdentity) -> str | None:
    """What differs between two identities of one path, in words; None if nothing does.

    Another inode is another file, whatever else it shares; the size and mtime
    say how it was changed; a ctime alone, that it was changed and hidden.
    """
    if (was.device, was.inode) != (now.device, now.inode):
        return "it is another file (its inode changed)"
    changes = []
    if was.size != now.size:
        changes.append(f"its size changed from {was.size} to {now.size} bytes")
    if was.mtime_ns != now.mtime_ns:
        changes.append(f"its mtime changed from {seconds(was.mtime_ns)} to {seconds(now.mtime_ns)}")
    if changes:
        return " and ".join(changes)
    if was.ctime_ns != now.ctime_ns:
        return "its ctime changed (rewritten with its size and mtime kept, or chmod, chown)"
    return None


def seconds(ns: int) -> str:
    """A time in nanoseconds as seconds since the epoch, to the nanosecond."""
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def same_file(one: Attrs, other: Attrs) -> bool:
    """Whether two attribute sets of SFTP v3 may be one file's, as far as they show.

    Type and mode, size, owner and mtime; the atime is left out: reading the
    file (``--verify``'s ``sha256sum``) moves it.
    """
    return (one.permissions, one.size, one.uid, one.gid, one.mtime) == (
        other.permissions,
        other.size,
        other.uid,
        other.gid,
        other.mtime,
    )


def rename_problem(
    there: Attrs | None,
    *,
    left: bool,
    moved: Attrs | None,
    replaced: Attrs | None,
    size: int | None = None,
    old_name: str = "its temporary file",
) -> str | None:
    """What is wrong after a RENAME the server answered OK, or None: it was done.

    Args:
        there: what the new name names now (None: nothing).
        left: the old name still names something.
        moved: the file renamed, as it was just before (None: not known).
        replaced: what the new name named before (None: nothing, or not known).
        size: an upload's: the bytes written; the new name must name a
            regular file of that size (None: any kind ``moved`` was).
        old_name: how the message names the old name.

    A file at the new name that is the one replaced, and not the one moved,
    means the old name was removed and nothing put in its place. That takes
    knowing both: where the two cannot be told apart (``same_file``), an
    upload makes them differ first (``remoteplace`` marks its temporary
    file's mtime); a rename (or a server answering out of order) that cannot
    tell rests on the old name being gone.
    """
    if left:
        return f"{old_name} is still there"
    if there is None:
        return "there is nothing there" if size is None else "there is no file there"
    want = "file" if size is not None else (moved.kind if moved is not None else there.kind)
    if there.kind != want:
        return f"what is there is a {there.kind}"
    if size is not None and there.size is not None and there.size != size:
        return f"the file there has {there.size} bytes, not {size}"
    if (
        replaced is not None
        and moved is not None
        and same_file(there, replaced)
        and not same_file(there, moved)
    ):
        return f"what is there is still the {replaced.kind} it was to replace"
    return None
