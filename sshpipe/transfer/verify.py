"""End-to-end checks of a copy before it takes its final name (``TransferConfig.verify``).

The SHA-256 of what was transferred is computed while the bytes flow, in file
order (a download's replies come out of order: ``OrderedHash`` holds the early
ones, counted in the flight budget, until the gap before them fills), so the
local side is never read a second time. It is then compared with the server's
own ``sha256sum`` of the file when the server runs commands; a server that
runs none gets a read-back over SFTP if asked ("read-back"), else a size check.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shlex
from collections.abc import Awaitable, Callable
from functools import partial

from .._config import DEFAULT_STALL_TIMEOUT
from .._errors import IntegrityError
from ..core.codec import wire
from ..core.reorder import ReorderBuffer
from ..core.untrusted import command_output_cap, command_timeout
from ..local.dirfd import LocalFile, open_regular
from ..local.target import run_blocking
from ..transport.sftp import SFTPSession

_SHA256 = re.compile(r"[0-9a-f]{64}")
# (path, size) -> its SHA-256 on the server, or None where it cannot say
RemoteHash = Callable[[str, int], Awaitable[str | None]]


class OrderedHash:
    """SHA-256 of pieces given in any order, taken in file order."""

    def __init__(self) -> None:
        self._reorder = ReorderBuffer()
        self._hash = hashlib.sha256()

    @property
    def buffered(self) -> int:
        """Bytes held until the gap before them fills."""
        return self._reorder.buffered

    def add(self, offset: int, data: bytes) -> None:
        self._reorder.add(offset, data)
        for piece in self._reorder.pop_ready():
            self._hash.update(piece)

    def update(self, data: bytes) -> None:
        """The next bytes in order (an upload reads its file in order)."""
        self.add(self._reorder.delivered, data)

    def hexdigest(self, size: int) -> str:
        """The digest of the first ``size`` bytes; all of them must have been added."""
        if self._reorder.delivered != size or self._reorder.buffered:
            raise IntegrityError(
                "(in memory)",
                f"hashed {self._reorder.delivered} bytes in order, the file has {size}",
            )
        return self._hash.hexdigest()


def file_sha256(path: str | os.PathLike[str] | LocalFile, size: int) -> str:
    """SHA-256 of a local file's first ``size`` bytes (blocking: run it in a thread).

    For a resumed copy, whose bytes did not all flow through this run. A
    download's file is opened through its directory's descriptor, as every
    file under a destination is (``_localdir``).
    """
    digest = hashlib.sha256()
    fd = (
        open_regular(path, write=False)
        if isinstance(path, LocalFile)
        else os.open(path, os.O_RDONLY)
    )
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, "not a regular file", str(path))
    with open(fd, "rb") as file:
        left = size
        while left > 0 and (chunk := file.read(min(left, 1 << 20))):
            digest.update(chunk)
            left -= len(chunk)
    return digest.hexdigest()


async def digest_of(
    streamed: OrderedHash | None, path: str | os.PathLike[str] | LocalFile, size: int
) -> str:
    """The copy's SHA-256: the one taken as the bytes flowed, else read from ``path``.

    A resumed copy's kept bytes never flowed through this run, so it has none.
    """
    if streamed is not None:
        return streamed.hexdigest(size)
    return await run_blocking(file_sha256, path, size)


async def remote_sha256(sftp: SFTPSession, path: str, size: int) -> str | None:
    """The server's ``sha256sum`` of ``path``, or None if it runs no commands (or lacks it).

    ``size``: the file's, so the command may take as long as reading it does.

    Raises:
        ProtocolError: it printed more than one line of hash and name can be.
    """
    if sftp.run_command is None:
        return None
    result = await sftp.run_command(
        f"sha256sum -- {shlex.quote(path)}",
        within=command_timeout(sftp.stall_timeout or DEFAULT_STALL_TIMEOUT, size),
        max_output=command_output_cap(1, len(wire(path))),
    )
    if result is None or result[0] != 0:
        return None
    words = result[1].split()
    return words[0] if words and _SHA256.fullmatch(words[0]) else None


async def check(
    sftp: SFTPSession,
    path: str,
    *,
    level: str,
    size: int,
    digest: str,
    read_back: Callable[[], Awaitable[str]],
    shown: str,
    remote_hash: RemoteHash | None = None,
) -> str:
    """Compare the copy with the server's file at ``path``; the level achieved.

    Args:
        level: "size", "hash" or "read-back" (see TransferConfig.verify).
        size, digest: what was transferred.
        read_back: hashes the server's file over SFTP.
        shown: the path named in errors (the user's, not a temporary one).
        remote_hash: the server's SHA-256 of a path by other means than an
            exec of its own (a tree's shell, kept open: a connection full of
            channels has no room for one more session).

    Raises:
        IntegrityError: they differ.
    """
    if level in ("hash", "read-back"):
        theirs = await (remote_hash or partial(remote_sha256, sftp))(path, size)
        if theirs is not None:
            same(shown, "sha256 (sha256sum on the server)", theirs, digest)
            return "hash-remote"
        if level == "read-back":
            same(shown, "sha256 (read back)", await read_back(), digest)
            return "read-back"
    theirs_size = (await sftp.stat(path)).size
    same(shown, "size", str(theirs_size), str(size))
    return "size"


def same(path: str, what: str, theirs: str, ours: str) -> None:
    """Raise IntegrityError naming ``path`` unless the server's ``what`` equals ours."""
    if theirs != ours:
        raise IntegrityError(path, f"{what} differs: the server has {theirs}, the copy {ours}")
