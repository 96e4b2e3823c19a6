"""Upload sources: a local file read by offset off the event loop, a small file whole.

The source is the user's own: it is opened by path (a tree's symlinks are
recreated from their text, and followed only with ``-L``).
"""

from __future__ import annotations

import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .._errors import LocalError
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
    listed is never pulled into memory whole.

    Raises:
        LocalError: missing, unreadable, or not a regular file (any more).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise LocalError(path, "is not a regular file")
            parts = []
            left = size + 1
            while left > 0 and (data := os.read(fd, left)):
                parts.append(data)
                left -= len(data)
        finally:
            os.close(fd)
    except OSError as exc:
        raise local_error(path, exc) from exc
    if left <= 0:
        return None
    return b"".join(parts)


class LocalSource:
    """An upload source: a regular local file read by offset."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self.size = 0
        self.mode = 0o644
        self.mtime_ns = 0

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
