"""The restrictive servers (``sshpipe.testing.restrictive``) really impose their caps.

Each cap is shown biting with asyncssh's own SFTP client (or raw SFTP bytes
on a session channel), so that a test of sshpipe against it
(``test_restrictive.py``) tests what it says it tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
from pathlib import Path

import asyncssh
import pytest

from sshpipe.testing.restrictive import (
    ChannelCap,
    DiesMidTree,
    DropsChannelMidTree,
    HandleCap,
    MaxWriteBlocks,
    NoCombinedOpen,
    NoExtensions,
    NoSetstat,
    NoSymlinks,
    Restriction,
    SequentialWritesOnly,
    StallsPastOutstanding,
    restricted_server,
)
from tests.support.restricted import asyncssh_connection, asyncssh_sftp

# Every test here starts an in-process server of its own (asyncssh-based).
pytestmark = pytest.mark.asyncssh_server

_U32 = struct.Struct(">I")


def _packet(ptype: int, body: bytes) -> bytes:
    return _U32.pack(len(body) + 1) + bytes((ptype,)) + body


def _string(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _take_string(data: bytes) -> bytes:
    return data[4 : 4 + _U32.unpack_from(data)[0]]


async def _read_packet(reader: asyncssh.SSHReader[bytes]) -> bytes:
    length = _U32.unpack(await reader.readexactly(4))[0]
    return await reader.readexactly(length)


async def test_the_seventeenth_handle_is_refused_and_a_closed_one_frees_a_slot(
    tmp_path: Path,
) -> None:
    cap = HandleCap(n=16)
    async with restricted_server(tmp_path, cap) as server:
        for i in range(17):
            (server.root / f"f{i}").write_bytes(b"x")
        async with asyncssh_sftp(server) as sftp:
            listing = sftp.scandir("/")  # holds a directory handle while suspended
            await anext(listing)
            files = [await sftp.open(f"/f{i}") for i in range(15)]
            with pytest.raises(asyncssh.SFTPFailure, match="too many open handles"):
                await sftp.open("/f15")
            with pytest.raises(asyncssh.SFTPFailure, match="too many open handles"):
                await sftp.listdir("/")  # OPENDIR counts too
            await files.pop().close()
            files.append(await sftp.open("/f15"))
            for file in files:
                await file.close()
            await listing.aclose()
        assert cap.refused == 2
        assert cap.peak == 16


async def test_a_third_channel_on_one_connection_is_refused(tmp_path: Path) -> None:
    cap = ChannelCap(n=2)
    async with restricted_server(tmp_path, cap) as server, asyncssh_connection(server) as conn:
        first = await conn.start_sftp_client()
        second = await conn.start_sftp_client()
        with pytest.raises(asyncssh.ChannelOpenError, match="open failed"):
            await conn.start_sftp_client()
        first.exit()
        await first.wait_closed()
        third = await conn.start_sftp_client()  # a closed channel frees its slot
        assert await third.exists("/") and await second.exists("/")
        async with asyncssh_connection(server) as other:  # each connection has its own two
            await other.start_sftp_client()
            await other.start_sftp_client()
    assert cap.refused == 1


async def test_reads_past_32_outstanding_are_never_answered(tmp_path: Path) -> None:
    cap = StallsPastOutstanding(n=32)
    async with restricted_server(tmp_path, cap) as server:
        data = os.urandom(40 * 1024)
        (server.root / "f").write_bytes(data)
        async with asyncssh_connection(server) as conn:
            # Raw SFTP: asyncssh's client would split, retry and task its reads.
            writer, reader, _ = await conn.open_session(subsystem="sftp", encoding=None)
            writer.write(_packet(1, _U32.pack(3)))
            await _read_packet(reader)
            writer.write(_packet(3, _U32.pack(1) + _string(b"/f") + _U32.pack(1) + _U32.pack(0)))
            handle = _take_string((await _read_packet(reader))[5:])
            for i in range(40):  # READ id 100+i: 1 KiB at i KiB
                read = _U32.pack(100 + i) + _string(handle) + struct.pack(">QI", i * 1024, 1024)
                writer.write(_packet(5, read))
            answered = []
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    while True:
                        answered.append(await _read_packet(reader))
            assert len(answered) == 32
            assert {_U32.unpack_from(reply, 1)[0] for reply in answered} == set(range(100, 132))
            assert cap.dropped == 8 and cap.peak == 32
            # Nothing is outstanding any more: the next read is answered.
            writer.write(_packet(5, _U32.pack(200) + _string(handle) + struct.pack(">QI", 0, 1024)))
            assert _take_string((await _read_packet(reader))[5:]) == data[:1024]
            writer.close()


async def test_a_write_anywhere_but_the_end_fails(tmp_path: Path) -> None:
    cap = SequentialWritesOnly()
    async with restricted_server(tmp_path, cap) as server:
        async with asyncssh_sftp(server) as sftp, await sftp.open("/w", "wb") as file:
            await file.write(b"a" * 10, 0)
            with pytest.raises(asyncssh.SFTPFailure, match="non-sequential write"):
                await file.write(b"b", 20)  # past the end
            with pytest.raises(asyncssh.SFTPFailure, match="non-sequential write"):
                await file.write(b"b", 5)  # inside
            await file.write(b"b" * 5, 10)
        assert (server.root / "w").read_bytes() == b"a" * 10 + b"b" * 5
        assert (cap.refused, cap.written) == (2, 2)


async def test_setstat_and_fsetstat_are_refused_and_the_banner_is_as_given(
    tmp_path: Path,
) -> None:
    cap = NoSetstat()
    async with restricted_server(tmp_path, cap, server_version="AWS_SFTP_1.1") as server:
        (server.root / "f").write_bytes(b"x")
        async with asyncssh_connection(server) as conn, conn.start_sftp_client() as sftp:
            assert conn.get_extra_info("server_version") == "SSH-2.0-AWS_SFTP_1.1"
            with pytest.raises(asyncssh.SFTPOpUnsupported, match="SETSTAT not supported"):
                await sftp.chmod("/f", 0o600)
            async with sftp.open("/f", "r+b") as file:
                with pytest.raises(asyncssh.SFTPOpUnsupported, match="FSETSTAT not supported"):
                    await file.chmod(0o600)
        assert cap.refused == 2


async def test_an_open_with_creat_trunc_and_write_is_refused(tmp_path: Path) -> None:
    cap = NoCombinedOpen()
    async with restricted_server(tmp_path, cap) as server, asyncssh_sftp(server) as sftp:
        with pytest.raises(asyncssh.SFTPFailure, match="unsupported flags"):
            await sftp.open("/w", "wb")  # WRITE|CREAT|TRUNC
        async with sftp.open("/w", "xb") as file:  # WRITE|CREAT|EXCL
            await file.write(b"new")
        assert (server.root / "w").read_bytes() == b"new"
    assert cap.refused == 1 and len(cap.opened) == 1


async def test_the_write_past_the_block_cap_is_refused_per_handle(tmp_path: Path) -> None:
    cap = MaxWriteBlocks(2, sequential=True)
    async with restricted_server(tmp_path, cap) as server, asyncssh_sftp(server) as sftp:
        async with sftp.open("/w", "wb") as file:
            with pytest.raises(asyncssh.SFTPFailure, match="non-sequential write"):
                await file.write(b"b", 5)
            await file.write(b"a", 0)
            await file.write(b"b", 1)
            with pytest.raises(asyncssh.SFTPFailure, match="too many blocks"):
                await file.write(b"c", 2)
        async with sftp.open("/w", "ab") as file:  # a new handle counts from 0
            await file.write(b"c", 2)
        assert (server.root / "w").read_bytes() == b"abc"
    assert (cap.refused, cap.out_of_order, cap.most) == (1, 1, 2)


async def test_symlink_is_refused(tmp_path: Path) -> None:
    cap = NoSymlinks()
    async with restricted_server(tmp_path, cap) as server, asyncssh_sftp(server) as sftp:
        with pytest.raises(asyncssh.SFTPOpUnsupported):
            await sftp.symlink("target", "/link")
        assert not os.path.lexists(server.root / "link")
    assert cap.refused == 1


async def test_version_offers_no_extension_and_rename_will_not_replace(tmp_path: Path) -> None:
    cap = NoExtensions()
    async with restricted_server(tmp_path, cap) as server:
        (server.root / "a").write_bytes(b"a")
        (server.root / "b").write_bytes(b"b")
        async with asyncssh_connection(server) as conn:
            writer, reader, _ = await conn.open_session(subsystem="sftp", encoding=None)
            writer.write(_packet(1, _U32.pack(3)))  # INIT, version 3
            assert await _read_packet(reader) == b"\x02" + _U32.pack(3)  # VERSION, nothing else
            ask = _string(b"posix-rename@openssh.com") + _string(b"/a") + _string(b"/b")
            writer.write(_packet(200, _U32.pack(7) + ask))  # asked for anyway
            reply = await _read_packet(reader)
            assert reply[:9] == b"\x65" + _U32.pack(7) + _U32.pack(asyncssh.FX_OP_UNSUPPORTED)
            writer.close()
        async with asyncssh_sftp(server) as sftp:
            assert sftp.limits.max_open_handles == 0  # no limits@openssh.com: nothing known
            with pytest.raises(asyncssh.SFTPError):
                await sftp.rename("/a", "/b")  # plain v3 RENAME: the target exists
            await sftp.rename("/a", "/c")
        assert (server.root / "b").read_bytes() == b"b"
        assert (server.root / "c").read_bytes() == b"a"
        assert cap.refused == [b"posix-rename@openssh.com"]


async def test_one_channel_is_closed_once_and_the_connection_goes_on(tmp_path: Path) -> None:
    cap = DropsChannelMidTree(after=10)
    async with restricted_server(tmp_path, cap) as server, asyncssh_connection(server) as conn:
        sftp = await conn.start_sftp_client()  # its limits request is the first reply
        for _ in range(9):
            await sftp.stat("/")  # the ninth stat is the tenth reply, then the close
        with pytest.raises(asyncssh.SFTPError):
            await sftp.stat("/")
        assert cap.dropped and cap.replies == 10
        again = await conn.start_sftp_client()  # the same connection
        for _ in range(20):
            await again.stat("/")


async def test_the_server_dies_at_the_nth_file_created_and_comes_back(tmp_path: Path) -> None:
    cap = DiesMidTree(after=3)
    async with restricted_server(tmp_path, cap) as server:
        async with asyncssh_sftp(server) as sftp:
            for name in ("/f0", "/f1"):
                async with sftp.open(name, "wb"):
                    pass
            await sftp.open("/f0")  # reading creates nothing
            with pytest.raises((asyncssh.Error, OSError)):
                await sftp.open("/f2", "wb")
        assert cap.died.is_set()
        with pytest.raises(OSError):  # no longer accepting
            async with asyncssh_connection(server):
                pass
    async with (
        restricted_server(
            tmp_path, Restriction(), root=server.root, port=server.port, reuse_keys=True
        ) as again,
        asyncssh_sftp(again) as sftp,
    ):
        assert again.known_hosts.read_text() == server.known_hosts.read_text()
        assert sorted(await sftp.listdir("/")) == [".", "..", "f0", "f1", "f2"]
