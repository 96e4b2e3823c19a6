"""The SFTP v3 codec (draft-ietf-secsh-filexfer-02): exact request bytes, reply parsing.

Server replies are built by a small encoder written here from the draft, not
from the module under test, so a mistake in one does not hide in the other.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sshpipe.core import codec, replyparser
from sshpipe.core.codec import (
    Attrs,
    AttrsReply,
    CodecError,
    Data,
    ExtendedReply,
    Handle,
    Limits,
    Name,
    ServerMessage,
    Status,
    Version,
)
from sshpipe.core.replyparser import ReplyParser

# -- a test-side encoder for server replies (filexfer-02 §3, §5, §7) ----------


def u32(value: int) -> bytes:
    return struct.pack(">I", value)


def u64(value: int) -> bytes:
    return struct.pack(">Q", value)


def sstr(value: bytes | str) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return u32(len(raw)) + raw


def packet(ptype: int, body: bytes) -> bytes:
    return u32(len(body) + 1) + bytes((ptype,)) + body


def wire_attrs(attrs: Attrs, extended: Sequence[tuple[bytes, bytes]] = ()) -> bytes:
    flags = 0
    parts = b""
    if attrs.size is not None:
        flags |= 0x01
        parts += u64(attrs.size)
    if attrs.uid is not None:
        assert attrs.gid is not None
        flags |= 0x02
        parts += u32(attrs.uid) + u32(attrs.gid)
    if attrs.permissions is not None:
        flags |= 0x04
        parts += u32(attrs.permissions)
    if attrs.atime is not None:
        assert attrs.mtime is not None
        flags |= 0x08
        parts += u32(attrs.atime) + u32(attrs.mtime)
    if extended:
        flags |= 0x80000000
        parts += u32(len(extended))
        for kind, value in extended:
            parts += sstr(kind) + sstr(value)
    return u32(flags) + parts


def wire_status(rid: int, code: int, message: str | None = None, lang: str | None = None) -> bytes:
    body = u32(rid) + u32(code)
    if message is not None:
        body += sstr(message)
        if lang is not None:
            body += sstr(lang)
    return packet(101, body)


def wire_handle(rid: int, handle: bytes) -> bytes:
    return packet(102, u32(rid) + sstr(handle))


def wire_data(rid: int, data: bytes) -> bytes:
    return packet(103, u32(rid) + sstr(data))


def wire_name(rid: int, entries: Sequence[tuple[str, str, bytes]]) -> bytes:
    body = u32(rid) + u32(len(entries))
    for filename, longname, attrs in entries:
        body += sstr(filename) + sstr(longname) + attrs
    return packet(104, body)


def wire_attrs_reply(rid: int, attrs: bytes) -> bytes:
    return packet(105, u32(rid) + attrs)


def wire_extended_reply(rid: int, payload: bytes) -> bytes:
    return packet(201, u32(rid) + payload)


def wire_version(version: int, extensions: Sequence[tuple[str, bytes]] = ()) -> bytes:
    body = u32(version)
    for name, value in extensions:
        body += sstr(name) + sstr(value)
    return packet(2, body)


def norm(message: ServerMessage | None) -> object:
    """DATA compares by content: how its payload was sliced depends on the feed."""
    if isinstance(message, Data):
        joined = message.to_bytes()
        assert message.length == len(joined) == sum(len(c) for c in message.chunks)
        return ("DATA", message.request_id, joined)
    return message


def parse_all(*chunks: bytes, max_len: int = codec.MAX_REPLY_LEN) -> list[object]:
    parser = ReplyParser(max_len)
    out: list[object] = []
    for chunk in chunks:
        parser.feed(chunk)
        out.extend(norm(m) for m in parser.drain())
    assert parser.next_message() is None
    return out


def parse_one(wire: bytes) -> object:
    [message] = parse_all(wire)
    return message


FULL_ATTRS = Attrs(size=2**40 + 5, uid=1000, gid=100, permissions=0o100644, atime=7, mtime=9)

# -- request encoders: exact filexfer-02 bytes -------------------------------


def test_encode_read_exact_bytes() -> None:
    expected = bytes.fromhex(
        "00000017"  # length: type + id + string(2) + offset + len = 1+4+6+8+4
        "05"  # SSH_FXP_READ
        "00000007"  # request id
        "00000002"
        "6831"  # handle "h1"
        "0102030405060708"  # uint64 offset
        "00008000"  # uint32 len
    )
    assert codec.encode_read(7, b"h1", 0x0102030405060708, 32768) == expected


def test_encode_write_header_exact_bytes_and_framing() -> None:
    payload = b"hello"
    header = codec.encode_write_header(9, b"hd", 4096, len(payload))
    expected = bytes.fromhex(
        "0000001c"  # length counts the payload that follows: 1+4+6+8+4+5 = 28
        "06"  # SSH_FXP_WRITE
        "00000009"  # request id
        "00000002"
        "6864"  # handle "hd"
        "0000000000001000"  # uint64 offset
        "00000005"  # string data: its length; the payload itself is sent after
    )
    assert header == expected
    whole = header + payload
    assert struct.unpack(">I", whole[:4])[0] == len(whole) - 4


def test_encode_open_with_all_attrs_exact_bytes() -> None:
    pflags = codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_TRUNC
    wire = codec.encode_open(
        1,
        b"/tmp/x",
        pflags,
        Attrs(size=0x10, uid=1000, gid=100, permissions=0o644, atime=1, mtime=2),
    )
    body = bytes.fromhex(
        "03"  # SSH_FXP_OPEN
        "00000001"  # request id
        "00000006"
        "2f746d702f78"  # filename "/tmp/x"
        "0000001a"  # pflags WRITE|CREAT|TRUNC
        "0000000f"  # attr flags SIZE|UIDGID|PERMISSIONS|ACMODTIME
        "0000000000000010"  # size
        "000003e8"
        "00000064"  # uid 1000, gid 100
        "000001a4"  # permissions 0644
        "00000001"
        "00000002"  # atime, mtime
    )
    assert wire == u32(len(body)) + body


@pytest.mark.parametrize(
    ("attrs", "encoded"),
    [
        (Attrs(), "00000000"),
        (Attrs(permissions=0o600), "0000000400000180"),
        (Attrs(size=3), "000000010000000000000003"),
        (Attrs(atime=5, mtime=6), "000000080000000500000006"),
        (Attrs(uid=1, gid=2, size=0), "0000000300000000000000000000000100000002"),
    ],
)
def test_encode_attrs(attrs: Attrs, encoded: str) -> None:
    assert codec.encode_attrs(attrs) == bytes.fromhex(encoded)


def test_encode_posix_rename_exact_bytes() -> None:
    name = b"posix-rename@openssh.com"
    body = (
        b"\xc8"  # SSH_FXP_EXTENDED
        + u32(42)
        + u32(len(name))
        + name
        + bytes.fromhex("00000003")
        + b"old"
        + bytes.fromhex("00000003")
        + b"new"
    )
    assert codec.encode_posix_rename(42, b"old", b"new") == u32(len(body)) + body


def test_encode_copy_data_exact_bytes() -> None:
    name = b"copy-data"
    body = (
        b"\xc8"  # SSH_FXP_EXTENDED
        + u32(7)
        + u32(len(name))
        + name
        + u32(2)
        + b"RH"  # read-from-handle
        + struct.pack(">QQ", 5, 0)  # read-from-offset, read-data-length (0: to EOF)
        + u32(1)
        + b"W"  # write-to-handle
        + struct.pack(">Q", 9)  # write-to-offset
    )
    assert codec.encode_copy_data(7, b"RH", 5, 0, b"W", 9) == u32(len(body)) + body


@pytest.mark.parametrize(
    ("wire", "expected_hex"),
    [
        (codec.encode_init(), "000000050100000003"),
        (
            codec.encode_handle_request(codec.FXP_CLOSE, 3, b"H"),
            "0000000a04000000030000000148",
        ),
        (
            codec.encode_path_request(codec.FXP_STAT, 4, b"/a"),
            "0000000b1100000004000000022f61",
        ),
        (
            codec.encode_rename(5, b"a", b"b"),
            "0000000f120000000500000001610000000162",
        ),
        (
            codec.encode_extended(6, "limits@openssh.com"),
            "0000001bc80000000600000012" + b"limits@openssh.com".hex(),
        ),
    ],
    ids=["init", "close", "stat", "rename", "extended-limits"],
)
def test_other_request_encoders(wire: bytes, expected_hex: str) -> None:
    assert wire == bytes.fromhex(expected_hex)


# -- reply decoding -----------------------------------------------------------


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (wire_status(1, 0, "Success", "en"), Status(1, codec.FX_OK, "Success")),
        (wire_status(2, 1, "End of file", ""), Status(2, codec.FX_EOF, "End of file")),
        (wire_status(3, 2), Status(3, codec.FX_NO_SUCH_FILE, "")),  # no message, no lang
        (wire_status(4, 4, "failed"), Status(4, codec.FX_FAILURE, "failed")),  # no lang
        (wire_status(5, 3, "Zugriff verweigert ✗", "de"), Status(5, 3, "Zugriff verweigert ✗")),
        (wire_status(2**32 - 1, 8, "", ""), Status(2**32 - 1, 8, "")),
    ],
    ids=["ok-full", "eof", "bare", "message-no-lang", "utf8", "max-id"],
)
def test_status(wire: bytes, expected: Status) -> None:
    assert parse_one(wire) == expected


@pytest.mark.parametrize("handle", [b"", b"\x00", b"h" * 256])
def test_handle(handle: bytes) -> None:
    assert parse_one(wire_handle(17, handle)) == Handle(17, handle)


@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 129])
def test_data(payload: bytes) -> None:
    assert parse_one(wire_data(8, payload)) == ("DATA", 8, payload)


def test_zero_length_data_has_no_chunks() -> None:
    parser = ReplyParser()
    parser.feed(wire_data(8, b""))
    assert parser.drain() == [Data(8, [], 0)]


def test_data_payload_is_not_copied() -> None:
    """The DATA payload is a view into the fed bytes (the zero-copy hot path)."""
    payload = b"p" * 1000
    fed = wire_data(1, payload)
    parser = ReplyParser()
    parser.feed(fed)
    message = parser.next_message()
    assert isinstance(message, Data)
    [chunk] = message.chunks
    assert isinstance(chunk, memoryview) and chunk.obj is fed
    assert chunk == payload


def test_data_split_keeps_each_slice() -> None:
    payload = bytes(range(200))
    wire = wire_data(2, payload)
    parser = ReplyParser()
    parser.feed(wire[:20])  # header + 7 payload bytes
    parser.feed(wire[20:100])
    assert parser.next_message() is None
    parser.feed(wire[100:])
    message = parser.next_message()
    assert isinstance(message, Data)
    assert [len(c) for c in message.chunks] == [7, 80, 113]
    assert message.to_bytes() == payload and message.length == 200


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        ([], []),
        (
            [("a.txt", "-rw-r--r-- 1 u g 3 Jan 1 a.txt", wire_attrs(Attrs(size=3)))],
            [("a.txt", "-rw-r--r-- 1 u g 3 Jan 1 a.txt", Attrs(size=3))],
        ),
        (
            [
                (".", "", wire_attrs(FULL_ATTRS, [(b"k@x", b"v"), (b"", b"")])),
                ("ünï", "l", wire_attrs(Attrs())),
                ("z", "", wire_attrs(Attrs(permissions=0o40755))),
            ],
            [(".", "", FULL_ATTRS), ("ünï", "l", Attrs()), ("z", "", Attrs(permissions=0o40755))],
        ),
    ],
    ids=["empty", "one", "three-with-extended"],
)
def test_name(
    entries: list[tuple[str, str, bytes]], expected: list[tuple[str, str, Attrs]]
) -> None:
    assert parse_one(wire_name(5, entries)) == Name(5, expected)


@pytest.mark.parametrize(
    ("attrs", "extended"),
    [
        (Attrs(), []),
        (Attrs(size=0), []),
        (Attrs(size=2**64 - 1), []),
        (Attrs(uid=0, gid=2**32 - 1), []),
        (Attrs(permissions=0o40755), []),
        (Attrs(atime=1, mtime=2**32 - 1), []),
        (FULL_ATTRS, []),
        (FULL_ATTRS, [(b"acl@example", b"\x00\x01"), (b"x", b"")]),
        (Attrs(), [(b"only@ext", b"v" * 40)]),
    ],
    ids=["none", "size0", "size-max", "uidgid", "perm", "times", "all", "all+ext", "ext-only"],
)
def test_attrs_reply(attrs: Attrs, extended: list[tuple[bytes, bytes]]) -> None:
    assert parse_one(wire_attrs_reply(6, wire_attrs(attrs, extended))) == AttrsReply(6, attrs)


def test_attrs_is_dir() -> None:
    assert Attrs(permissions=0o40755).is_dir()
    assert not Attrs(permissions=0o100644).is_dir()
    assert not Attrs().is_dir()


@pytest.mark.parametrize("payload", [b"", b"\x00" * 32, b"anything at all"])
def test_extended_reply(payload: bytes) -> None:
    assert parse_one(wire_extended_reply(9, payload)) == ExtendedReply(9, payload)


@pytest.mark.parametrize(
    ("extensions", "expected"),
    [
        ([], {}),
        (
            [("posix-rename@openssh.com", b"1"), ("limits@openssh.com", b"1"), ("x", b"")],
            {"posix-rename@openssh.com": b"1", "limits@openssh.com": b"1", "x": b""},
        ),
    ],
)
def test_version(extensions: list[tuple[str, bytes]], expected: dict[str, bytes]) -> None:
    assert parse_one(wire_version(3, extensions)) == Version(3, expected)


def test_decode_limits() -> None:
    payload = u64(256 * 1024) + u64(255 * 1024) + u64(0) + u64(2**64 - 1)
    assert replyparser.decode_limits(payload) == Limits(256 * 1024, 255 * 1024, 0, 2**64 - 1)
    # as it arrives: an EXTENDED_REPLY carrying the four uint64s
    reply = parse_one(wire_extended_reply(3, payload))
    assert isinstance(reply, ExtendedReply)
    assert replyparser.decode_limits(reply.payload).max_read_len == 255 * 1024


@pytest.mark.parametrize("length", [0, 8, 31])
def test_decode_limits_truncated(length: int) -> None:
    with pytest.raises(CodecError):
        replyparser.decode_limits(bytes(length))


def test_incomplete_input_is_not_an_error() -> None:
    wire = wire_status(1, 0, "ok", "") + wire_data(2, b"abc") + wire_handle(3, b"h")
    for cut in (3, 4, 5, 8, 20, 35, len(wire) - 1):
        parser = ReplyParser()
        parser.feed(wire[:cut])
        got = [norm(m) for m in parser.drain()]
        parser.feed(wire[cut:])
        got += [norm(m) for m in parser.drain()]
        assert got == [Status(1, 0, "ok"), ("DATA", 2, b"abc"), Handle(3, b"h")]


# -- any reply sequence, any chunking -------------------------------------------

u32s = st.integers(0, 2**32 - 1)
u64s = st.integers(0, 2**64 - 1)
texts = st.text(max_size=12)
small_bytes = st.binary(max_size=24)


@st.composite
def attrs_wire(draw: st.DrawFn) -> tuple[Attrs, bytes]:
    uidgid = draw(st.none() | st.tuples(u32s, u32s))
    times = draw(st.none() | st.tuples(u32s, u32s))
    attrs = Attrs(
        size=draw(st.none() | u64s),
        uid=None if uidgid is None else uidgid[0],
        gid=None if uidgid is None else uidgid[1],
        permissions=draw(st.none() | u32s),
        atime=None if times is None else times[0],
        mtime=None if times is None else times[1],
    )
    extended = draw(st.lists(st.tuples(small_bytes, small_bytes), max_size=3))
    return attrs, wire_attrs(attrs, extended)


@st.composite
def replies(draw: st.DrawFn) -> tuple[bytes, object]:
    """One server message: its wire bytes and what it must decode to."""
    kind = draw(st.sampled_from(["status", "handle", "data", "name", "attrs", "ext", "version"]))
    rid = draw(u32s)
    if kind == "status":
        code = draw(st.integers(0, 8))
        form = draw(st.sampled_from(["bare", "message", "full"]))
        message = draw(texts)
        if form == "bare":
            return wire_status(rid, code), Status(rid, code, "")
        lang = draw(texts) if form == "full" else None
        return wire_status(rid, code, message, lang), Status(rid, code, message)
    if kind == "handle":
        handle = draw(small_bytes)
        return wire_handle(rid, handle), Handle(rid, handle)
    if kind == "data":
        data = draw(st.binary(max_size=600))
        return wire_data(rid, data), ("DATA", rid, data)
    if kind == "name":
        rows = draw(st.lists(st.tuples(texts, texts, attrs_wire()), max_size=3))
        wire = wire_name(rid, [(f, ln, w) for f, ln, (_, w) in rows])
        return wire, Name(rid, [(f, ln, a) for f, ln, (a, _) in rows])
    if kind == "attrs":
        attrs, wire = draw(attrs_wire())
        return wire_attrs_reply(rid, wire), AttrsReply(rid, attrs)
    if kind == "ext":
        payload = draw(small_bytes)
        return wire_extended_reply(rid, payload), ExtendedReply(rid, payload)
    extensions = draw(st.dictionaries(texts, small_bytes, max_size=3))
    return wire_version(rid, list(extensions.items())), Version(rid, extensions)


@st.composite
def chunked(draw: st.DrawFn, wire: bytes) -> list[bytes]:
    if draw(st.booleans()):
        cuts = sorted(draw(st.sets(st.integers(0, len(wire)), max_size=40)))
    else:
        step = draw(st.integers(1, 16))  # regular small chunks, down to one byte
        cuts = list(range(0, len(wire), step))
    bounds = [0, *cuts, len(wire)]
    return [wire[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), messages=st.lists(replies(), max_size=12))
def test_any_replies_any_chunking(
    data: st.DataObject, messages: list[tuple[bytes, object]]
) -> None:
    wire = b"".join(w for w, _ in messages)
    chunks = data.draw(chunked(wire))
    assert b"".join(chunks) == wire
    assert parse_all(*chunks) == [expected for _, expected in messages]


def test_every_sample_reply_fed_one_byte_at_a_time() -> None:
    wires = [
        wire_version(3, [("limits@openssh.com", b"1")]),
        wire_status(1, 0, "ok", "en"),
        wire_status(2, 1),
        wire_handle(3, b"handle"),
        wire_data(4, b""),
        wire_data(5, b"payload"),
        wire_name(6, [("f", "l", wire_attrs(FULL_ATTRS, [(b"a", b"b")]))]),
        wire_attrs_reply(7, wire_attrs(FULL_ATTRS)),
        wire_extended_reply(8, b"x"),
    ]
    wire = b"".join(wires)
    one_by_one = parse_all(*(wire[i : i + 1] for i in range(len(wire))))
    assert one_by_one == parse_all(wire)
    assert len(one_by_one) == len(wires)


# -- malformed input -------------------------------------------------------------


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(u32(0) + b"\x65", id="length-0"),
        pytest.param(u32(4) + b"\x65" + u32(1), id="length-4"),
        pytest.param(u32(codec.MAX_REPLY_LEN + 1) + b"\x67", id="data-over-max"),
        pytest.param(u32(codec.MAX_REPLY_LEN + 1) + b"\x65", id="status-over-max"),
        pytest.param(u32(2**32 - 1) + b"\x66", id="length-2^32-1"),
    ],
)
def test_length_out_of_bounds(wire: bytes) -> None:
    with pytest.raises(CodecError):
        ReplyParser().feed(wire)


def test_custom_max_len_boundary() -> None:
    ok = wire_handle(1, b"h" * 91)  # body is 1 + 4 + 4 + 91 = 100 bytes
    assert parse_all(ok, max_len=100) == [Handle(1, b"h" * 91)]
    with pytest.raises(CodecError):
        ReplyParser(100).feed(wire_handle(1, b"h" * 92))
    with pytest.raises(CodecError):
        ReplyParser(100).feed(wire_data(1, b"d" * 92)[:5])  # rejected from the header alone


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(u32(1 + 4 + 4 + 3) + b"\x67" + u32(1) + u32(4) + b"abc", id="inner-longer"),
        pytest.param(u32(1 + 4 + 4 + 3) + b"\x67" + u32(1) + u32(2) + b"abc", id="inner-shorter"),
        pytest.param(u32(1 + 4 + 4) + b"\x67" + u32(1) + u32(1), id="empty-claims-1"),
        pytest.param(u32(1 + 4 + 3) + b"\x67" + u32(1) + b"\x00\x00\x00", id="too-short"),
    ],
)
def test_data_length_disagrees_with_packet(wire: bytes) -> None:
    with pytest.raises(CodecError):
        ReplyParser().feed(wire)


@pytest.mark.parametrize("ptype", [0, 1, 3, 5, 100, 106, 200, 202, 255])
def test_unknown_reply_type(ptype: int) -> None:
    with pytest.raises(CodecError, match="unexpected"):
        ReplyParser().feed(packet(ptype, u32(1) + u32(0)))


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(packet(102, u32(1) + sstr(b"h") + b"X"), id="handle"),
        pytest.param(packet(104, u32(1) + u32(0) + b"XX"), id="name"),
        pytest.param(packet(105, u32(1) + wire_attrs(Attrs(size=1)) + b"X"), id="attrs"),
        # STATUS: found accepting trailing bytes / a cut language tag; fixed in 12ea1d6
        pytest.param(packet(101, u32(1) + u32(0) + sstr("m") + sstr("en") + b"XYZ"), id="status"),
        pytest.param(packet(101, u32(1) + u32(0) + b"\x00"), id="status-stray-byte"),
    ],
)
def test_trailing_bytes(wire: bytes) -> None:
    with pytest.raises(CodecError):
        ReplyParser().feed(wire)


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(packet(101, u32(1)), id="status-no-code"),
        pytest.param(packet(101, u32(1) + u32(0) + u32(10) + b"short"), id="status-message"),
        pytest.param(packet(101, u32(1) + u32(0) + sstr("m") + u32(5) + b"e"), id="status-lang"),
        pytest.param(packet(102, u32(1) + u32(9) + b"abc"), id="handle"),
        pytest.param(packet(102, u32(1) + b"\x00\x00"), id="handle-length"),
        pytest.param(packet(104, u32(1) + u32(2) + sstr("a") + sstr("b") + u32(0)), id="name"),
        pytest.param(packet(104, u32(1) + u32(1) + sstr("a") + sstr("b")), id="name-attrs"),
        pytest.param(packet(105, u32(1) + u32(0x01) + b"\x00" * 7), id="attrs-size"),
        pytest.param(packet(105, u32(1) + u32(0x02) + u32(1)), id="attrs-gid"),
        pytest.param(packet(105, u32(1) + u32(0x0F)), id="attrs-all"),
        pytest.param(packet(105, u32(1) + u32(0x80000000) + u32(1) + sstr(b"k")), id="attrs-ext"),
        pytest.param(packet(105, u32(1)), id="attrs-flags"),
        pytest.param(packet(2, u32(3) + sstr("limits@openssh.com")), id="version-ext"),
        pytest.param(packet(2, u32(3) + b"\x00\x00"), id="version-ext-name"),
    ],
)
def test_truncated_body(wire: bytes) -> None:
    with pytest.raises(CodecError):
        ReplyParser().feed(wire)


def test_error_after_good_messages_keeps_them() -> None:
    parser = ReplyParser()
    with pytest.raises(CodecError):
        parser.feed(wire_handle(1, b"h") + u32(0) + b"\x65")
    assert parser.drain() == [Handle(1, b"h")]
