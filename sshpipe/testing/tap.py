"""A tap in front of asyncssh's SFTP server: it sees each request first, each reply last.

asyncssh's ``SFTPServer`` cannot see everything a restrictive server must:
its handler answers limits and extensions itself, closes directory handles
without telling the server, and works on one request at a time (so a
request still "outstanding" is one waiting in the channel). A ``Tap`` sees
the SFTP packets themselves (filexfer-02 §3) and may drop a request, answer
it itself, or hold, change or drop a reply. ``TappedSession`` is the session
channel that runs one (``embedded_server(session_factory=...)``).
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import asyncssh

from .embedded import ChannelSFTP, SFTPOnlySession

__all__ = [
    "FXP_CLOSE",
    "FXP_EXTENDED",
    "FXP_HANDLE",
    "FXP_INIT",
    "FXP_NAME",
    "FXP_OPEN",
    "FXP_OPENDIR",
    "FXP_READ",
    "FXP_STATUS",
    "FXP_VERSION",
    "Packet",
    "Tap",
    "TappedSession",
    "corked",
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


def take_packets(buffer: bytearray) -> list[Packet]:
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
        kept = [p.framed() for p in take_packets(self._incoming) if self.tap.request(self, p)]
        if kept:
            super().data_received(b"".join(kept), datatype)

    def _replied(self, data: bytes, datatype: asyncssh.DataType = None) -> None:
        self._outgoing += data
        for packet in take_packets(self._outgoing):
            sent = self.tap.reply(self, packet)
            if sent is not None:
                self.send(sent)

    def send(self, packet: Packet) -> None:
        """Send ``packet`` to the client (unless the channel is going)."""
        self.send_raw(packet.framed())

    def send_raw(self, data: bytes) -> None:
        """Send bytes as they are, a packet or a piece of one (unless the channel is going)."""
        if not self.channel.is_closing():
            self._send(data, None)

    def answer(self, request_id: int, code: int, message: str) -> None:
        """A STATUS from the tap itself: the request never reaches asyncssh's server."""
        body = _U32.pack(request_id) + _U32.pack(code) + _string(message.encode()) + _string(b"")
        self.send(Packet(FXP_STATUS, body))


@contextlib.contextmanager
def corked(sock: Any) -> Iterator[None]:
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
