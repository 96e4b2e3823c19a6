"""Upload sources: a local file read by offset off the event loop, a small file whole,
a pipe streamed.

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
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..core.errors import IntegrityError, LocalError
from ..core.identity import LocalIdentity, change
from .device import pipe_chunks, special_kind
from .dirfd import local_error
from .target import run_blocking

# Uploads read their blocks in one thread of their own, made at the first read.
# A block is allocated by the thread that reads it, and glibc gives each
# thread a heap (arena) of its own, which keeps what it once held: read by the
# loop's default executor (six threads here), 200 concurrent puts grew the
# process by 30 MiB more than read by one. On the loop thread itself a slow
# disk would stall every transfer. One thread reads a 255 KiB block from the
# page cache in about 0.05 ms: gigabytes a second for all uploads together.
_reader: ThreadPoolExecutor | None = None
_reader_made = threading.Lock()


def _upload_reader() -> ThreadPoolExecutor:
    global _reader
    with _reader_made:
        if _reader is None:
            _reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sshpipe-reader")
        return _reader


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


def is_pipe(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a FIFO (a pipe: ``<(command)``, /dev/stdin piped), read once."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


class LocalSource:
    """An upload source: a regular local file read by offset, or a pipe read once.

    A pipe (``pipe``) is streamed: read in order as its writer writes, until
    it closes (``chunks``); it cannot be read again, so it is neither resumed
    nor sent again after a drop. A device or a socket is refused: /dev/zero
    never ends, and a disk is ``dd``'s to read.

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
        self.pipe = False

    def __repr__(self) -> str:
        return f"<LocalSource {self.path} open={self._fd is not None} pipe={self.pipe}>"

    def open(self) -> None:
        """Open it, without blocking the loop on a FIFO no writer has opened yet.

        Raises:
            LocalError: missing, unreadable, a directory, a device or a socket.
        """
        try:
            # Looked at before it is opened: opening a device can do something
            # (a tape rewinds), and a socket cannot be opened at all.
            _refuse_unreadable(self.path, os.stat(self.path).st_mode)
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            info = os.fstat(self._fd)
        except OSError as exc:
            self.close()
            raise local_error(self.path, exc) from exc
        if stat.S_ISFIFO(info.st_mode):
            self.pipe = True  # read as the loop finds it readable (``chunks``)
        else:
            try:
                _refuse_unreadable(self.path, info.st_mode)  # swapped since it was looked at
            except LocalError:
                self.close()
                raise
            os.set_blocking(self._fd, True)
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

    def chunks(self) -> AsyncIterator[bytes]:
        """A pipe's bytes, in pieces of any size, until its writers close it."""
        assert self._fd is not None and self.pipe
        return pipe_chunks(self._fd, str(self.path))

    async def read_blocks(
        self, offset: int, length: int, count: int, *, in_thread: bool = True
    ) -> list[bytes]:
        assert self._fd is not None
        try:
            if not in_thread:
                return _read_batch(self._fd, offset, length, count)
            return await run_blocking(
                _read_batch, self._fd, offset, length, count, executor=_upload_reader()
            )
        except OSError as exc:
            raise local_error(self.path, exc, offset) from exc

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _refuse_unreadable(path: Path, mode: int) -> None:
    """Raise LocalError unless ``mode`` is a regular file's or a FIFO's."""
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return
    if stat.S_ISDIR(mode):
        raise LocalError(str(path), "is a directory")
    kind = special_kind(mode) or "not a regular file"
    raise LocalError(str(path), f"is {kind}; only a regular file or a pipe is uploaded")
