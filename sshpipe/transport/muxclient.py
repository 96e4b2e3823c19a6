"""A link through a mux master: SFTP channels and commands over a UNIX socket.

``MuxLink`` has the interface the pool uses of ``sshlink.SSHLink`` (``open_sftp``,
``run``, ``open_shell``, ``close``, ``abort``, ``closed``...); each of its
channels is a UNIX connection to the master (``muxmaster``), whose bytes the
master splices to an SSH channel of its own. The link itself is one more
connection, kept open ("hello"): the master closes it when the SSH connection
behind it dies, and the link is then ``closed`` (the pool opens another:
directly, when no master answers any more). Nothing here imports asyncssh.

``probe`` tells whether a master answers at a path, checking that it runs as
our own uid (SO_PEERCRED); ``cli.control`` checks the socket's directory is
ours alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import socket
import struct
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, cast

from ..core.codec import Limits
from ..core.compresspolicy import CompressionMode
from ..core.errors import (
    AuthenticationError,
    ChannelRefused,
    ConnectError,
    ConnectionBroken,
    HostKeyError,
    Stalled,
)
from ..core.muxwire import MuxWireError, encode_header, split_header
from .muxshell import ANSWER_TIMEOUT, MuxShell
from .replies import ReplyClock
from .sftp import SFTPSession, lent_session

logger = logging.getLogger("sshpipe.mux")

__all__ = ["MuxLink", "open_mux_link", "own_slots", "probe", "request"]

_CRED = struct.Struct("3i")
_KINDS: dict[str, type[ConnectError] | type[ConnectionBroken]] = {
    "ChannelRefused": ChannelRefused,
    "AuthenticationError": AuthenticationError,
    "HostKeyError": HostKeyError,
    "ConnectError": ConnectError,
    "Stalled": Stalled,
}


def _peer_uid(sock: socket.socket) -> int:
    _, uid, _ = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
    return int(uid)


def request(
    path: str, header: dict[str, Any], *, timeout: float = ANSWER_TIMEOUT
) -> dict[str, Any]:
    """One header to the master at ``path`` and its answer, blocking (``-O check``, ``exit``).

    Raises:
        ConnectError: no master answers there (none, a stale socket, another uid's).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except OSError as exc:
            # ssh -O's own words for it.
            raise ConnectError(f"Control socket connect({path}): {exc.strerror or exc}") from exc
        if _peer_uid(sock) != os.getuid():
            raise ConnectError(f"Control socket {path}: the master runs as another user")
        try:
            sock.sendall(encode_header(header))
        except OSError as exc:  # it dropped us unread: a master of another uid does
            raise ConnectError(f"master at {path}: {exc}") from exc
        buffer = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError as exc:
                raise ConnectError(f"master at {path}: {exc}") from exc
            if not chunk:
                raise ConnectError(f"master at {path} closed without answering")
            buffer += chunk
            try:
                parsed = split_header(buffer)
            except MuxWireError as exc:
                raise ConnectError(f"master at {path}: {exc}") from exc
            if parsed is not None:
                return parsed[0]
    finally:
        sock.close()


def probe(path: str) -> int | None:
    """The pid of the master answering at ``path``, or None if none does."""
    try:
        answer = request(path, {"op": "check"}, timeout=1.0)
    except ConnectError as exc:
        logger.debug("mux: %s", exc)
        return None
    return int(answer["pid"]) if answer.get("ok") else None


class _MuxProtocol(asyncio.Protocol):
    """One UNIX connection to the master: the header answer, then SFTP bytes to a session."""

    def __init__(self, header: dict[str, Any], what: str) -> None:
        self._header = header
        self._what = what
        self.answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.sftp: SFTPSession | None = None
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Event = asyncio.Event()
        self._buffer = b""
        self.peer_window = 0
        self.on_lost: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but are one.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(encode_header(self._header))

    def data_received(self, data: bytes) -> None:
        if self.answer.done():
            if self.sftp is not None:
                self.sftp.data_received(data)
            else:
                self._buffer += data
            return
        self._buffer += data
        try:
            parsed = split_header(self._buffer)
        except MuxWireError as exc:
            self.answer.set_exception(ConnectionBroken(f"{self._what}: {exc}"))
            return
        if parsed is not None:
            header, self._buffer = parsed
            self.peer_window = int(header.get("peer_window", 0))
            self.answer.set_result(header)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.set()
        if self.on_lost is not None:
            self.on_lost()
        broken = ConnectionBroken(f"{self._what}: connection lost: the mux master went away")
        if not self.answer.done():
            self.answer.set_exception(broken)
        if self.sftp is not None:
            self.sftp.connection_lost(broken)

    def attach(self, sftp: SFTPSession) -> None:
        self.sftp = sftp
        early, self._buffer = self._buffer, b""
        if early:
            sftp.data_received(early)

    # The Pipe an SFTPSession writes to (``wiring.Pipe``).
    def write(self, data: bytes, payload: bytes | memoryview = b"") -> None:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionBroken(f"{self._what}: connection lost: the mux master went away")
        self.transport.write(data + payload if payload else data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def _open(path: str, header: dict[str, Any], what: str, within: float) -> _MuxProtocol:
    """A connection to the master with ``header`` sent and its answer in.

    Raises:
        ConnectionBroken: the master is gone or said no (a ConnectError or
        ChannelRefused when it says that is why).
    """
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(within):
            transport, proto = await loop.create_unix_connection(
                lambda: _MuxProtocol(header, what), path
            )
            if _peer_uid(transport.get_extra_info("socket")) != os.getuid():
                transport.abort()
                raise ConnectionBroken(f"{what}: the mux master runs as another user")
            answer = await proto.answer
    except OSError as exc:
        raise ConnectionBroken(f"{what}: connection lost: no mux master: {exc}") from exc
    except TimeoutError as exc:
        raise Stalled(f"{what}: the mux master did not answer in {within:g} s") from exc
    if not answer.get("ok"):
        proto.close()
        kind = _KINDS.get(str(answer.get("kind")), ConnectionBroken)
        raise kind(f"{what}: {answer.get('error', 'refused by the mux master')}")
    return proto


def _limits(answer: dict[str, Any]) -> Limits | None:
    values = answer.get("limits")
    return Limits(*(int(v) for v in values)) if isinstance(values, list) else None


class MuxLink:
    """A link whose channels go through a mux master (see the module's docstring)."""

    def __init__(self, path: str, slot: int, hello: _MuxProtocol, answer: dict[str, Any]) -> None:
        self._path = path
        self._slot = slot
        self._hello = hello
        self.label = str(answer.get("label", path))
        self.server_version = str(answer.get("server_version", ""))
        self.patches: frozenset[str] = frozenset()
        self.channels_opened = 0
        self.replies = ReplyClock(time.monotonic())
        self.setup: list[tuple[str, float]] = []
        self.rtt_estimate = float(answer.get("rtt", 0.0))
        self.compression = "none"  # the master's connection: routed compression goes direct
        # Auto is off through a master: a compressed connection of its own
        # would bypass the connection the master was started to share.
        self.compression_mode: CompressionMode = "no"
        self.refuses_exec = bool(answer.get("refuses_exec", False))
        self.limits = _limits(answer)
        self.master_pid = int(answer.get("pid", 0))
        self._sessions: weakref.WeakSet[SFTPSession] = weakref.WeakSet()
        self._pipes: set[_MuxProtocol] = set()

    def __repr__(self) -> str:
        return f"<MuxLink {self.label} via {self._path} channels_opened={self.channels_opened}>"

    async def open_sftp(
        self,
        *,
        window: int,
        max_packet_size: int,
        max_reply: int,
        stall_timeout: float,
        known_limits: Limits | None = None,
    ) -> SFTPSession:
        """An SFTP channel on the master's connection (``SSHLink.open_sftp``'s contract)."""
        if self.closed:
            raise ConnectionBroken(f"{self.label}: connection lost: the mux master went away")
        started = time.monotonic()
        # One deadline for the channel's set-up, the master's answer and INIT/VERSION.
        deadline = asyncio.get_running_loop().time() + stall_timeout
        header = {
            "op": "sftp",
            "slot": self._slot,
            "window": window,
            "max_packet_size": max_packet_size,
        }
        pipe = await _open(self._path, header, self.label, stall_timeout)
        # The master's answer states the limits as it knows them now (the
        # link's hello may have come before its first channel learned them).
        limits = known_limits or _limits(pipe.answer.result()) or self.limits
        self._pipes.add(pipe)
        pipe.on_lost = partial(self._pipes.discard, pipe)
        self.channels_opened += 1
        sftp = lent_session(
            self,
            pipe,
            window=window,
            peer_window=pipe.peer_window,
            server_version=self.server_version,
            max_reply=max_reply,
            stall_timeout=stall_timeout,
        )
        pipe.attach(sftp)
        self._sessions.add(sftp)
        channel = time.monotonic()
        try:
            await sftp.start(known_limits=limits, deadline=deadline)
        except BaseException:
            sftp.close()
            self._pipes.discard(pipe)
            raise
        sftp.setup = [("channel", channel - started), ("sftp_init", time.monotonic() - channel)]
        if self.rtt_estimate > 0:
            # The master answered INIT itself (a spare's), or it took the server
            # a process start: either way not the link's round trip, which the
            # master measured at its log-in; the flow controller starts from it.
            sftp.init_rtt = self.rtt_estimate
        return sftp

    @property
    def closed(self) -> bool:
        """The master closed the link (its SSH connection died, or it exited)."""
        return self._hello.lost.is_set()

    def abort(self, *, stalled: bool = False) -> None:
        """Drop every channel now: they fail with ConnectionBroken (and are retried).

        Args:
            stalled: the server stopped answering on them: the master drops
                its SSH connection too, as a direct link's would be (slot 0's:
                the master leaves, and the reconnect is direct). Not for a
                user's second Ctrl-C: the master outlives our command.
        """
        if stalled:
            # A local socket: its connect and a few bytes' send do not block.
            with (
                contextlib.suppress(OSError),
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock,
            ):
                sock.settimeout(0.1)
                sock.connect(self._path)
                sock.sendall(encode_header({"op": "abort", "slot": self._slot}))
        for pipe in list(self._pipes):
            if pipe.transport is not None:
                pipe.transport.abort()
        if self._hello.transport is not None:
            self._hello.transport.abort()

    async def run(self, command: str, *, within: float, max_output: int) -> tuple[int, str] | None:
        """``SSHLink.run`` on the master's connection: (exit status, stdout), or None."""
        header = {
            "op": "exec",
            "slot": self._slot,
            "command": command,
            "within": within,
            "max_output": max_output,
        }
        try:
            proto = await _open(self._path, header, self.label, within + ANSWER_TIMEOUT)
        except (ConnectionBroken, ConnectError) as exc:
            logger.debug("%s: no command run (%s)", self.label, exc)
            return None
        proto.close()
        answer = await proto.answer
        if answer.get("refuses_exec"):
            self.refuses_exec = True
            for sftp in self._sessions:
                sftp.run_command = None
        result = answer.get("result")
        if not isinstance(result, list):
            return None
        return int(result[0]), str(result[1])

    async def open_shell(self) -> MuxShell | None:
        """A shell kept open on the master's connection (``SSHLink.open_shell``), or None."""
        shell = MuxShell(self.label)
        try:
            await shell.open(self._path, self._slot)
        except (ConnectionBroken, ConnectError) as exc:
            logger.debug("%s: no shell (%s)", self.label, exc)
            return None
        return shell

    async def close(self) -> None:
        """Close every channel, then the link (the master counts one client less)."""
        for sftp in list(self._sessions):
            sftp.close()
        for pipe in list(self._pipes):
            pipe.close()
        self._hello.close()


# Per socket path: the slots this process's links hold. A context variable so
# that each thin client's run inside the master (``own_slots``) counts its own
# from 0, as the separate process it replaces did: parallel later commands share
# slot 0's connection instead of each logging in for a slot of its own.
_process_slots: dict[str, set[int]] = {}
_slots_var: contextvars.ContextVar[dict[str, set[int]]] = contextvars.ContextVar(
    "sshpipe_mux_slots"
)


def own_slots() -> None:
    """From here on in this context (a task started after), links count slots from 0."""
    _slots_var.set({})


async def open_mux_link(path: str, within: float) -> MuxLink:
    """A link through the master at ``path``, on the lowest slot this process does not hold.

    Raises:
        ConnectionBroken: no master answers there; ConnectError (and its
        kinds): the master could not open the connection for a new slot.
    """
    held = _slots_var.get(_process_slots).setdefault(path, set())
    slot = next(index for index in range(len(held) + 1) if index not in held)
    held.add(slot)
    try:
        hello = await _open(path, {"op": "hello", "slot": slot}, path, within)
    except BaseException:
        held.discard(slot)
        raise
    hello.on_lost = lambda: held.discard(slot)
    if hello.lost.is_set():
        held.discard(slot)
    return MuxLink(path, slot, hello, await hello.answer)
