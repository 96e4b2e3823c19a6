"""SFTP servers that misbehave on purpose, for the engine's fault tests.

Each is a subclass of asyncssh's ``SFTPServer``, chrooted at the served root,
that counts what it served in a ``Tracker`` and bends one thing: short or
reordered replies, a slow disk, a file that shrinks or grows under the reader,
a failing read or write, an overlong reply, a connection dropped mid-way.
``factory`` turns one into the ``sftp_factory`` that ``embedded_server`` takes.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import asyncssh

from .embedded import SFTPFactory

__all__ = [
    "BLOCK",
    "DropsConnection",
    "DropsConnectionOnWrite",
    "FailsReadAt",
    "FailsWriteAt",
    "Grows",
    "OverlongReads",
    "Reordering",
    "ShortReads",
    "Shrinks",
    "Slow",
    "SlowShortReads",
    "Tracker",
    "TrackingServer",
    "factory",
]

# The block size the fault tests ask for: the offsets faults fire at are in blocks.
BLOCK = 32 * 1024

State = TypeVar("State")


def factory(
    cls: Callable[[Any, Path, State], asyncssh.SFTPServer], state: State, **extra: Any
) -> SFTPFactory:
    """An ``sftp_factory`` building ``cls(chan, root, state)`` with ``extra`` set as attributes.

    ``state`` (a ``Tracker``, a recorder) is shared by every session, so a test
    reads what all of them served.
    """

    def build(chan: Any, root: Path) -> asyncssh.SFTPServer:
        server = cls(chan, root, state)
        for name, value in extra.items():
            setattr(server, name, value)
        return server

    return build


class Tracker:
    """What the server saw: open handles, reads served, replies reordered."""

    def __init__(self) -> None:
        self.open_handles = 0
        self.reads = 0
        self.writes = 0
        self.reordered = 0


class TrackingServer(asyncssh.SFTPServer):
    tracker: Tracker

    def __init__(self, chan: Any, root: Path, tracker: Tracker) -> None:
        super().__init__(chan, chroot=os.fsencode(root))
        self.tracker = tracker
        self.root = root

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        file_obj = super().open(path, pflags, attrs)
        self.tracker.open_handles += 1
        return file_obj

    def close(self, file_obj: object) -> None:
        self.tracker.open_handles -= 1
        super().close(file_obj)

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        self.tracker.reads += 1
        return super().read(file_obj, offset, size)

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        self.tracker.writes += 1
        return super().write(file_obj, offset, data)


# -- servers that answer correctly but awkwardly --------------------------------


class ShortReads(TrackingServer):
    """Never returns more than 4096 bytes, and often fewer (filexfer-02 allows it)."""

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        cap = random.Random(offset).choice([4096, 4096, 1000, 1])
        return super().read(file_obj, offset, min(size, cap))


class SlowShortReads(ShortReads):
    """Short reads, each 5 ms late (a loaded machine's in-process server)."""

    async def read(self, file_obj: object, offset: int, size: int) -> Any:
        await asyncio.sleep(0.005)
        return super().read(file_obj, offset, size)


class Reordering(TrackingServer):
    """Holds replies back and sends them in a shuffled order."""

    def __init__(self, chan: Any, root: Path, tracker: Tracker) -> None:
        super().__init__(chan, root, tracker)
        self._held: list[bytes] = []
        self._rng = random.Random(7)
        self._send = chan.write
        chan.write = self._hold  # every SFTP reply is exactly one channel write

    def _hold(self, data: bytes, datatype: Any = None) -> None:
        self._held.append(bytes(data))
        if len(self._held) == 1:
            asyncio.get_running_loop().call_later(0.002, self._flush)
        if len(self._held) >= 16:
            self._flush()

    def _flush(self) -> None:
        held, self._held = self._held, []
        order = list(range(len(held)))
        self._rng.shuffle(order)
        self.tracker.reordered += sum(1 for pos, idx in enumerate(order) if pos != idx)
        for idx in order:
            if not self.channel.is_closing():
                self._send(held[idx])


class Slow(TrackingServer):
    """Every read and write waits 2 ms first, so many requests are in flight at once."""

    async def read(self, file_obj: object, offset: int, size: int) -> bytes:
        await asyncio.sleep(0.002)
        data: bytes = super().read(file_obj, offset, size)
        return data

    async def write(self, file_obj: object, offset: int, data: bytes) -> int:
        await asyncio.sleep(0.002)
        written: int = super().write(file_obj, offset, data)
        return written


# -- files that change under us ------------------------------------------------


class Shrinks(TrackingServer):
    """Truncates the file to ``keep`` bytes once ``after`` reads were served."""

    after = 3
    keep = 100_000

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        if self.tracker.reads == self.after:
            os.truncate(self.root / "src.bin", self.keep)
        return super().read(file_obj, offset, size)


class Grows(TrackingServer):
    """Appends ``extra`` bytes to the file at the first read."""

    extra = b""

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        if self.tracker.reads == 0:
            with open(self.root / "src.bin", "ab") as file:
                file.write(self.extra)
        return super().read(file_obj, offset, size)


# -- failures ------------------------------------------------------------------


class FailsReadAt(TrackingServer):
    fail_offset = 10 * BLOCK

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        if offset == self.fail_offset:
            raise asyncssh.SFTPFailure("injected read failure")
        return super().read(file_obj, offset, size)


class FailsWriteAt(TrackingServer):
    fail_offset = 10 * BLOCK

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        if offset == self.fail_offset:
            raise asyncssh.SFTPFailure("No space left on device")
        return super().write(file_obj, offset, data)


class OverlongReads(TrackingServer):
    """Hostile: answers a READ with more bytes than were asked for."""

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        data: bytes = super().read(file_obj, offset, size)
        return data + b"X" * 10 if offset == 4 * BLOCK else data


class DropsConnection(TrackingServer):
    """Closes the whole SSH connection in the middle of the transfer."""

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        if self.tracker.reads == 20:
            self.channel.get_connection().abort()
        return super().read(file_obj, offset, size)


class DropsConnectionOnWrite(TrackingServer):
    """Closes the whole SSH connection at the 20th WRITE of the transfer."""

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        if self.tracker.writes == 20:
            self.channel.get_connection().abort()
        return super().write(file_obj, offset, data)
