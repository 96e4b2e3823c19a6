"""SFTP version 3 wire format, client side, with no I/O (h11-style): its numbers,
its messages, and the requests.

Requests are encoded to ``bytes`` by plain functions; replies are the
dataclasses here, decoded by ``replyparser.ReplyParser``, which is fed whatever
bytes the channel delivered and yields complete replies. The protocol is
draft-ietf-secsh-filexfer-02 ("v3"), the version OpenSSH and asyncssh speak,
plus the ``limits@openssh.com`` extension (PROTOCOL.sftp in OpenSSH).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

# Packet types (filexfer-02 §3).
FXP_INIT: Final = 1
FXP_VERSION: Final = 2
FXP_OPEN: Final = 3
FXP_CLOSE: Final = 4
FXP_READ: Final = 5
FXP_WRITE: Final = 6
FXP_LSTAT: Final = 7
FXP_FSTAT: Final = 8
FXP_SETSTAT: Final = 9
FXP_FSETSTAT: Final = 10
FXP_OPENDIR: Final = 11
FXP_READDIR: Final = 12
FXP_REMOVE: Final = 13
FXP_MKDIR: Final = 14
FXP_RMDIR: Final = 15
FXP_REALPATH: Final = 16
FXP_STAT: Final = 17
FXP_RENAME: Final = 18
FXP_READLINK: Final = 19
FXP_SYMLINK: Final = 20
FXP_STATUS: Final = 101
FXP_HANDLE: Final = 102
FXP_DATA: Final = 103
FXP_NAME: Final = 104
FXP_ATTRS: Final = 105
FXP_EXTENDED: Final = 200
FXP_EXTENDED_REPLY: Final = 201

# Status codes (filexfer-02 §7).
FX_OK: Final = 0
FX_EOF: Final = 1
FX_NO_SUCH_FILE: Final = 2
FX_PERMISSION_DENIED: Final = 3
FX_FAILURE: Final = 4
FX_BAD_MESSAGE: Final = 5
FX_NO_CONNECTION: Final = 6
FX_CONNECTION_LOST: Final = 7
FX_OP_UNSUPPORTED: Final = 8

# Open flags (filexfer-02 §6.3).
FXF_READ: Final = 0x01
FXF_WRITE: Final = 0x02
FXF_APPEND: Final = 0x04
FXF_CREAT: Final = 0x08
FXF_TRUNC: Final = 0x10
FXF_EXCL: Final = 0x20

# Attribute flags (filexfer-02 §5).
ATTR_SIZE: Final = 0x01
ATTR_UIDGID: Final = 0x02
ATTR_PERMISSIONS: Final = 0x04
ATTR_ACMODTIME: Final = 0x08
ATTR_EXTENDED: Final = 0x80000000

SFTP_VERSION: Final = 3

# Largest reply we accept by default: OpenSSH's sftp-server caps packets at
# 256 KiB (SFTP_MAX_MSG_LENGTH) and our READs ask at most that much, so a DATA
# reply and its header fit. Anything bigger is a broken or hostile server, and
# buffering it would let it balloon our memory. A transfer that asks for larger
# blocks (``-B``) raises its session's cap to its block (``sizing.reply_cap``).
DEFAULT_MAX_REPLY_LEN: Final = 256 * 1024 + 1024
# The cap whatever the block: asyncssh's own packet limit (4 MiB + 1 KiB).
MAX_REPLY_LEN: Final = 4 * 1024 * 1024 + 1024
# filexfer-02 §3: "All servers SHOULD support packets of at least 34000 bytes."
MIN_PACKET_LEN: Final = 34000
# filexfer-02 §3: "The handle strings MUST NOT be longer than 256 bytes."
# OpenSSH's are 4. A longer one is repeated in every READ we send (a 4 MiB
# handle made an 8 MiB get peak at 186 MiB).
MAX_HANDLE_LEN: Final = 256


def wire(path: str) -> bytes:
    """A path as bytes on the wire: names from the server came in with surrogateescape.

    A name that is not UTF-8 (Latin-1, say) thus goes back byte for byte.
    """
    return path.encode("utf-8", "surrogateescape")


_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_HEAD = struct.Struct(">IBI")  # length, type, request id
_READ_TAIL = struct.Struct(">QI")  # offset, length


class CodecError(Exception):
    """The peer sent bytes that are not valid SFTP v3."""


@dataclass(frozen=True, slots=True)
class Attrs:
    """File attributes (filexfer-02 §5); ``None`` means the server did not send it."""

    size: int | None = None
    uid: int | None = None
    gid: int | None = None
    permissions: int | None = None
    atime: int | None = None
    mtime: int | None = None

    def is_dir(self) -> bool:
        return self.permissions is not None and (self.permissions & 0o170000) == 0o040000

    @property
    def kind(self) -> str:
        """ "file", "dir", "symlink" or "special" (fifo, socket, device) from the mode bits.

        A server that sends no permissions describes nothing else either: we
        take the entry for a regular file and let OPEN say otherwise.
        """
        if self.permissions is None:
            return "file"
        return _KINDS.get(self.permissions & 0o170000, "special")


_KINDS = {0o100000: "file", 0o040000: "dir", 0o120000: "symlink"}


@dataclass(frozen=True, slots=True)
class Status:
    request_id: int
    code: int
    message: str


@dataclass(frozen=True, slots=True)
class Handle:
    request_id: int
    handle: bytes


@dataclass(frozen=True, slots=True)
class Data:
    request_id: int
    chunks: list[bytes | memoryview]
    length: int

    def to_bytes(self) -> bytes:
        return b"".join(self.chunks)


@dataclass(frozen=True, slots=True)
class Name:
    request_id: int
    names: list[tuple[str, str, Attrs]]  # filename, longname, attrs


@dataclass(frozen=True, slots=True)
class AttrsReply:
    request_id: int
    attrs: Attrs


@dataclass(frozen=True, slots=True)
class ExtendedReply:
    request_id: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Version:
    version: int
    extensions: dict[str, bytes] = field(default_factory=dict)


Reply = Status | Handle | Data | Name | AttrsReply | ExtendedReply
ServerMessage = Reply | Version


@dataclass(frozen=True, slots=True)
class Limits:
    """The ``limits@openssh.com`` reply; 0 means "no limit stated"."""

    max_packet_len: int
    max_read_len: int
    max_write_len: int
    max_open_handles: int


# -- encoding requests -----------------------------------------------------


def _string(value: bytes) -> bytes:
    return _U32.pack(len(value)) + value


def _packet(ptype: int, body: bytes) -> bytes:
    return _U32.pack(len(body) + 1) + bytes((ptype,)) + body


def encode_attrs(attrs: Attrs) -> bytes:
    flags = 0
    parts: list[bytes] = []
    if attrs.size is not None:
        flags |= ATTR_SIZE
        parts.append(_U64.pack(attrs.size))
    if attrs.uid is not None and attrs.gid is not None:
        flags |= ATTR_UIDGID
        parts.append(_U32.pack(attrs.uid) + _U32.pack(attrs.gid))
    if attrs.permissions is not None:
        flags |= ATTR_PERMISSIONS
        parts.append(_U32.pack(attrs.permissions))
    if attrs.atime is not None and attrs.mtime is not None:
        flags |= ATTR_ACMODTIME
        parts.append(_U32.pack(attrs.atime) + _U32.pack(attrs.mtime))
    return _U32.pack(flags) + b"".join(parts)


def encode_init() -> bytes:
    return _packet(FXP_INIT, _U32.pack(SFTP_VERSION))


def encode_open(request_id: int, path: bytes, pflags: int, attrs: Attrs = Attrs()) -> bytes:
    body = _U32.pack(request_id) + _string(path) + _U32.pack(pflags) + encode_attrs(attrs)
    return _packet(FXP_OPEN, body)


def encode_handle_request(ptype: int, request_id: int, handle: bytes) -> bytes:
    """CLOSE, FSTAT, READDIR: requests whose only argument is a handle."""
    return _packet(ptype, _U32.pack(request_id) + _string(handle))


def encode_path_request(ptype: int, request_id: int, path: bytes) -> bytes:
    """STAT, LSTAT, REALPATH, REMOVE, OPENDIR, RMDIR: requests on one path."""
    return _packet(ptype, _U32.pack(request_id) + _string(path))


def encode_path_attrs_request(ptype: int, request_id: int, path: bytes, attrs: Attrs) -> bytes:
    """MKDIR, SETSTAT: a path and the attributes to give it."""
    return _packet(ptype, _U32.pack(request_id) + _string(path) + encode_attrs(attrs))


def encode_handle_attrs_request(ptype: int, request_id: int, handle: bytes, attrs: Attrs) -> bytes:
    """FSETSTAT: a handle and the attributes to give its file."""
    return _packet(ptype, _U32.pack(request_id) + _string(handle) + encode_attrs(attrs))


def encode_symlink(request_id: int, first: bytes, second: bytes) -> bytes:
    """SYMLINK with its two paths in the order the caller chose (servers disagree on it)."""
    return _packet(FXP_SYMLINK, _U32.pack(request_id) + _string(first) + _string(second))


def encode_rename(request_id: int, old: bytes, new: bytes) -> bytes:
    return _packet(FXP_RENAME, _U32.pack(request_id) + _string(old) + _string(new))


def encode_read(request_id: int, handle: bytes, offset: int, length: int) -> bytes:
    # Built by hand: this runs once per block, so no intermediate helpers.
    body_len = 1 + 4 + 4 + len(handle) + 12
    return b"".join(
        (
            _HEAD.pack(body_len, FXP_READ, request_id),
            _U32.pack(len(handle)),
            handle,
            _READ_TAIL.pack(offset, length),
        )
    )


def encode_write_header(request_id: int, handle: bytes, offset: int, length: int) -> bytes:
    """Everything of a WRITE but its payload, so the payload is never copied to build it."""
    body_len = 1 + 4 + 4 + len(handle) + 8 + 4 + length
    return b"".join(
        (
            _HEAD.pack(body_len, FXP_WRITE, request_id),
            _U32.pack(len(handle)),
            handle,
            _U64.pack(offset),
            _U32.pack(length),
        )
    )


def encode_posix_rename(request_id: int, old: bytes, new: bytes) -> bytes:
    """posix-rename@openssh.com: rename that replaces the target atomically."""
    return encode_extended(request_id, "posix-rename@openssh.com", _string(old) + _string(new))


def encode_hardlink(request_id: int, old: bytes, new: bytes) -> bytes:
    """hardlink@openssh.com: link(2) ``new`` to ``old``, refused if ``new`` exists."""
    return encode_extended(request_id, "hardlink@openssh.com", _string(old) + _string(new))


def encode_copy_data(rid: int, src: bytes, offset: int, length: int, dst: bytes, at: int) -> bytes:
    """copy-data (filexfer-extensions-00 §7): the server copies between two of its handles."""
    body = _string(src) + _U64.pack(offset) + _U64.pack(length) + _string(dst) + _U64.pack(at)
    return encode_extended(rid, "copy-data", body)


def encode_fsync(request_id: int, handle: bytes) -> bytes:
    """fsync@openssh.com: the server fsyncs the file behind ``handle``."""
    return encode_extended(request_id, "fsync@openssh.com", _string(handle))


def encode_extended(request_id: int, name: str, payload: bytes = b"") -> bytes:
    return _packet(FXP_EXTENDED, _U32.pack(request_id) + _string(name.encode("ascii")) + payload)
