"""check-file as tables: which way a server is asked, the request bytes, its reply, the plan.

Requests and replies are built by a small encoder written here from the
draft and from ProFTPD's, paramiko's and MINA SSHD's sources, not from the
module under test.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sshpipe.core.checkfile import (
    DIGEST_SIZES,
    LISTED_BLOCK,
    PREFERENCE,
    SHA256,
    CheckFile,
    Hasher,
    HashSpec,
    VerifyPlan,
    check_ranges,
    choose_check_file,
    decode_check_file_reply,
    encode_check_file,
    hashes_in,
    level_strength,
    offered_algorithms,
    plan_verify,
)
from sshpipe.core.config import VERIFY_LEVELS
from sshpipe.core.errors import ProtocolError
from sshpipe.core.stats import HashAlgorithm, Verified


def u32(value: int) -> bytes:
    return struct.pack(">I", value)


def u64(value: int) -> bytes:
    return struct.pack(">Q", value)


def sstr(value: bytes | str) -> bytes:
    raw = value.encode() if isinstance(value, str) else value
    return u32(len(raw)) + raw


MD5 = HashSpec("md5")
MD5_BLOCKS = HashSpec("md5", LISTED_BLOCK)
SHA1_BLOCKS = HashSpec("sha1", LISTED_BLOCK)
H16 = bytes(range(16))
H32 = bytes(range(32))


# -- which algorithm, which request ------------------------------------------------


@pytest.mark.parametrize(
    ("data", "algorithms"),
    [
        (b"1", None),  # ProFTPD: no list
        (b"", None),
        (b"2,3", None),
        (b"md5,sha1", ("sha1", "md5")),  # paramiko
        (b"sha256, md5", ("sha256", "md5")),
        (
            b"md5,sha512,sha384,sha224,sha256,sha1",
            ("sha256", "sha512", "sha384", "sha224", "sha1", "md5"),
        ),
        (b"crc32", ()),
        (b"MD5", ()),  # names are lowercase (ProFTPD compares with strcmp)
        (b"\xff\xfe", ()),
    ],
)
def test_the_algorithms_a_version_extension_lists(
    data: bytes, algorithms: tuple[str, ...] | None
) -> None:
    assert offered_algorithms(data) == algorithms


@pytest.mark.parametrize(
    ("extensions", "chosen"),
    [
        ({}, None),
        ({"limits@openssh.com": b"1"}, None),
        ({"check-file": b"1"}, CheckFile("check-file-name", SHA256)),  # ProFTPD
        ({"check-file": b"md5,sha1"}, CheckFile("check-file", SHA1_BLOCKS)),  # paramiko
        ({"check-file": b"md5"}, CheckFile("check-file", MD5_BLOCKS)),
        (
            {"check-file": b"md5,sha1,sha256"},
            CheckFile("check-file", HashSpec("sha256", LISTED_BLOCK)),
        ),
        ({"check-file": b"crc32"}, None),  # nothing we can compute
        ({"check-file-name": b"sha512,md5"}, CheckFile("check-file-name", HashSpec("sha512"))),
        ({"check-file-name": b"1", "check-file": b"md5"}, CheckFile("check-file-name", SHA256)),
        ({"check-file-handle": b""}, CheckFile("check-file-handle", SHA256)),
        ({"check-file-name": b"crc32"}, None),
    ],
)
def test_how_a_server_is_asked(extensions: dict[str, bytes], chosen: CheckFile | None) -> None:
    assert choose_check_file(extensions) == chosen


def test_what_a_check_file_level_is_called() -> None:
    assert CheckFile("check-file", MD5_BLOCKS).level == "hash-remote:md5"
    assert CheckFile("check-file-name", SHA256).level == "hash-remote:sha256"
    assert CheckFile("check-file", MD5_BLOCKS).by_handle
    assert not CheckFile("check-file-name", SHA256).by_handle


PROFTPD = CheckFile("check-file-name", SHA256)
PARAMIKO = CheckFile("check-file", MD5_BLOCKS)


@pytest.mark.parametrize(
    ("level", "check_file", "runs_commands", "plan"),
    [
        ("none", PROFTPD, True, VerifyPlan("none", False, None, ())),
        ("size", PROFTPD, True, VerifyPlan("size", False, None, ())),
        ("hash", None, True, VerifyPlan("hash", True, None, (SHA256,))),
        ("hash", None, False, VerifyPlan("hash", False, None, ())),  # nothing left: it fails
        ("best", None, True, VerifyPlan("best", True, None, (SHA256,))),
        ("best", None, False, VerifyPlan("best", False, None, ())),  # only the size is left
        ("best", PARAMIKO, False, VerifyPlan("best", False, PARAMIKO, (MD5_BLOCKS,))),
        ("read-back", None, False, VerifyPlan("read-back", False, None, (SHA256,))),
        # One hash serves sha256sum and a check-file of the whole file's SHA-256.
        ("hash", PROFTPD, True, VerifyPlan("hash", True, PROFTPD, (SHA256,))),
        ("hash", PROFTPD, False, VerifyPlan("hash", False, PROFTPD, (SHA256,))),
        # md5 by blocks alone where no command can run, with SHA-256 where one may.
        ("hash", PARAMIKO, False, VerifyPlan("hash", False, PARAMIKO, (MD5_BLOCKS,))),
        ("hash", PARAMIKO, True, VerifyPlan("hash", True, PARAMIKO, (SHA256, MD5_BLOCKS))),
        ("read-back", PARAMIKO, False, VerifyPlan("read-back", False, PARAMIKO, (MD5_BLOCKS,))),
    ],
)
def test_what_the_copy_is_hashed_with(
    level: str, check_file: CheckFile | None, runs_commands: bool, plan: VerifyPlan
) -> None:
    assert plan_verify(level, check_file, runs_commands=runs_commands) == plan


def test_a_tree_reports_its_weakest_check_and_md5_is_weaker_than_sha256() -> None:
    order = [
        "none",
        "size",
        "read-back",
        "hash-remote:md5",
        "hash-remote:sha1",
        "hash-remote:sha224",
        "hash-remote:sha384",
        "hash-remote:sha512",
    ]
    assert sorted(reversed(order), key=level_strength) == order
    assert level_strength("hash-remote") == level_strength("hash-remote:sha256")
    assert level_strength("hash-remote:sha512") < level_strength("hash-remote")


# -- the request ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_name", "target", "algorithms", "start", "length", "block"),
    [
        ("check-file-name", b"/srv/a.bin", ["sha256"], 0, 0, 0),
        ("check-file-handle", b"\x00\x00\x00\x07", ["sha256", "md5"], 5, 1 << 40, 256),
        ("check-file", b"h", ["md5"], 1 << 33, LISTED_BLOCK * 3, LISTED_BLOCK),
    ],
)
def test_a_request_is_laid_out_as_the_draft_says(
    request_name: str, target: bytes, algorithms: list[str], start: int, length: int, block: int
) -> None:
    body = (
        u32(42)
        + sstr(request_name)
        + sstr(target)
        + sstr(",".join(algorithms))
        + u64(start)
        + u64(length)
        + u32(block)
    )
    expected = u32(len(body) + 1) + bytes((200,)) + body  # SSH_FXP_EXTENDED
    wire = encode_check_file(42, request_name, target, algorithms, start, length, block)
    assert wire == expected


@pytest.mark.parametrize(
    ("size", "spec", "ranges"),
    [
        (0, SHA256, [(0, 0)]),
        (10, SHA256, [(0, 0)]),
        (0, MD5_BLOCKS, []),
        (100, MD5_BLOCKS, [(0, 100)]),
        # 2048 md5 hashes (32 KiB) a reply: 128 MiB a request.
        (128 << 20, MD5_BLOCKS, [(0, 128 << 20)]),
        ((128 << 20) + 1, MD5_BLOCKS, [(0, 128 << 20), (128 << 20, 1)]),
        # sha256: 1024 hashes a reply, 64 MiB.
        (100 << 20, HashSpec("sha256", LISTED_BLOCK), [(0, 64 << 20), (64 << 20, 36 << 20)]),
    ],
)
def test_the_requests_a_file_takes(
    size: int, spec: HashSpec, ranges: list[tuple[int, int]]
) -> None:
    assert check_ranges(size, spec) == ranges
    for _, length in ranges:
        assert hashes_in(length, spec) * spec.digest_size <= 32 * 1024


@pytest.mark.parametrize(
    ("length", "spec", "count"),
    [
        (0, SHA256, 1),
        (10**12, SHA256, 1),
        (1, MD5_BLOCKS, 1),
        (LISTED_BLOCK, MD5_BLOCKS, 1),
        (LISTED_BLOCK + 1, MD5_BLOCKS, 2),
        (3 * LISTED_BLOCK, MD5_BLOCKS, 3),
    ],
)
def test_the_hashes_a_request_is_answered_with(length: int, spec: HashSpec, count: int) -> None:
    assert hashes_in(length, spec) == count


# -- the reply ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "spec", "count", "hashes"),
    [
        (sstr("sha256") + H32, SHA256, 1, H32),  # ProFTPD
        (sstr("check-file") + sstr("md5") + H16, MD5, 1, H16),  # paramiko, filexfer-13
        (sstr("check-file") + sstr("md5") + H16 * 3, MD5_BLOCKS, 3, H16 * 3),
        (
            sstr("check-file") + sstr("sha256") + sstr(H32) + sstr(H32[::-1]),
            SHA256,
            2,
            H32 + H32[::-1],
        ),
        (sstr("md5") + sstr(H16), MD5, 1, H16),  # each hash a string (MINA SSHD)
        (sstr("md5"), MD5_BLOCKS, 0, b""),
    ],
)
def test_a_reply_gives_its_hashes(
    payload: bytes, spec: HashSpec, count: int, hashes: bytes
) -> None:
    assert decode_check_file_reply(payload, spec, count) == hashes


@pytest.mark.parametrize(
    ("payload", "count", "says"),
    [
        (b"", 1, "truncated"),
        (b"\x00\x00\x00", 1, "truncated"),
        (u32(100) + b"sha256", 1, "truncated"),
        (sstr("check-file"), 1, "truncated"),
        (sstr("check-file") + u32(7) + b"sha", 1, "truncated"),
        (sstr("md5") + H16, 1, "'md5', asked for sha256"),  # not the algorithm asked for
        (sstr("SHA256") + H32, 1, "asked for sha256"),
        (sstr("check-file") + sstr("sha1") + H32, 1, "asked for sha256"),
        (sstr("sha256") + H32[:-1], 1, "31 bytes"),  # a hash one byte short
        (sstr("sha256") + H32 + b"\x00", 1, "33 bytes"),
        (sstr("sha256") + H32, 2, "2 of 32 bytes"),  # one hash where two were asked for
        (sstr("sha256") + H32 * 2, 1, "64 bytes"),
        (sstr("sha256") + u32(31) + H32, 1, "36 bytes"),  # a string that is not a hash
        (sstr("sha256"), 1, "0 bytes"),
    ],
)
def test_a_reply_that_is_not_what_was_asked_is_a_protocol_error(
    payload: bytes, count: int, says: str
) -> None:
    with pytest.raises(ProtocolError, match="check-file") as caught:
        decode_check_file_reply(payload, SHA256, count)
    assert says in str(caught.value)


# -- the local hashes ---------------------------------------------------------------


def _blocks(data: bytes, algorithm: str, block: int) -> bytes:
    return b"".join(
        hashlib.new(algorithm, data[at : at + block]).digest() for at in range(0, len(data), block)
    )


@given(
    data=st.binary(max_size=5000),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=12),
    spec=st.sampled_from([SHA256, MD5, HashSpec("sha1", 256), HashSpec("md5", 1000)]),
)
def test_hashes_do_not_depend_on_how_the_bytes_are_cut(
    data: bytes, cuts: list[int], spec: HashSpec
) -> None:
    hasher = Hasher(spec)
    edges = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for start, end in itertools.pairwise(edges):
        hasher.update(data[start:end])
    expected = (
        _blocks(data, spec.algorithm, spec.block)
        if spec.block
        else hashlib.new(spec.algorithm, data).digest()
    )
    assert hasher.digest() == expected


def test_proftpd_is_asked_by_name_though_it_lists_check_file_only_to_v5_clients() -> None:
    v3 = {"versions": b"2,3,4,5,6", "fsync@openssh.com": b"1", "home-directory": b"1"}
    assert choose_check_file(v3, "mod_sftp") == CheckFile("check-file-name", SHA256)
    assert choose_check_file(v3, "OpenSSH_9.2p1") is None


def test_every_level_a_check_can_report_is_a_verified_literal() -> None:
    """``Verified`` (a Literal the type checker trusts) lists every algorithm we hash with."""
    assert set(typing.get_args(HashAlgorithm)) == set(PREFERENCE) == set(DIGEST_SIZES)
    levels = set(typing.get_args(Verified))
    for request, algorithm in itertools.product(("check-file-name", "check-file"), PREFERENCE):
        level = CheckFile(request, HashSpec(algorithm)).level
        assert level == f"hash-remote:{algorithm}" and level in levels
    assert levels - {f"hash-remote:{a}" for a in PREFERENCE} == {
        "none",
        "size",
        "read-back",
        "hash-remote",
    }
    assert VERIFY_LEVELS == ("none", "size", "best", "hash", "read-back")
