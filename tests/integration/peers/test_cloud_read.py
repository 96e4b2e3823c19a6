"""Cloud SFTP servers' read-side quirks: read-once mailboxes, idle connections dropped,
handle caps worded their own way, and a server answering only 4 outstanding reads.

Each restriction (``sshpipe.testing.restrictive``) is first shown biting with
asyncssh's own client; then sshpipe, through the command line and the API,
must copy every byte, leave nothing behind, and, where the server cannot do
what was asked, say so in one line with the documented exit code.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import asyncssh
import pytest

import sshpipe
from sshpipe.core.quirks import Quirks
from sshpipe.testing.embedded import ChannelSFTP
from sshpipe.testing.restrictive import (
    DropsChannelMidTree,
    DropsIdle,
    HandleCap,
    ReadOnce,
    StallsPastOutstanding,
    restricted_server,
)
from tests.support.cli import assert_one_line_error
from tests.support.files import leftover_temps, random_file
from tests.support.peers import from_embedded
from tests.support.restricted import assert_ok, assert_same_tree, asyncssh_sftp, cli, spec

# Every test here starts an in-process server of its own (asyncssh-based).
pytestmark = pytest.mark.asyncssh_server

MiB = 1024 * 1024
MAILBOX = ["--server-profile", "mailbox"]


def flat_tree(root: Path, files: int, *, big: int = 0) -> dict[str, bytes]:
    """``files`` small files in two directories, plus one file of ``big`` bytes."""
    made: dict[str, bytes] = {}
    for number in range(files):
        name = f"d{number % 2}/f{number:03d}.txt"
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        made[name] = random_file(root / name, 100 + number * 7)
    if big:
        made["big.bin"] = random_file(root / "big.bin", big)
    return made


# -- the restrictions bite ------------------------------------------------------------


async def test_a_read_once_file_opens_once_and_a_stat_by_name_may_consume_it(
    tmp_path: Path,
) -> None:
    cap = ReadOnce(stat_consumes=True)
    async with restricted_server(tmp_path, cap) as server:
        for name in ("a", "b"):
            (server.root / name).write_bytes(b"x" * 10)
        async with asyncssh_sftp(server) as sftp:
            async with sftp.open("/a") as file:
                assert (await file.stat()).size == 10  # FSTAT: answered, consumes nothing
                assert await file.read() == "x" * 10  # asyncssh's default: text
            with pytest.raises(asyncssh.SFTPNoSuchFile):
                await sftp.open("/a")
            with pytest.raises(asyncssh.SFTPNoSuchFile):
                await sftp.stat("/a")
            assert (await sftp.stat("/b")).size == 10
            with pytest.raises(asyncssh.SFTPNoSuchFile):
                await sftp.open("b")  # consumed by the STAT, however spelled
            async with sftp.open("/new", "wb") as file:  # writing is not reading
                await file.write(b"y")
            assert sorted(await sftp.listdir("/")) == [".", "..", "a", "b", "new"]
    assert cap.opens == {b"/a": 1}
    assert cap.stats == {b"/b": 1}
    assert cap.refused == {b"/a": 2, b"/b": 1}


async def test_a_connection_without_a_request_is_dropped(tmp_path: Path) -> None:
    cap = DropsIdle(1.0)
    async with restricted_server(tmp_path, cap) as server, asyncssh_sftp(server) as sftp:
        for _ in range(5):  # requests every 0.3 s keep it up
            await asyncio.sleep(0.3)
            await sftp.stat("/")
        assert cap.dropped == 0
        await asyncio.sleep(1.5)
        assert cap.dropped == 1
        with pytest.raises((asyncssh.Error, OSError)):
            await sftp.stat("/")


# -- read-once files (--server-profile mailbox) ----------------------------------------


async def test_a_mailbox_file_is_opened_once_and_never_stated_by_name(tmp_path: Path) -> None:
    """Striping and worker processes asked for, and --verify: one OPEN, attributes by FSTAT."""
    cap = ReadOnce(stat_consumes=True)
    async with restricted_server(tmp_path / "server", cap) as server:
        data = random_file(server.root / "src.bin", 3 * MiB + 5)
        result = await cli(
            server,
            "get",
            *MAILBOX,
            "--channels",
            "4",
            "--workers",
            "2",
            "--verify",
            "--json",
            "-v",
            spec(server, "/src.bin"),
            str(tmp_path / "copy.bin"),
        )
        assert_ok(result)
        assert (tmp_path / "copy.bin").read_bytes() == data
        assert leftover_temps(tmp_path) == []
    assert cap.opens == {b"/src.bin": 1}
    assert cap.stats == {} and cap.refused == {}
    shown = json.loads(result.stdout)
    assert shown["verified"] == "size"
    assert shown["server"]["profile"] == "mailbox"
    adapted = shown["server"]["adapted"]
    assert "each file is opened once (read-once): no STAT by name, no read-back" in adapted
    assert "--verify=best checks the size only" in adapted
    assert "one process: a read-once file is opened once (--workers)" in adapted
    assert "(mailbox server profile)" in result.stderr  # -v says each change once


@pytest.mark.parametrize(
    ("level", "recursive"),
    [("hash", False), ("read-back", False), ("hash", True)],
    ids=["hash", "read-back", "tree-hash"],
)
async def test_a_hash_of_a_mailbox_file_is_refused_before_it_is_opened(
    tmp_path: Path, level: str, recursive: bool
) -> None:
    cap = ReadOnce(stat_consumes=True)
    async with restricted_server(tmp_path / "server", cap) as server:
        (server.root / "box").mkdir()
        random_file(server.root / "box" / "src.bin", 100_000)
        source = "/box" if recursive else "/box/src.bin"
        options = [*MAILBOX, f"--verify={level}", *(["-r"] if recursive else [])]
        result = await cli(server, "get", *options, spec(server, source), str(tmp_path))
    assert_one_line_error(result, 10, "not verified: read-once server", source)
    assert not (tmp_path / "src.bin").exists() and not (tmp_path / "box").exists()
    assert leftover_temps(tmp_path) == []
    assert cap.opens == {} and cap.stats == {}  # the file is still there to fetch


async def test_a_mailbox_tree_is_listed_and_each_file_opened_once(tmp_path: Path) -> None:
    """--verify checks the sizes the listing stated; named files are found by listing too."""
    cap = ReadOnce(stat_consumes=True)
    async with restricted_server(tmp_path / "server", cap) as server:
        made = flat_tree(server.root / "box", 40, big=3 * MiB // 2)
        # A budget of 4 MiB makes 1.5 MiB a big file: the single-file engine's, in a tree.
        options = ["-r", "--verify", "--in-flight", "4M", *MAILBOX]
        box = await cli(server, "get", *options, spec(server, "/box"), str(tmp_path / "box"))
        assert_ok(box)
        assert "verified: size" in box.stdout
        assert_same_tree(server.root / "box", tmp_path / "box", tmp_path)
        (tmp_path / "named").mkdir()
        for name in ("one.txt", "two.txt"):
            made[f"../{name}"] = random_file(server.root / name, 3000)
        named = [spec(server, "/one.txt"), spec(server, "two.txt")]  # several: a tree
        assert_ok(await cli(server, "get", *MAILBOX, *named, str(tmp_path / "named")))
        data = random_file(server.root / "kept.bin", 5000)
        assert_ok(
            await cli(server, "get", "-p", *MAILBOX, spec(server, "/kept.bin"), str(tmp_path))
        )
        assert (tmp_path / "kept.bin").read_bytes() == data
        for name in ("one.txt", "two.txt"):
            assert (tmp_path / "named" / name).read_bytes() == made[f"../{name}"]
    opened = {f"/box/{name}".encode(): 1 for name in made if not name.startswith("..")}
    assert cap.opens == {**opened, b"/one.txt": 1, b"/two.txt": 1, b"/kept.bin": 1}
    assert cap.stats == {} and cap.refused == {}


async def test_a_mailbox_file_with_resume_is_copied_and_the_limit_said(tmp_path: Path) -> None:
    cap = ReadOnce(stat_consumes=True)
    async with restricted_server(tmp_path / "server", cap) as server:
        data = random_file(server.root / "src.bin", 2 * MiB)
        result = await cli(
            server, "get", *MAILBOX, "--resume", spec(server, "/src.bin"), str(tmp_path)
        )
        assert_ok(result)
        assert (tmp_path / "src.bin").read_bytes() == data
    assert "--resume: a read-once file cannot be opened again" in result.stderr
    assert cap.opens == {b"/src.bin": 1} and cap.stats == {}


class _ReadOnceDropping(ReadOnce):
    """A mailbox whose SFTP channel closes mid-file (``DropsChannelMidTree``)."""

    def __init__(self, after: int) -> None:
        super().__init__(stat_consumes=True)
        self.drop = DropsChannelMidTree(after=after)

    def session(self, sftp: ChannelSFTP) -> Any:
        return self.drop.session(sftp)


async def test_a_mailbox_file_cut_mid_way_is_not_opened_again(tmp_path: Path) -> None:
    cap = _ReadOnceDropping(after=8)
    async with restricted_server(tmp_path / "server", cap) as server:
        random_file(server.root / "src.bin", 3 * MiB)
        # 32 KiB blocks: the eighth reply comes well before the end.
        result = await cli(
            server, "get", *MAILBOX, "-B", "32768", spec(server, "/src.bin"), str(tmp_path)
        )
    assert cap.drop.dropped
    assert_one_line_error(result, 5, "/src.bin", "a read-once file cannot be opened again")
    assert not (tmp_path / "src.bin").exists()
    assert leftover_temps(tmp_path) == []
    assert cap.opens == {b"/src.bin": 1} and cap.refused == {}


# -- idle connections dropped (Azure: 4 minutes) ---------------------------------------

IDLE = 1.0  # the server's idle timeout here


async def test_a_long_lived_client_closes_idle_connections_before_the_server_does(
    tmp_path: Path,
) -> None:
    """The profile's timeout (a ``Quirks`` object forced): nothing is dropped under us."""
    cap = DropsIdle(IDLE)
    profile = Quirks(name="azure-blob", idle_timeout=IDLE)
    config = sshpipe.TransferConfig(server_profile=profile)
    async with restricted_server(tmp_path / "server", cap) as server:
        data = random_file(server.root / "src.bin", MiB)
        async with from_embedded(server).client(config) as client:
            for round_ in range(2):
                copy = tmp_path / f"copy{round_}.bin"
                await client.get("/src.bin", str(copy))
                assert copy.read_bytes() == data
                await asyncio.sleep(IDLE * 1.5)
            assert client.server["adapted"] == ["idle connections closed before 1 s"]
        assert leftover_temps(tmp_path, server.root) == []
    assert cap.dropped == 0  # the client closed each first


async def test_a_connection_the_server_dropped_while_idle_is_opened_again(
    tmp_path: Path,
) -> None:
    """No profile: the next call finds the connection dead and opens a new one."""
    cap = DropsIdle(IDLE / 2)
    async with restricted_server(tmp_path / "server", cap) as server:
        data = random_file(server.root / "src.bin", MiB)
        (server.root / "tree").mkdir()
        random_file(server.root / "tree" / "a.bin", 1000)
        async with from_embedded(server).client() as client:
            await client.get("/src.bin", str(tmp_path / "first.bin"))
            await asyncio.sleep(IDLE)
            assert cap.dropped >= 1
            await client.get("/src.bin", str(tmp_path / "second.bin"))
            await asyncio.sleep(IDLE)
            await client.get("/tree", str(tmp_path / "tree"), recursive=True)
            await asyncio.sleep(IDLE)
            assert (await client.stat("/src.bin")).size == MiB
        assert (tmp_path / "second.bin").read_bytes() == data
        assert (tmp_path / "tree" / "a.bin").stat().st_size == 1000
        assert leftover_temps(tmp_path, server.root) == []


# -- a handle cap worded as a cloud server words it ------------------------------------

TOO_MANY = "Too many open files in this session, maximum 100"


@pytest.mark.parametrize("direction", ["put", "get"])
async def test_a_tree_of_300_files_within_100_handles(tmp_path: Path, direction: str) -> None:
    cap = HandleCap(100, message=TOO_MANY)
    async with restricted_server(tmp_path / "server", cap) as server:
        if direction == "put":
            source, copy = tmp_path / "tree", server.root / "tree"
            args = [str(source), spec(server, "/tree")]
        else:
            source, copy = server.root / "tree", tmp_path / "tree"
            args = [spec(server, "/tree"), str(copy)]
        flat_tree(source, 300)
        assert_ok(await cli(server, direction, "-r", *args))
        assert_same_tree(source, copy, tmp_path, server.root)
    assert cap.peak <= 100


async def test_fifty_concurrent_gets_on_one_client_within_100_handles(tmp_path: Path) -> None:
    cap = HandleCap(100, message=TOO_MANY)
    async with restricted_server(tmp_path / "server", cap) as server:
        made = {n: random_file(server.root / f"f{n}.bin", 20_000 + n) for n in range(50)}
        async with from_embedded(server).client() as client:
            await asyncio.gather(
                *(client.get(f"/f{n}.bin", str(tmp_path / f"f{n}.bin")) for n in made)
            )
        for n, data in made.items():
            assert (tmp_path / f"f{n}.bin").read_bytes() == data
        assert leftover_temps(tmp_path, server.root) == []
    assert cap.peak <= 100


# -- a server that answers only 4 outstanding reads (paramiko#1788) ---------------------

# A stall is found in a second (the default, 60 s, makes each of the three
# stalls learning the cap from 128 a minute's wait); 32 KiB blocks, sftp's own,
# make many requests of a few MiB.
STALL = ["--stall-timeout", "1", "--retries", "2", "-B", "32768", "--json"]
STALL_BUDGET = 15.0  # three stalls, their reconnects, and the copy


def assert_learned(result: subprocess.CompletedProcess[str], took: float) -> None:
    """Each stall cut the requests again (128 -> 16 -> 8 -> 4): three at most, none
    wasted (with stalls in a row taken for one, it stayed at 16 and stalled on)."""
    assert_ok(result)
    shown = json.loads(result.stdout)
    assert shown["reconnects"] <= 3, shown
    assert shown["server"]["learned"]["requests"] <= 16, shown["server"]
    assert took < STALL_BUDGET, f"{took:.1f} s, {shown['reconnects']} reconnects"


@pytest.mark.timing  # STALL_BUDGET
async def test_a_verified_resumable_file_from_a_server_answering_4_reads(tmp_path: Path) -> None:
    cap = StallsPastOutstanding(4)
    async with restricted_server(tmp_path / "server", cap) as server:
        data = random_file(server.root / "src.bin", 3 * MiB)
        started = time.monotonic()
        result = await cli(
            server, "get", *STALL, "--verify", "--resume", spec(server, "/src.bin"), str(tmp_path)
        )
        assert_learned(result, time.monotonic() - started)
        assert json.loads(result.stdout)["verified"] == "size"  # it runs no sha256sum
        assert (tmp_path / "src.bin").read_bytes() == data
        assert leftover_temps(tmp_path, server.root) == []
    assert cap.dropped and cap.peak == 4


@pytest.mark.timing  # STALL_BUDGET
async def test_a_tree_from_a_server_answering_4_reads(tmp_path: Path) -> None:
    cap = StallsPastOutstanding(4)
    async with restricted_server(tmp_path / "server", cap) as server:
        flat_tree(server.root / "tree", 30, big=3 * MiB)
        started = time.monotonic()
        result = await cli(server, "get", "-r", *STALL, spec(server, "/tree"), str(tmp_path / "t"))
        assert_learned(result, time.monotonic() - started)
        assert_same_tree(server.root / "tree", tmp_path / "t", tmp_path, server.root)
    assert cap.dropped
