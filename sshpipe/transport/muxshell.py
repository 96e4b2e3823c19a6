"""A shell the mux master keeps open for us: one command sent, one answer back.

``MuxShell`` is ``wiring.Shell`` through the master's socket (``MuxLink.open_shell``):
a tree's remote commands (``sync -f``, ``sha256sum``) run there one at a time,
each header line answered by one. Nothing here imports asyncssh.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, cast

from ..core.errors import ConnectionBroken, ProtocolError
from ..core.muxwire import MuxWireError, encode_header, split_header

# The master's answer to a header comes from a local process: a second is
# generous unless the master is opening an SSH connection for a new slot
# (a handshake: up to connect_timeout), which ``within`` covers.
ANSWER_TIMEOUT = 5.0


class _Answers(asyncio.Protocol):
    """A connection whose every header sent gets one header line back, in order."""

    def __init__(self, first: dict[str, Any]) -> None:
        self._first = first
        self.transport: asyncio.Transport | None = None
        self._buffer = b""
        self._waiting: collections.deque[asyncio.Future[dict[str, Any] | None]] = (
            collections.deque()
        )
        self.ask_first = self.ask_later()

    def ask_later(self) -> asyncio.Future[dict[str, Any] | None]:
        future: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        return future

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(encode_header(self._first))

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while self._waiting:
            try:
                parsed = split_header(self._buffer)
            except MuxWireError:
                self.connection_lost(None)
                return
            if parsed is None:
                return
            answer, self._buffer = parsed
            future = self._waiting.popleft()
            if not future.done():
                future.set_result(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_result(None)  # gone: no answer


class MuxShell:
    """A ``sh`` the master keeps open for us (``wiring.Shell``): a command, one answer."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._conn: _Answers | None = None
        self._lock = asyncio.Lock()

    async def open(self, path: str, slot: int) -> None:
        """Raises: ConnectionBroken: no master, or it opened no shell."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(ANSWER_TIMEOUT + 30.0):  # the server's shell start
                _, conn = await loop.create_unix_connection(
                    lambda: _Answers({"op": "shell", "slot": slot}), path
                )
                answer = await conn.ask_first
        except (OSError, TimeoutError) as exc:
            raise ConnectionBroken(f"{self._label}: no shell through the master: {exc}") from exc
        if not answer or not answer.get("ok"):
            if conn.transport is not None:
                conn.transport.close()
            raise ConnectionBroken(f"{self._label}: no shell through the master")
        self._conn = conn

    async def run(self, command: str, *, within: float, max_output: int) -> tuple[int, str] | None:
        """(exit status, stdout), or None once the shell is gone (``wiring.Shell``).

        Raises:
            ProtocolError: it printed more than ``max_output``.
        """
        conn = self._conn
        if conn is None or conn.transport is None or conn.transport.is_closing():
            return None
        async with self._lock:  # one at a time, as the shell runs them
            future = conn.ask_later()
            header = {"command": command, "within": within, "max_output": max_output}
            conn.transport.write(encode_header(header))
            answer = await future
        if answer is None:
            return None
        if not answer.get("ok"):
            if answer.get("kind") == "ProtocolError":
                raise ProtocolError(str(answer.get("error")))
            return None
        result = answer.get("result")
        return (int(result[0]), str(result[1])) if isinstance(result, list) else None

    def close(self) -> None:
        if self._conn is not None and self._conn.transport is not None:
            self._conn.transport.close()
