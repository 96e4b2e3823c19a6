"""Whether a file is still the one it was (``core.identity``): tables, no I/O."""

from __future__ import annotations

import pytest

from sshpipe.core.codec import Attrs
from sshpipe.core.identity import LocalIdentity, change, rename_problem, same_file

WAS = LocalIdentity(
    device=2049, inode=77, size=1000, mtime_ns=1_700_000_000_123_456_789, ctime_ns=5
)


@pytest.mark.parametrize(
    ("now", "said"),
    [
        (WAS, None),
        (LocalIdentity(2049, 78, 1000, WAS.mtime_ns, 5), "it is another file (its inode changed)"),
        (LocalIdentity(2050, 77, 1000, WAS.mtime_ns, 5), "it is another file (its inode changed)"),
        # Another file says so, whatever else it shares or not.
        (LocalIdentity(2049, 78, 9, 0, 0), "it is another file (its inode changed)"),
        (
            LocalIdentity(2049, 77, 2000, WAS.mtime_ns, 6),
            "its size changed from 1000 to 2000 bytes",
        ),
        (
            LocalIdentity(2049, 77, 1000, WAS.mtime_ns + 1, 6),
            "its mtime changed from 1700000000.123456789 to 1700000000.123456790",
        ),
        (
            LocalIdentity(2049, 77, 10, 2 * 10**9, 6),
            "its size changed from 1000 to 10 bytes and its mtime changed from "
            "1700000000.123456789 to 2.000000000",
        ),
        (
            LocalIdentity(2049, 77, 1000, WAS.mtime_ns, 6),
            "its ctime changed (rewritten with its size and mtime kept, or chmod, chown)",
        ),
    ],
)
def test_change_says_what_differs(now: LocalIdentity, said: str | None) -> None:
    assert change(WAS, now) == said


def test_a_journal_header_round_trips_and_an_older_one_compares_what_it_has() -> None:
    assert WAS.from_header(WAS.header()) == WAS
    older = {"size": 1000, "mtime_ns": WAS.mtime_ns}  # before identities were journaled
    assert change(WAS.from_header(older), WAS) is None
    assert change(WAS.from_header({**older, "ino": "77"}), WAS) is not None  # not ours: differs


FILE = Attrs(size=10, uid=0, gid=0, permissions=0o100644, atime=5, mtime=7)
TWIN = Attrs(size=10, uid=0, gid=0, permissions=0o100644, atime=9, mtime=7)  # read since
OTHER = Attrs(size=10, uid=0, gid=0, permissions=0o100644, atime=5, mtime=8)
DIR = Attrs(size=4096, permissions=0o040755, mtime=7)
LINK = Attrs(size=3, permissions=0o120777, mtime=7)


def test_same_file_ignores_the_atime_only() -> None:
    assert same_file(FILE, TWIN)
    for other in (OTHER, Attrs(size=11, uid=0, gid=0, permissions=0o100644, mtime=7), DIR):
        assert not same_file(FILE, other)
    assert not same_file(FILE, Attrs(size=10, uid=1, gid=0, permissions=0o100644, mtime=7))


@pytest.mark.parametrize(
    ("there", "left", "moved", "replaced", "size", "problem"),
    [
        # Done: the file written is there (an upload; a rename of anything).
        (FILE, False, FILE, None, 10, None),
        (FILE, False, FILE, OTHER, 10, None),
        (TWIN, False, FILE, OTHER, 10, None),  # read since (--verify): its atime moved
        (DIR, False, DIR, None, None, None),
        # A rename that copies (an object store) shows neither: nothing says it lied.
        (Attrs(size=10, permissions=0o100644, mtime=99), False, FILE, OTHER, 10, None),
        # The old name still there: the RENAME did nothing.
        (FILE, True, FILE, None, 10, "its temporary file is still there"),
        (OTHER, True, FILE, OTHER, 10, "its temporary file is still there"),
        # Nothing, or not a file, or not the size.
        (None, False, FILE, None, 10, "there is no file there"),
        (None, False, DIR, None, None, "there is nothing there"),
        (DIR, False, FILE, None, 10, "what is there is a dir"),
        (LINK, False, DIR, None, None, "what is there is a symlink"),
        (OTHER, False, None, None, 11, "the file there has 10 bytes, not 11"),
        # The old name removed, the file it was to replace left in place.
        (OTHER, False, FILE, OTHER, 10, "what is there is still the file it was to replace"),
        (
            DIR,
            False,
            FILE.__class__(size=4096, permissions=0o040700),
            DIR,
            None,
            "what is there is still the dir it was to replace",
        ),
        # What cannot be told: one file under both names, or the moved one unknown.
        (FILE, False, TWIN, FILE, 10, None),
        (OTHER, False, None, OTHER, 10, None),
    ],
)
def test_rename_problem(
    there: Attrs | None,
    left: bool,
    moved: Attrs | None,
    replaced: Attrs | None,
    size: int | None,
    problem: str | None,
) -> None:
    assert rename_problem(there, left=left, moved=moved, replaced=replaced, size=size) == problem
