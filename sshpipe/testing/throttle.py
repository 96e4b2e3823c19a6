"""A server that turns connections away before the log-in, as sshd past its MaxStartups does.

``Throttle`` is a TCP proxy in front of any server (sshd, the embedded one):
the connections its ``drop`` picks are closed at once, the others carried
through untouched. sshd's own way (``say``, the default) writes
"Exceeded MaxStartups" and closes; ``say=None`` sends a bare RST, as a
client sees it when sshd closes with its version line unread. Deterministic,
where sshd's ``MaxStartups 10:30:100`` drops at random.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Callable
from types import TracebackType

__all__ = ["SSHD_SAYS", "Throttle", "first"]

# What sshd 8.x-9.x writes to a connection past MaxStartups before closing it.
SSHD_SAYS = b"Exceeded MaxStartups\r\n"


def first(count: int) -> Callable[[int], bool]:
    """A ``drop`` that turns away the first ``count`` connections (numbered from 1)."""
    return lambda number: number <= count


class Throttle:
    """Listens on a free loopback port; carries each connection to the target or drops it.

    Args:
        host, port: the server behind it.
        drop: given each connection's number (1, 2, ...), True turns it away.
        say: written before closing a dropped connection; None: a bare RST.

    Attributes:
        port: where it listens (once entered: ``async with``).
        accepted: connections accepted so far; ``dropped``: how many of them it dropped.
    """

    def __init__(
        self,
        host: str,
        port: int,
        drop: Callable[[int], bool],
        *,
        say: bytes | None = SSHD_SAYS,
    ) -> None:
        self._target = (host, port)
        self._drop = drop
        self._say = say
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0
        self.accepted = 0
        self.dropped = 0

    async def __aenter__(self) -> Throttle:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self._drop(self.accepted):
            self.dropped += 1
            if self._say is not None:
                writer.write(self._say)
            else:  # close with RST: linger on, for no time
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                far_reader, far_writer = await asyncio.open_connection(*self._target)
            except OSError:
                return
            try:
                await asyncio.gather(_copy(reader, far_writer), _copy(far_reader, writer))
            finally:
                far_writer.close()
        finally:
            self._tasks.discard(task)
            writer.close()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()
    except OSError:
        writer.close()
