"""Destinations and sources that are not regular files: FIFOs and devices.

A download goes to a temporary name renamed over its destination, so
``get host:big /dev/null`` (a speed test), run as root, replaced /dev/null
with a regular file, and a FIFO someone read from was replaced as well while
its reader waited for ever. scp writes into them. Here a FIFO or a character
device that the user names (or /dev/stdout, a link to one of our own
descriptors) is written into, in file order (``DeviceSink``): no temporary
name, no rename, no truncation, no fsync (a pipe or a device has nothing to
make durable, and /dev/null's fsync fails), its mode and times untouched. A
block device or a socket is refused: writing a file's bytes over a disk is
``dd``'s job, done on purpose, and a socket cannot be opened at all. Names a
tree (or a hostile server) chose are never written into: whatever is not a
regular file there is refused (``local.target``), never replaced.

Opening never blocks the loop: a FIFO no reader has opened yet is tried
again every ``FIFO_WAIT`` seconds until one does (a shell's ``> fifo`` waits
the same way, in ``open``), and a full pipe is waited on with the loop's
reader and writer callbacks, not in ``write``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import stat
from collections.abc import AsyncIterator

from ..core.errors import LocalError
from .dirfd import LocalFile, local_error

logger = logging.getLogger("sshpipe.local")

# Seconds between tries to open a FIFO for writing while it has no reader:
# a consumer started a moment after the copy is found within a blink.
FIFO_WAIT = 0.05
# Bytes read from a pipe at a time: a pipe holds 64 KiB by default, so one
# read takes what is there; the upload cuts them into its own blocks.
PIPE_READ = 256 * 1024


def special_kind(mode: int) -> str | None:
    """What a file that is neither regular, a directory nor a symlink is, in words."""
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return None


def written_in_order(mode: int) -> bool:
    """A FIFO or a character device: written into, in file order, never replaced."""
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def device_at(file: LocalFile) -> os.stat_result | None:
    """What a name of the user's holds if it is a FIFO or a character device; None
    otherwise (nothing, a regular file or a directory, or a symlink: replaced, as
    ever, never written through).

    One symlink is followed: a link to one of this process's own descriptors
    (/dev/stdout is /proc/self/fd/1, /dev/fd/N a name in /proc/self/fd): the
    user asks for that descriptor, and replacing /dev/stdout with a file, as
    root, broke it for every process.

    Raises:
        LocalError: a block device or a socket (never written), a descriptor
            link to a regular file (neither written through nor replaced), or
            the name could not be looked at.
    """
    with file.dir.descriptor() as fd:
        try:
            info = os.stat(file.name, dir_fd=fd, follow_symlinks=False)
            linked = stat.S_ISLNK(info.st_mode)
            if linked:
                if not _descriptor_link(file, fd):
                    return None
                info = os.stat(file.name, dir_fd=fd)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise local_error(file, exc) from exc
    if written_in_order(info.st_mode):
        return info
    if linked and stat.S_ISREG(info.st_mode):
        raise LocalError(
            str(file), "is a descriptor of this process; not replaced (name the file itself)"
        )
    kind = special_kind(info.st_mode)
    if kind is not None:
        raise LocalError(str(file), f"is {kind}; not written (only a FIFO or character device is)")
    return None


# Where a process's descriptors show as links: /proc/self/fd/N (/dev/stdout's
# target) or /proc/PID/fd/N, and /dev/fd/N (/dev/fd is a link to /proc/self/fd).
_DESCRIPTOR = re.compile(r"/(?:proc/(?:self|\d+)|dev)/fd/\d+")
_DESCRIPTORS = re.compile(r"/proc/(?:self|\d+)/fd")


def _descriptor_link(file: LocalFile, dir_fd: int) -> bool:
    """Whether the link at ``file`` stands for one of our descriptors."""
    if _DESCRIPTORS.fullmatch(os.path.realpath(str(file.dir))):
        return True  # /dev/fd/1, /proc/self/fd/1: the directory of our descriptors
    return _DESCRIPTOR.fullmatch(os.readlink(file.name, dir_fd=dir_fd)) is not None


class DeviceSink:
    """A FIFO or character device written in order, without blocking the loop.

    ``open`` waits for a FIFO's reader; ``write`` waits while a pipe is full.
    ``close`` always frees the descriptor, twice is fine.
    """

    def __init__(self, file: LocalFile) -> None:
        self.file = file
        self.kind = "a FIFO or device"
        self._fd: int | None = None
        self.written = 0  # bytes written so far (the offset of the next)

    def __repr__(self) -> str:
        return f"<DeviceSink {self.file} {self.kind} written={self.written}>"

    async def open(self) -> None:
        """Open for writing; for a FIFO, once something reads from it.

        Raises:
            LocalError: it cannot be opened, or it is no longer a FIFO or a
                character device (replaced meanwhile: nothing is written).
        """
        flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        waited = False
        while True:
            try:
                with self.file.dir.descriptor() as dir_fd:
                    fd = os.open(self.file.name, flags, dir_fd=dir_fd)
                break
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: a FIFO with no reader yet
                    raise local_error(self.file, exc) from exc
            if not waited and logger.isEnabledFor(logging.DEBUG):
                logger.debug("%s: a FIFO with no reader yet: waiting for one", self.file)
            waited = True
            await asyncio.sleep(FIFO_WAIT)
        mode = os.fstat(fd).st_mode
        if not written_in_order(mode):  # swapped since it was looked at
            os.close(fd)
            raise LocalError(str(self.file), "changed before it was opened; nothing written")
        self.kind = special_kind(mode) or self.kind
        self._fd = fd

    async def write(self, data: bytes | memoryview) -> None:
        """Write all of ``data`` after what was written.

        Raises:
            LocalError: the device refused it (LocalNoSpace for /dev/full), or
                the FIFO's reader went away (a broken pipe).
        """
        assert self._fd is not None
        view = memoryview(data)
        while view:
            try:
                count = os.write(self._fd, view)
            except BlockingIOError:
                await _ready(self._fd, write=True)
                continue
            except OSError as exc:
                raise local_error(self.file, exc, self.written) from exc
            view = view[count:]
            self.written += count

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


async def pipe_chunks(fd: int, path: str) -> AsyncIterator[bytes]:
    """What a pipe (a FIFO opened non-blocking) delivers until its writers are done.

    Waits for readable data before every read: a FIFO read before any writer
    opened it would look ended, while the loop only finds it readable once a
    writer wrote or came and went.

    Raises:
        LocalError: a read failed.
    """
    while True:
        await _ready(fd, write=False)
        try:
            data = os.read(fd, PIPE_READ)
        except BlockingIOError:
            continue  # woken for nothing (another reader took it)
        except OSError as exc:
            raise local_error(path, exc) from exc
        if not data:
            return
        yield data


async def _ready(fd: int, *, write: bool) -> None:
    """Until the loop finds ``fd`` writable (or readable)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    try:
        if write:
            loop.add_writer(fd, wake)
        else:
            loop.add_reader(fd, wake)
    except (OSError, ValueError):  # a device the loop cannot poll: try again in a while
        await asyncio.sleep(FIFO_WAIT)
        return
    try:
        await ready
    finally:
        if write:
            loop.remove_writer(fd)
        else:
            loop.remove_reader(fd)
