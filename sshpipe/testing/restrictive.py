"""SFTP servers that each impose one cap seen in the field, for the restrictive-server tests.

A restriction is an object a test builds, serves with ``restricted_server``
and reads afterwards: each counts the times its cap bit (``refused``,
``dropped``), so a test can show the cap is really there.

- ``HandleCap(n)``: at most n open handles (files and directories) per SFTP
  session; one more OPEN or OPENDIR is answered FX_FAILURE "too many open
  handles", the generic code real servers use (ProFTPD, vsftpd-like appliances).
- ``ChannelCap(n)``: at most n session channels open at once per connection;
  one more is refused as sshd refuses past MaxSessions.
- ``StallsPastOutstanding(n)``: a READ that arrives while n READs are
  outstanding (received, not yet answered) is never answered, as servers do
  that answer only the first of a client's prefetched reads.
- ``SequentialWritesOnly``: a WRITE anywhere but at the file's current end is
  FX_FAILURE "non-sequential write" (object-store backed servers: Azure Blob's
  SFTP endpoint).
- ``NoExtensions``: a bare SFTP v3 VERSION (no limits@openssh.com,
  posix-rename, fsync, statvfs, hardlink); every EXTENDED request is
  OP_UNSUPPORTED, and RENAME onto an existing name fails (filexfer-02 §6.5).
- ``DropsChannelMidTree(after, on)``: closes an SFTP channel right after a
  reply (the first of kind ``on`` from the server's ``after``-th), once; the
  connection stays up.
- ``DiesMidTree(after)``: at the ``after``-th file created, the whole server
  goes down: it stops accepting and drops every connection. A test restarts
  it with ``restricted_server(..., reuse_keys=True)`` on the same port and root.

Some caps are out of reach of asyncssh's ``SFTPServer``: its handler answers
limits and extensions itself, closes directory handles without telling the
server, and works on one request at a time (so a request still "outstanding"
is one waiting in the channel). Those are imposed by a tap in front of it
(``TappedSession``): each request passes the tap on its way in, each reply on
its way out.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import struct
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import asyncssh

from .embedded import ChannelSFTP, EmbeddedServer, SFTPOnlySession, embedded_server
from .hostile import FaithfulLinks, Recorder

__all__ = [
    "ChannelCap",
    "DiesMidTree",
    "DropsChannelMidTree",
    "HandleCap",
    "NoExtensions",
    "Packet",
    "Restriction",
    "SequentialWritesOnly",
    "StallsPastOutstanding",
    "Tap",
    "TappedSession",
    "restricted_server",
]

_U32 = struct.Struct(">I")

# SFTP packet types (filexfer-02 §3) the taps look at.
FXP_INIT, FXP_VERSION, FXP_OPEN, FXP_CLOSE, FXP_READ = 1, 2, 3, 4, 5
FXP_OPENDIR, FXP_STATUS, FXP_HANDLE, FXP_NAME, FXP_EXTENDED = 11, 101, 102, 104, 200


@dataclass(frozen=True)
class Packet:
    """One SFTP packet: its type and what follows the type byte."""

    type: int
    payload: bytes

    @property
    def id(self) -> int | None:
        """The request id; INIT and VERSION carry a version there instead."""
        if self.type in (FXP_INIT, FXP_VERSION):
            return None
        return int(_U32.unpack_from(self.payload)[0])

    def first_string(self) -> bytes:
        """The string right after the id: the path, the handle, an extension's name."""
        length = _U32.unpack_from(self.payload, 4)[0]
        return self.payload[8 : 8 + length]

    def framed(self) -> bytes:
        return _U32.pack(len(self.payload) + 1) + bytes((self.type,)) + self.payload


def _take_packets(buffer: bytearray) -> list[Packet]:
    """The whole packets at the start of ``buffer``, removed from it; a partial one stays."""
    packets: list[Packet] = []
    while len(buffer) >= 4:
        length = _U32.unpack_from(buffer)[0]
        if len(buffer) < 4 + length:
            break
        packets.append(Packet(buffer[4], bytes(buffer[5 : 4 + length])))
        del buffer[: 4 + length]
    return packets


def _string(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


class Tap:
    """What one session's tap does with its traffic; this one passes it all."""

    def request(self, session: TappedSession, packet: Packet) -> bool:
        """Whether ``packet`` goes on to asyncssh's server (False: dropped or answered here)."""
        return True

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        """The reply to send in place of ``packet`` (None: not now, or never)."""
        return packet


class TappedSession(SFTPOnlySession):
    """asyncssh's SFTP server behind a ``Tap``: requests pass it first, replies after."""

    def __init__(self, sftp: ChannelSFTP, tap: Tap) -> None:
        super().__init__(sftp)
        self.tap = tap
        self.channel: Any = None
        self._send: Any = None
        self._incoming = bytearray()
        self._outgoing = bytearray()

    def connection_made(self, chan: Any) -> None:
        super().connection_made(chan)
        self.channel = chan
        self._send = chan.write
        chan.write = self._replied  # every reply of asyncssh's server is one write

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._incoming += data
        kept = [p.framed() for p in _take_packets(self._incoming) if self.tap.request(self, p)]
        if kept:
            super().data_received(b"".join(kept), datatype)

    def _replied(self, data: bytes, datatype: asyncssh.DataType = None) -> None:
        self._outgoing += data
        for packet in _take_packets(self._outgoing):
            sent = self.tap.reply(self, packet)
            if sent is not None:
                self.send(sent)

    def send(self, packet: Packet) -> None:
        """Send ``packet`` to the client (unless the channel is going)."""
        if not self.channel.is_closing():
            self._send(packet.framed(), None)

    def answer(self, request_id: int, code: int, message: str) -> None:
        """A STATUS from the tap itself: the request never reaches asyncssh's server."""
        body = _U32.pack(request_id) + _U32.pack(code) + _string(message.encode()) + _string(b"")
        self.send(Packet(FXP_STATUS, body))


class _Served(FaithfulLinks):
    """asyncssh's server chrooted at the root, serving a link's text as stored.

    The stock chrooted readlink resolves a relative target against the
    server's working directory (``sshpipe.testing.hostile``): trees with
    relative links could not come back as they went.
    """

    def __init__(self, chan: Any, root: Path) -> None:
        super().__init__(chan, root, Recorder())


class Restriction:
    """One cap; this base serves the chrooted root and imposes nothing."""

    max_sessions: int | None = None  # session channels one connection may hold

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        """The SFTP server of one session."""
        return _Served(chan, root)

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        """The session channel around it (a tapped one, for caps the server cannot see)."""
        return SFTPOnlySession(sftp)

    def session_refused(self) -> None:
        """Called at each session channel refused for ``max_sessions``."""

    def started(self, server: EmbeddedServer) -> None:
        """Called once the server listens."""


@contextlib.asynccontextmanager
async def restricted_server(
    workdir: Path,
    restriction: Restriction,
    *,
    root: Path | None = None,
    port: int = 0,
    reuse_keys: bool = False,
) -> AsyncIterator[EmbeddedServer]:
    """The embedded server imposing ``restriction``, for the ``async with`` block.

    Args:
        workdir: keys and known_hosts go here (see ``embedded_server``).
        restriction: the cap to impose (``Restriction()`` imposes none).
        root: the served directory (default ``workdir/root``).
        port: 0 picks a free one; a restart passes the old one.
        reuse_keys: keep the keys a server left in ``workdir`` (a restart).
    """
    async with embedded_server(
        workdir,
        root=root,
        port=port,
        reuse_keys=reuse_keys,
        sftp_factory=restriction.sftp,
        max_sessions=restriction.max_sessions,
        session_factory=restriction.session,
        session_refused=restriction.session_refused,
    ) as server:
        restriction.started(server)
        yield server


# -- caps on what a session may hold -----------------------------------------------


class HandleCap(Restriction):
    """At most ``n`` open handles (files and directories) per SFTP session.

    Counted in arrival order, as a server working on one request at a time
    sees them: an OPEN counts from its arrival (until its failure, if it
    fails), a CLOSE frees its handle at its arrival.
    """

    def __init__(self, n: int = 16) -> None:
        self.n = n
        self.refused = 0  # OPEN/OPENDIR answered "too many open handles"
        self.peak = 0  # most handles one session held (or was opening) at once

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, _HandleTap(self))


class _HandleTap(Tap):
    def __init__(self, cap: HandleCap) -> None:
        self.cap = cap
        self.handles: set[bytes] = set()
        self.opening: set[int] = set()  # ids of OPEN/OPENDIR not answered yet

    def request(self, session: TappedSession, packet: Packet) -> bool:
        if packet.type in (FXP_OPEN, FXP_OPENDIR):
            assert packet.id is not None
            if len(self.handles) + len(self.opening) >= self.cap.n:
                self.cap.refused += 1
                session.answer(packet.id, asyncssh.FX_FAILURE, "too many open handles")
                return False
            self.opening.add(packet.id)
            self.cap.peak = max(self.cap.peak, len(self.handles) + len(self.opening))
        elif packet.type == FXP_CLOSE:
            self.handles.discard(packet.first_string())
        return True

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        if packet.id in self.opening:
            self.opening.discard(packet.id)
            if packet.type == FXP_HANDLE:
                self.handles.add(packet.first_string())
        return packet


class ChannelCap(Restriction):
    """At most ``n`` session channels open at once on one connection (sshd's MaxSessions)."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.max_sessions = n
        self.refused = 0  # channel opens refused

    def session_refused(self) -> None:
        self.refused += 1


# -- caps on how requests may come -------------------------------------------------


class StallsPastOutstanding(Restriction):
    """A READ arriving while ``n`` READs are outstanding is never answered.

    Every reply leaves ``delay`` seconds after its request's answer was
    ready, in order (a round trip's worth of latency), and a READ counts as
    outstanding until its reply has left: a client's burst of prefetched reads
    finds the server still busy with the first ``n``, however fast the
    machine. ``delay`` bounds what the cap costs a client that keeps within
    it: n blocks per ``delay``.
    """

    def __init__(self, n: int = 32, *, delay: float = 0.02) -> None:
        self.n = n
        self.delay = delay
        self.dropped = 0  # READs never answered
        self.peak = 0  # most READs outstanding on one session

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, _StallTap(self))


class _StallTap(Tap):
    def __init__(self, cap: StallsPastOutstanding) -> None:
        self.cap = cap
        self.outstanding: set[int] = set()
        self.held: collections.deque[tuple[float, Packet]] = collections.deque()

    def request(self, session: TappedSession, packet: Packet) -> bool:
        if packet.type != FXP_READ:
            return True
        assert packet.id is not None
        if len(self.outstanding) >= self.cap.n:
            self.cap.dropped += 1
            return False
        self.outstanding.add(packet.id)
        self.cap.peak = max(self.cap.peak, len(self.outstanding))
        return True

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        loop = asyncio.get_running_loop()
        if not self.held:
            loop.call_later(self.cap.delay, self._release, session)
        self.held.append((loop.time() + self.cap.delay, packet))
        return None

    def _release(self, session: TappedSession) -> None:
        loop = asyncio.get_running_loop()
        while self.held and self.held[0][0] <= loop.time():
            packet = self.held.popleft()[1]
            if packet.id is not None:
                self.outstanding.discard(packet.id)
            session.send(packet)
        if self.held:
            loop.call_at(self.held[0][0], self._release, session)


class SequentialWritesOnly(Restriction):
    """A WRITE anywhere but at the file's current end fails: "non-sequential write"."""

    def __init__(self) -> None:
        self.refused = 0  # WRITEs answered FX_FAILURE
        self.written = 0  # WRITEs that went through

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        return _AppendOnly(chan, root, self)


class _AppendOnly(_Served):
    def __init__(self, chan: Any, root: Path, cap: SequentialWritesOnly) -> None:
        super().__init__(chan, root)
        self.cap = cap

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        end = os.fstat(file_obj.fileno()).st_size  # type: ignore[attr-defined]
        if offset != end:
            self.cap.refused += 1
            raise asyncssh.SFTPFailure("non-sequential write")
        self.cap.written += 1
        return super().write(file_obj, offset, data)


class NoExtensions(Restriction):
    """A bare SFTP v3 server: no extension offered, none honoured."""

    def __init__(self) -> None:
        self.refused: list[bytes] = []  # names of the EXTENDED requests answered unsupported

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, _BareTap(self))


class _BareTap(Tap):
    def __init__(self, cap: NoExtensions) -> None:
        self.cap = cap

    def request(self, session: TappedSession, packet: Packet) -> bool:
        if packet.type != FXP_EXTENDED:
            return True
        assert packet.id is not None
        self.cap.refused.append(packet.first_string())
        session.answer(packet.id, asyncssh.FX_OP_UNSUPPORTED, "Unsupported request type")
        return False

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        if packet.type == FXP_VERSION:
            return Packet(FXP_VERSION, packet.payload[:4])  # the version, no extension pairs
        return packet


# -- servers that go away mid-run ---------------------------------------------------


class DropsChannelMidTree(Restriction):
    """Closes an SFTP channel right after one of its replies, once, mid-run.

    As when a server's SFTP subsystem exits: its last reply and the channel's
    close arrive together, so the client learns of the close while it acts
    on that reply. The reply is the first, from the server's ``after``-th on
    (counted over every channel of every connection), that is of the kind
    ``on``: any reply; the status of a CLOSE (an upload renames its file at
    once); or a listing's names (a walk reads on at once). Requests still
    outstanding on the channel are never answered; the connection and its
    other channels stay.
    """

    def __init__(self, after: int = 300, *, on: Literal["any", "close", "names"] = "any") -> None:
        self.after = after
        self.on = on
        self.replies = 0  # replies sent on every session of every connection
        self.dropped = False

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, _DroppingTap(self))


class _DroppingTap(Tap):
    def __init__(self, cap: DropsChannelMidTree) -> None:
        self.cap = cap
        self.closing: set[int] = set()  # ids of CLOSE requests not answered yet

    def request(self, session: TappedSession, packet: Packet) -> bool:
        if packet.type == FXP_CLOSE:
            assert packet.id is not None
            self.closing.add(packet.id)
        return True

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        if packet.id is None or self.cap.dropped:
            return packet
        self.cap.replies += 1
        kind = {"any": True, "close": packet.id in self.closing, "names": packet.type == FXP_NAME}
        self.closing.discard(packet.id)
        if self.cap.replies < self.cap.after or not kind[self.cap.on]:
            return packet
        self.cap.dropped = True
        # One segment, as sshd sends a dead subsystem's last output with the close:
        # the client reads the reply and the close in one go.
        with _corked(session.channel.get_extra_info("socket")):
            session.send(packet)
            session.channel.close()
        return None


@contextlib.contextmanager
def _corked(sock: Any) -> Iterator[None]:
    """Hold what is written to ``sock`` and send it as one TCP segment at the end (Linux)."""
    cork = getattr(socket, "TCP_CORK", None)
    if cork is None or sock is None:
        yield
        return
    sock.setsockopt(socket.IPPROTO_TCP, cork, 1)
    try:
        yield
    finally:
        sock.setsockopt(socket.IPPROTO_TCP, cork, 0)


class DiesMidTree(Restriction):
    """Goes down at the ``after``-th file created: stops accepting, drops every connection.

    The creating OPEN itself is never answered: its file exists, empty, as a
    crash would leave it. ``died`` is set then.
    """

    def __init__(self, after: int = 40) -> None:
        self.after = after
        self.created = 0
        self.died = asyncio.Event()
        self._listener: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()

    def started(self, server: EmbeddedServer) -> None:
        self._listener = server.listener

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        conn = chan.get_connection()
        self._connections.add(conn)
        if self.died.is_set():
            conn.abort()  # a session of a connection that got in just before the end
        return _Dying(chan, root, self)

    def die(self) -> None:
        self.died.set()
        if self._listener is not None:
            self._listener.close()
        for conn in self._connections:
            conn.abort()


class _Dying(_Served):
    """Counts the files it creates; once dead, touches nothing.

    asyncssh's handler goes on with the requests already in its channel
    after the connection is gone (their replies are lost): a dead host would
    not, so every path (``map_path``) and every write is refused then.
    """

    def __init__(self, chan: Any, root: Path, cap: DiesMidTree) -> None:
        super().__init__(chan, root)
        self.cap = cap

    def map_path(self, path: bytes) -> bytes:
        if self.cap.died.is_set():
            raise asyncssh.SFTPConnectionLost("the server is gone")
        return super().map_path(path)

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        file_obj = super().open(path, pflags, attrs)
        if pflags & asyncssh.FXF_CREAT:
            self.cap.created += 1
            if self.cap.created >= self.cap.after:
                self.cap.die()
        return file_obj

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        if self.cap.died.is_set():
            raise asyncssh.SFTPConnectionLost("the server is gone")
        return super().write(file_obj, offset, data)
