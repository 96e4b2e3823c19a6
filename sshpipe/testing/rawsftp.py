"""An SFTP v3 server written from the wire up: what asyncssh's own server will not send.

asyncssh's ``SFTPServer`` picks its handles (4 bytes) and its
``limits@openssh.com`` answer itself. This one serves a few files from memory
and lets a test choose both. It can send a handle of any length, state tiny
limits, or never answer the limits request. It speaks just what a download
needs: INIT, limits, OPEN, READ, FSTAT/STAT/LSTAT, REALPATH and CLOSE.
Anything else is OP_UNSUPPORTED.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import asyncssh

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


@dataclass
class RawOptions:
    """What the raw server says.

    Attributes:
        files: path -> contents of the files it serves.
        handle_length: bytes of every handle it hands out.
        limits: (max packet, read, write, open handles) for limits@openssh.com,
            or None not to offer the extension.
        limits_silent: offer limits@openssh.com and never answer it.
    """

    files: dict[bytes, bytes] = field(default_factory=dict)
    handle_length: int = 4
    limits: tuple[int, int, int, int] | None = (256 * 1024, 255 * 1024, 255 * 1024, 64)
    limits_silent: bool = False


def _string(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _attrs(size: int, directory: bool = False) -> bytes:
    flags = 0x01 | 0x04  # size, permissions
    mode = (0o040755 if directory else 0o100644) & 0xFFFFFFFF
    return _U32.pack(flags) + _U64.pack(size) + _U32.pack(mode)


class RawSFTPSession(asyncssh.SSHServerSession[bytes]):
    """One SFTP session, byte by byte."""

    def __init__(self, options: RawOptions) -> None:
        self.options = options
        self._chan: asyncssh.SSHServerChannel[bytes] | None = None
        self._buffer = bytearray()
        self._handles: dict[bytes, bytes] = {}  # handle -> path

    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self._chan = chan

    def subsystem_requested(self, subsystem: str) -> bool:
        return subsystem == "sftp"

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        self._buffer += data
        while len(self._buffer) >= 4:
            length = _U32.unpack_from(self._buffer)[0]
            if len(self._buffer) < 4 + length:
                return
            packet = bytes(self._buffer[4 : 4 + length])
            del self._buffer[: 4 + length]
            self._handle(packet[0], packet[1:])

    def _send(self, ptype: int, body: bytes) -> None:
        assert self._chan is not None
        self._chan.write(_U32.pack(len(body) + 1) + bytes((ptype,)) + body)

    def _status(self, request: int, code: int, message: str = "") -> None:
        self._send(
            101, _U32.pack(request) + _U32.pack(code) + _string(message.encode()) + _string(b"")
        )

    def _handle(self, ptype: int, body: bytes) -> None:
        if ptype == 1:  # INIT
            offered = b""
            if self.options.limits is not None or self.options.limits_silent:
                offered = _string(b"limits@openssh.com") + _string(b"1")
            self._send(2, _U32.pack(3) + offered)
            return
        request = _U32.unpack_from(body)[0]
        rest = body[4:]
        if ptype == 200:  # EXTENDED
            name = _take_string(rest)[0]
            if name == b"limits@openssh.com" and not self.options.limits_silent:
                assert self.options.limits is not None
                payload = b"".join(_U64.pack(value) for value in self.options.limits)
                self._send(201, _U32.pack(request) + payload)
            elif name != b"limits@openssh.com":
                self._status(request, 8, "unsupported")
            return  # limits_silent: never answered
        if ptype == 3:  # OPEN
            path = _take_string(rest)[0]
            if path not in self.options.files:
                self._status(request, 2, "no such file")
                return
            serial = len(self._handles).to_bytes(4, "big")
            handle = serial + b"h" * max(0, self.options.handle_length - 4)
            self._handles[handle] = path
            self._send(102, _U32.pack(request) + _string(handle))
        elif ptype == 5:  # READ
            handle, rest = _take_string(rest)
            offset, length = struct.unpack_from(">QI", rest)
            data = self.options.files.get(self._handles.get(handle, b""), b"")
            if offset >= len(data):
                self._status(request, 1, "EOF")
            else:
                self._send(103, _U32.pack(request) + _string(data[offset : offset + length]))
        elif ptype in (7, 17, 8):  # LSTAT, STAT, FSTAT
            key = _take_string(rest)[0]
            path = self._handles.get(key, key) if ptype == 8 else key
            if path in self.options.files:
                self._send(105, _U32.pack(request) + _attrs(len(self.options.files[path])))
            else:
                self._status(request, 2, "no such file")
        elif ptype == 16:  # REALPATH
            path = _take_string(rest)[0]
            name = path if path.startswith(b"/") else b"/" + path
            self._send(
                104,
                _U32.pack(request) + _U32.pack(1) + _string(name) + _string(b"") + _attrs(0, True),
            )
        elif ptype == 4:  # CLOSE
            self._handles.pop(_take_string(rest)[0], None)
            self._status(request, 0, "OK")
        else:
            self._status(request, 8, "unsupported")


def _take_string(data: bytes) -> tuple[bytes, bytes]:
    length = _U32.unpack_from(data)[0]
    return data[4 : 4 + length], data[4 + length :]


class RawServer(asyncssh.SSHServer):
    """An SSH server whose every session is a RawSFTPSession."""

    def __init__(self, options: RawOptions) -> None:
        self.options = options

    def session_requested(self) -> RawSFTPSession:
        return RawSFTPSession(self.options)
