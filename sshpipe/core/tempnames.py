"""The names of sshpipe's own files beside a destination, on either side.

- ``.NAME.sshpipe-XXXXXX.partial``: a copy in progress, renamed over ``NAME``
  once complete (six random hex digits: a name of its own, created with EXCL);
- ``.NAME.sshpipe.partial`` and ``.NAME.sshpipe.journal``: ``--resume``'s,
  fixed so the next run finds them.

Each must fit in one directory entry: NAME_MAX, 255 bytes on every file system
sshpipe meets (ext4, XFS, btrfs, tmpfs, ZFS, and OpenSSH's servers on them),
counted in the bytes that go on the wire or to the kernel (UTF-8, names that
are not kept byte for byte by ``surrogateescape``). A ``NAME`` too long for
that keeps its head, as much as fits, then ``~`` and 16 hex digits of the
SHA-256 of the whole name: still hidden, still of the shapes below, and still
one fixed name per ``NAME`` for ``--resume``. A 255-byte ``NAME`` copies as a
short one does (OpenSSH's ``sftp`` and ``scp`` write it in place, so they
never meet the limit).

Only names of ``TEMP_SHAPE`` are ever removed by a sweep (``durability.ledger``),
and a server's listing may not plant any of ``OURS`` (``core.untrusted``).
"""

from __future__ import annotations

import hashlib
import re

# The longest name one directory entry holds (Linux's NAME_MAX; POSIX's
# _XOPEN_NAME_MAX). A longer one is ENAMETOOLONG on create, on either side.
NAME_MAX = 255
# Hex digits of the SHA-256 of a name too long to keep whole: 64 bits, so two
# long names of one directory sharing their first ~200 bytes stay apart.
_HASH_DIGITS = 16

# A copy in progress: the only shape a sweep removes.
TEMP_SHAPE = re.compile(r"\..+\.sshpipe-[0-9a-f]{6}\.partial", re.DOTALL)
# Every name of ours: a copy in progress, a resume partial or journal.
OURS = re.compile(r"\..+\.sshpipe(-[0-9a-f]{6}\.partial|\.partial|\.journal)", re.DOTALL)


def temp_name(name: str, token: str) -> str:
    """``.NAME.sshpipe-TOKEN.partial`` for ``name``, within NAME_MAX.

    Args:
        token: six hex digits, random (``secrets.token_hex(3)``): the edges pick them.
    """
    return _fitted(name, f".sshpipe-{token}.partial")


def resume_name(name: str, kind: str) -> str:
    """``.NAME.sshpipe.partial`` (``kind`` "partial") or ``.NAME.sshpipe.journal``."""
    return _fitted(name, f".sshpipe.{kind}")


def beside(path: str, name_of: str) -> str:
    """``path`` with its last component replaced by ``name_of`` (a remote path: ``/`` only)."""
    head, sep, _ = path.rpartition("/")
    return f"{head}{sep}{name_of}"


def is_temp_name(name: str) -> bool:
    """Whether ``name`` (one component) has the shape of a copy in progress of ours."""
    return TEMP_SHAPE.fullmatch(name) is not None


def is_ours(name: str) -> bool:
    """Whether ``name`` (one component) is one sshpipe gives its own partial files and journals."""
    return OURS.fullmatch(name) is not None


def _fitted(name: str, suffix: str) -> str:
    """``.`` + ``name`` + ``suffix``, the name cut and hashed when that passes NAME_MAX."""
    whole = _bytes(name)
    room = NAME_MAX - 1 - len(_bytes(suffix))
    if len(whole) <= room:
        return f".{name}{suffix}"
    digest = hashlib.sha256(whole).hexdigest()[:_HASH_DIGITS]
    head = _head(name, room - 1 - _HASH_DIGITS)
    return f".{head}~{digest}{suffix}"


def _head(name: str, limit: int) -> str:
    """The longest prefix of ``name`` of at most ``limit`` bytes, cut between characters."""
    used = 0
    for index, char in enumerate(name):
        used += len(_bytes(char))
        if used > limit:
            return name[:index]
    return name


def _bytes(text: str) -> bytes:
    # What the name is on the wire (``codec.wire``) and to the kernel (os.fsencode).
    return text.encode("utf-8", "surrogateescape")
