"""Upload sources: a local file read by offset off the event loop, a small file whole.

The source is the user's own: it is opened by path (a tree's symlinks are
recreated from their text, and followed only with ``-L``). Its identity
(``core.identity``) is taken as it is opened: a file changed while it is
read makes a copy of no version of it, so ``LocalSource.check_unchanged``
(before the copy takes its name) and ``read_whole_file`` (after reading)
refuse it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .._errors import IntegrityError, LocalError
from ..core.identity import LocalIdentity, change
from .dirfd import local_error
from .target import run_blocking


def _read_batch(fd: int, offset: int, length: int, count: int) -> list[bytes]:
    """Up to ``count`` blocks of ``length`` bytes from ``offset`` on; stops at EOF."""
    blocks = []
    for _ in range(count):
        data = os.pread(fd, length, offset)
        if not data:
            break
        blocks.append(data)
        offset += len(data)
        if len(data) < length:
            break  # short read of a regular file: at EOF now (it may grow later)
    return blocks


def read_whole_file(path: str, size: int) -> bytes | None:
    """A small regular file's bytes, or None if it holds more than ``size`` now.

    Reading stops one byte past ``size``: a file that grew since it was
    listed is never pulled into memory whole. Once read, the bytes are sent
    from memory: only a change while they were read is the copy's.

    Raises:
        LocalError: missing, unreadable, or not a regular file (any more).
        IntegrityError: it changed while it was read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise LocalError(path, "is not a regular file")
            parts = []
            left = size + 1
            while left > 0 and (data := os.read(fd, left)):
                parts.append(data)
                left -= len(data)
            changed = change(LocalIdentity.of(info), LocalIdentity.of(os.fstat(fd)))
        finally:
            os.close(fd)
    except OSError as exc:
        raise local_error(path, exc) from exc
    if left <= 0:
        return None
    if changed is not None:
        raise IntegrityError(path, f"changed while it was read: {changed}")
    return b"".join(parts)


class LocalSource:
    """An upload source: a regular local file read by offset.

    Attributes:
        identity: the file as it was opened (device, inode, size, mtime, ctime).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self.size = 0
        self.mode = 0o644
        self.mtime_ns = 0
        self.identity: LocalIdentity | None = None

    def __repr__(self) -> str:
        return f"<LocalSource {self.path} open={self._fd is not None}>"

    def open(self) -> None:
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
            info = os.fstat(self._fd)
        except OSError as exc:
            raise local_error(self.path, exc) from exc
        if not stat.S_ISREG(info.st_mode):
            self.close()
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise LocalError(str(self.path), f"is {kind}")
        self.size = info.st_size
        self.mode = info.st_mode & 0o7777
        self.mtime_ns = info.st_mtime_ns
        self.identity = LocalIdentity.of(info)

    def check_unchanged(self) -> None:
        """Refuse a source that is not the file it was when opened (before its copy commits).

        Both what is open (written in place: size, mtime, ctime) and what the
        path names now (replaced by another file: device and inode): either
        way the copy is not of what the path holds.

        Raises:
            IntegrityError: it changed, saying how.
        """
        assert self._fd is not None and self.identity is not None
        try:
            held = LocalIdentity.of(os.fstat(self._fd))
            named = LocalIdentity.of(os.stat(self.path))
        except FileNotFoundError:
            raise IntegrityError(str(self.path), "was removed while it was uploaded") from None
        except OSError as exc:
            raise local_error(self.path, exc) from exc
        changed = change(self.identity, held) or change(self.identity, named)
        if changed is not None:
            raise IntegrityError(str(self.path), f"changed while it was uploaded: {changed}")

    async def read_blocks(
        self, offset: int, length: int, count: int, *, in_thread: bool = True
    ) -> list[bytes]:
        assert self._fd is not None
        try:
            if not in_thread:
                return _read_batch(self._fd, offset, length, count)
            return await run_blocking(_read_batch, self._fd, offset, length, count)
        except OSError as exc:
            raise local_error(self.path, exc, offset) from exc

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
