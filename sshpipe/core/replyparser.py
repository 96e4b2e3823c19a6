"""Decoding the server's SFTP v3 messages, with no I/O: ``ReplyParser``.

It is fed whatever bytes the channel delivered and yields complete replies
(``codec``'s dataclasses). The hot path is the DATA reply: its payload is kept
as the list of slices it arrived in (``chunks``) so a download can
``os.pwritev`` them without joining. Every length is checked before it is
trusted: a reply over the cap, a handle over 256 bytes, a truncated or
overlong message is a ``CodecError``.
"""

from __future__ import annotations

import struct
from typing import Final

from .codec import (
    ATTR_ACMODTIME,
    ATTR_EXTENDED,
    ATTR_PERMISSIONS,
    ATTR_SIZE,
    ATTR_UIDGID,
    DEFAULT_MAX_REPLY_LEN,
    FXP_ATTRS,
    FXP_DATA,
    FXP_EXTENDED_REPLY,
    FXP_HANDLE,
    FXP_NAME,
    FXP_STATUS,
    FXP_VERSION,
    MAX_HANDLE_LEN,
    Attrs,
    AttrsReply,
    CodecError,
    Data,
    ExtendedReply,
    Handle,
    Limits,
    Name,
    Reply,
    ServerMessage,
    Status,
    Version,
)

__all__ = ["ReplyParser", "decode_limits"]

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_DATA_HEAD = struct.Struct(">IBII")  # length, type, request id, data length
_DATA_HEAD_LEN: Final = _DATA_HEAD.size


class _Reader:
    """Cursor over one complete packet body; every overrun is a CodecError."""

    __slots__ = ("_data", "_pos")

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def _take(self, n: int) -> bytes:
        end = self._pos + n
        if end > len(self._data):
            raise CodecError("truncated SFTP message")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def u32(self) -> int:
        value: int = _U32.unpack(self._take(4))[0]
        return value

    def u64(self) -> int:
        value: int = _U64.unpack(self._take(8))[0]
        return value

    def string(self) -> bytes:
        return self._take(self.u32())

    def text(self) -> str:
        """A message for people: undecodable bytes become U+FFFD."""
        return self.string().decode("utf-8", "replace")

    def name(self) -> str:
        """A path: every byte kept (undecodable ones as surrogates, see ``wire``)."""
        return self.string().decode("utf-8", "surrogateescape")

    def attrs(self) -> Attrs:
        flags = self.u32()
        size = self.u64() if flags & ATTR_SIZE else None
        uid = gid = None
        if flags & ATTR_UIDGID:
            uid, gid = self.u32(), self.u32()
        permissions = self.u32() if flags & ATTR_PERMISSIONS else None
        atime = mtime = None
        if flags & ATTR_ACMODTIME:
            atime, mtime = self.u32(), self.u32()
        if flags & ATTR_EXTENDED:
            for _ in range(self.u32()):
                self.string()
                self.string()
        return Attrs(size, uid, gid, permissions, atime, mtime)

    def at_end(self) -> bool:
        return self._pos == len(self._data)

    def rest(self) -> bytes:
        return self._take(len(self._data) - self._pos)


def decode_limits(payload: bytes) -> Limits:
    reader = _Reader(payload)
    return Limits(reader.u64(), reader.u64(), reader.u64(), reader.u64())


def _decode_body(ptype: int, body: bytes) -> ServerMessage:
    reader = _Reader(body)
    if ptype == FXP_VERSION:
        version = reader.u32()
        extensions: dict[str, bytes] = {}
        while not reader.at_end():
            name = reader.text()
            extensions[name] = reader.string()
        return Version(version, extensions)
    request_id = reader.u32()
    reply: Reply
    if ptype == FXP_STATUS:
        code = reader.u32()
        # Some v3 servers omit message and language tag (filexfer-02 allows it in practice).
        message = reader.text() if not reader.at_end() else ""
        if not reader.at_end():
            reader.string()  # language tag
        reply = Status(request_id, code, message)
    elif ptype == FXP_HANDLE:
        handle = reader.string()
        if len(handle) > MAX_HANDLE_LEN:
            raise CodecError(f"handle of {len(handle)} bytes (at most {MAX_HANDLE_LEN} allowed)")
        reply = Handle(request_id, handle)
    elif ptype == FXP_DATA:
        data = reader.string()
        reply = Data(request_id, [data], len(data))
    elif ptype == FXP_NAME:
        names = []
        for _ in range(reader.u32()):
            filename = reader.name()
            longname = reader.text()
            names.append((filename, longname, reader.attrs()))
        reply = Name(request_id, names)
    elif ptype == FXP_ATTRS:
        reply = AttrsReply(request_id, reader.attrs())
    elif ptype == FXP_EXTENDED_REPLY:
        reply = ExtendedReply(request_id, reader.rest())
    else:
        raise CodecError(f"unexpected SFTP message type {ptype}")
    if not reader.at_end():
        raise CodecError(f"trailing bytes in SFTP message type {ptype}")
    return reply


class ReplyParser:
    """Incremental decoder: ``feed()`` channel bytes, then drain ``next_message()``.

    DATA payloads are not copied into a reassembly buffer: once a DATA header is
    seen, the following slices of the incoming chunks are kept by reference.
    """

    def __init__(self, max_len: int = DEFAULT_MAX_REPLY_LEN) -> None:
        self.max_len = max_len
        self._buf = bytearray()  # header or a whole non-DATA packet being collected
        self._chunks: list[bytes | memoryview] = []  # DATA payload collected so far
        self._want = 0  # DATA payload bytes still missing
        self._data_id = 0
        self._data_len = 0
        self._ready: list[ServerMessage] = []

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._want:
                take = view[: self._want]
                self._chunks.append(take)
                self._want -= len(take)
                view = view[len(take) :]
                if not self._want:
                    self._ready.append(Data(self._data_id, self._chunks, self._data_len))
                    self._chunks = []
                continue
            view = self._feed_packet(view)

    def _feed_packet(self, view: memoryview) -> memoryview:
        buf = self._buf
        if len(buf) < 5:
            view = self._fill(view, 5)
            if len(buf) < 5:
                return view
        length = _U32.unpack_from(buf)[0]
        ptype = buf[4]
        if length < 5 or length > self.max_len:
            raise CodecError(f"SFTP message length {length} out of bounds")
        is_data = ptype == FXP_DATA
        if is_data and length < _DATA_HEAD_LEN - 4:
            raise CodecError("SFTP DATA message too short")
        view = self._fill(view, _DATA_HEAD_LEN if is_data else 4 + length)
        if is_data and len(buf) == _DATA_HEAD_LEN:
            _, _, request_id, data_len = _DATA_HEAD.unpack_from(buf)
            if data_len != length - 9:
                raise CodecError("SFTP DATA length does not match its packet")
            del buf[:]
            self._data_id = request_id
            self._data_len = data_len
            if data_len == 0:
                self._ready.append(Data(request_id, [], 0))
            else:
                self._want = data_len
        elif not is_data and len(buf) == 4 + length:
            body = bytes(buf[5:])
            del buf[:]
            self._ready.append(_decode_body(ptype, body))
        return view

    def _fill(self, view: memoryview, upto: int) -> memoryview:
        """Move bytes from ``view`` into the header buffer until it holds ``upto``."""
        need = upto - len(self._buf)
        if need > 0:
            self._buf += view[:need]
            view = view[need:]
        return view

    def next_message(self) -> ServerMessage | None:
        """The oldest complete message, or None when more bytes are needed."""
        return self._ready.pop(0) if self._ready else None

    def drain(self) -> list[ServerMessage]:
        ready, self._ready = self._ready, []
        return ready
