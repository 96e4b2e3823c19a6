"""The mux master's socket: binding it, and one client's connection on it (``muxmaster``).

A client sends one header line (``core.muxwire``); the master answers it:
"check" and "exit" at once, "hello" (a link: kept open, closed when the SSH
connection behind it dies), "exec" (a command's status and output), "run" (a whole get or put run by
the master for a thin client, ``cli.thin``: its answer comes when it ends;
an "interrupt" line after the header cancels it), "sftp"
(then the connection carries an SSH channel's bytes both ways, spliced; the
client's INIT answered here with the spare channel's VERSION). A client of
another uid (SO_PEERCRED) is dropped before it is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Coroutine
from typing import Any, Protocol, cast

import asyncssh

from ..core import codec
from ..core.errors import ProtocolError, SSHPipeError
from ..core.muxwire import MuxWireError, encode_header, split_header
from .muxsplice import Splice, Upstream

__all__ = ["ClientConnection", "MasterSide", "bind_socket"]

logger = logging.getLogger("sshpipe.mux")

_INIT_LEN = 9  # an INIT packet: length (4), type (1), version (4)
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def bind_socket(path: str) -> socket.socket:
    """A listening UNIX socket at ``path``; a stale one (nobody listening) is replaced.

    Raises:
        FileExistsError: a live master already listens there.
        OSError: the path cannot be bound.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.bind(path)
        except OSError as exc:
            if exc.errno != 98:  # EADDRINUSE
                raise
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
            except ConnectionRefusedError:
                os.unlink(path)  # stale: its master died without removing it
                sock.bind(path)
            else:
                raise FileExistsError(path) from None
            finally:
                probe.close()
        os.chmod(path, 0o600)
        sock.listen(64)
    except BaseException:
        sock.close()
        raise
    return sock


class MasterSide(Protocol):
    """What a client's connection asks of its master (``muxmaster.Master``)."""

    def came(self, transport: asyncio.BaseTransport) -> None: ...

    def joined(self) -> None: ...

    def left(self, transport: asyncio.BaseTransport, joined: bool) -> None: ...

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None: ...

    def abort(self, slot: int) -> None: ...

    def stop(self) -> None: ...

    async def upstream(self, slot: int) -> Upstream: ...

    async def take(self, up: Upstream, key: tuple[int, int]) -> tuple[Splice, bytes, int]: ...

    def describe(self, up: Upstream) -> dict[str, Any]: ...

    async def run_command(
        self, header: dict[str, Any], pid: int, interrupted: asyncio.Event
    ) -> tuple[dict[str, Any], bytes]: ...


class ClientConnection(asyncio.Protocol):
    """One connection from a client: its header, then a channel spliced, or one answer."""

    def __init__(self, master: MasterSide) -> None:
        self._master = master
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._header_seen = False
        self._joined = False
        self._splice: Splice | None = None
        self._version = b""  # the spare's VERSION, to answer the client's INIT with
        self._pending = b""  # the client's first bytes while its INIT is looked for
        self._up: Upstream | None = None
        self._lost = False
        self._more = asyncio.Event()  # bytes came after the header (a shell's commands)
        self._pid = 0  # the client's, from SO_PEERCRED: its cwd is a "run"'s

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but are one.
        self._transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        try:
            self._pid, uid, _ = _CRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
            )
        except (OSError, AttributeError):
            uid = -1
        if uid != os.getuid():
            logger.debug("mux: refused a client of uid %d", uid)
            transport.abort()
            return
        self._master.came(transport)

    def data_received(self, data: bytes) -> None:
        if self._splice is not None:
            self._forward(data)
            return
        if self._header_seen:
            self._buffer += data  # after the header: a shell's next commands, a channel's first
            self._more.set()
            return
        self._buffer += data
        try:
            parsed = split_header(self._buffer)
        except MuxWireError as exc:
            self._answer({"ok": False, "error": str(exc)}, close=True)
            return
        if parsed is None:
            return
        header, self._buffer = parsed
        self._header_seen = True
        self._master.spawn(self._serve(header))

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._more.set()
        if self._transport is not None:
            if self._up is not None:
                self._up.watchers.discard(self._transport)
            self._master.left(self._transport, self._joined)
        if self._splice is not None and self._splice.chan is not None:
            self._splice.chan.close()

    def pause_writing(self) -> None:  # the client reads slower than the server sends
        if self._splice is not None and self._splice.chan is not None:
            self._splice.chan.pause_reading()

    def resume_writing(self) -> None:
        if self._splice is not None and self._splice.chan is not None:
            self._splice.chan.resume_reading()

    def _answer(self, reply: dict[str, Any], *, close: bool) -> None:
        assert self._transport is not None
        self._transport.write(encode_header(reply))
        if close:
            self._transport.close()

    async def _serve(self, header: dict[str, Any]) -> None:
        op = header.get("op")
        master = self._master
        try:
            if op == "check":
                self._answer({"ok": True, "pid": os.getpid()}, close=True)
                return
            if op == "abort":  # a client saw the server stop answering on it
                master.abort(int(header.get("slot", 0)))
                self._answer({"ok": True}, close=True)
                return
            if op == "exit":
                self._answer({"ok": True, "pid": os.getpid()}, close=True)
                master.stop()
                return
            if op == "run":
                self._joined = True
                master.joined()
                await self._run(header)
                return
            if op not in ("hello", "sftp", "exec", "shell"):
                self._answer({"ok": False, "error": f"unknown op {op!r}"}, close=True)
                return
            self._joined = True
            master.joined()
            up = await master.upstream(int(header.get("slot", 0)))
            if op == "hello":
                assert self._transport is not None
                if self._transport.is_closing():
                    return
                self._up = up
                up.watchers.add(self._transport)
                self._answer(master.describe(up), close=False)
            elif op == "exec":
                result = await up.link.run(
                    str(header["command"]),
                    within=float(header["within"]),
                    max_output=int(header["max_output"]),
                )
                reply = master.describe(up) | {"result": result}
                self._answer(reply, close=True)
            elif op == "shell":
                await self._shell(up)
            else:
                await self._splice_channel(up, header)
        except Exception as exc:  # one client's failure, told to it; the master serves on
            logger.debug("mux: %s failed: %s: %s", op, type(exc).__name__, exc)
            kind = type(exc).__name__ if isinstance(exc, SSHPipeError) else "ConnectionBroken"
            with contextlib.suppress(Exception):
                self._answer({"ok": False, "error": str(exc), "kind": kind}, close=True)

    async def _run(self, header: dict[str, Any]) -> None:
        """A thin client's command, cancelled by its "interrupt" line or its leaving."""
        interrupted = asyncio.Event()

        async def watch() -> None:
            while not self._lost and b"\n" not in self._buffer:
                self._more.clear()
                await self._more.wait()
            interrupted.set()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            reply, body = await self._master.run_command(header, self._pid, interrupted)
        finally:
            watcher.cancel()
        if not self._lost:
            assert self._transport is not None
            self._transport.write(encode_header(reply) + body)  # body: its stdout, stderr
            self._transport.close()

    async def _shell(self, up: Upstream) -> None:
        """A shell on the server kept for this client: one header per command, one answer each."""
        shell = await up.link.open_shell()
        if shell is None:
            self._answer(
                {"ok": False, "error": "the server runs no shell", "kind": "none"}, close=True
            )
            return
        try:
            self._answer({"ok": True}, close=False)
            while not self._lost:
                parsed = split_header(self._buffer)
                if parsed is None:
                    self._more.clear()
                    await self._more.wait()
                    continue
                header, self._buffer = parsed
                try:
                    result = await shell.run(
                        str(header["command"]),
                        within=float(header["within"]),
                        max_output=int(header["max_output"]),
                    )
                except ProtocolError as exc:
                    self._answer(
                        {"ok": False, "error": str(exc), "kind": "ProtocolError"}, close=True
                    )
                    return
                self._answer({"ok": True, "result": result}, close=result is None)
                if result is None:
                    return
        finally:
            shell.close()

    async def _splice_channel(self, up: Upstream, header: dict[str, Any]) -> None:
        key = (int(header["window"]), int(header["max_packet_size"]))
        splice, version, peer_window = await self._master.take(up, key)
        transport = self._transport
        assert transport is not None
        if transport.is_closing():
            if splice.chan is not None:
                splice.chan.close()
            return
        self._answer(self._master.describe(up) | {"peer_window": peer_window}, close=False)
        if splice.lost:
            transport.close()
            return
        early, splice.buffer = bytes(splice.buffer), bytearray()
        if early:
            transport.write(early)
        splice.client = transport
        self._splice = splice
        self._version = version
        rest, self._buffer = self._buffer, b""
        if rest:
            self._forward(rest)

    def _forward(self, data: bytes) -> None:
        """To the SSH channel; the client's INIT answered here when the spare took one."""
        splice = self._splice
        assert splice is not None and splice.chan is not None
        if self._version:
            self._pending += data
            if len(self._pending) < _INIT_LEN:
                return
            data, self._pending = self._pending, b""
            version, self._version = self._version, b""
            if data[4] == codec.FXP_INIT:
                assert self._transport is not None
                self._transport.write(version)
                data = data[_INIT_LEN:]
            if not data:
                return
        try:
            splice.chan.write(data)
        except (asyncssh.Error, OSError):
            if self._transport is not None:
                self._transport.close()
