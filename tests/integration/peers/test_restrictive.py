"""sshpipe against servers that each impose one cap seen in the field, through the command line.

Each server (``sshpipe.testing.restrictive``; ``test_restrictive_caps.py``
shows each cap biting) gets what a demanding user runs: files and trees, up
and down. A copy must end with exit 0, every byte equal, and no
``.NAME.sshpipe-XXXXXX.partial`` left on either side; a run the server ends
must end with a documented exit code and one line saying why. No run may
exit 70 (an internal error) or print a traceback.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path
from typing import Literal

import pytest

import sshpipe
from sshpipe.testing.restrictive import (
    ChannelCap,
    DiesMidTree,
    DropsChannelMidTree,
    HandleCap,
    NoExtensions,
    Restriction,
    SequentialWritesOnly,
    StallsPastOutstanding,
    restricted_server,
)
from tests.support.cli import assert_one_line_error
from tests.support.files import left_counts, leftover_temps, random_file
from tests.support.peers import from_embedded
from tests.support.restricted import assert_ok, assert_same_tree, cli, spec
from tests.support.trees import make_tree

# Every test here starts an in-process server of its own (asyncssh-based).
pytestmark = pytest.mark.asyncssh_server

MiB = 1024 * 1024


def tree(root: Path, *, files: int, seed: int, big: int = 0, big_size: int = 4 * MiB) -> Path:
    """The generated tree (unicode names, links, empty directories) plus ``big`` bigger files."""
    make_tree(root, files=files, depth=4, seed=seed)
    rng = random.Random(seed)
    for number in range(big):
        (root / f"big-{number}.bin").write_bytes(rng.randbytes(big_size))
    return root


async def copy_tree(
    tmp_path: Path,
    restriction: Restriction,
    direction: str,
    *options: str,
    files: int,
    big: int = 0,
    big_size: int = 4 * MiB,
    seed: int = 1,
) -> subprocess.CompletedProcess[str]:
    """``put -r`` a tree up or ``get -r`` one down, whole, nothing stray on either side; the run."""
    async with restricted_server(tmp_path / "server", restriction) as server:
        if direction == "put":
            source, copy = tmp_path / "tree", server.root / "tree"
            args = [str(source), spec(server, "/tree")]
        else:
            source, copy = server.root / "tree", tmp_path / "tree"
            args = [spec(server, "/tree"), str(copy)]
        tree(source, files=files, seed=seed, big=big, big_size=big_size)
        result = await cli(server, direction, "-r", *options, *args)
        assert_ok(result)
        assert_same_tree(source, copy, tmp_path, server.root)
        return result


async def copy_file(
    tmp_path: Path, restriction: Restriction, direction: str, size: int, *options: str
) -> subprocess.CompletedProcess[str]:
    """``put`` a file up or ``get`` one down, compared byte for byte; the run."""
    async with restricted_server(tmp_path / "server", restriction) as server:
        if direction == "put":
            source, copy = tmp_path / "src.bin", server.root / "copy.bin"
            args = [str(source), spec(server, "/copy.bin")]
        else:
            source, copy = server.root / "src.bin", tmp_path / "copy.bin"
            args = [spec(server, "/src.bin"), str(copy)]
        data = random_file(source, size)
        result = await cli(server, direction, *options, *args)
        assert_ok(result)
        assert copy.read_bytes() == data
        assert leftover_temps(tmp_path, server.root) == []
        return result


DIRECTIONS = pytest.mark.parametrize("direction", ["put", "get"])


# -- HandleCap(16): a tree never holds more handles than the server allows -----------


@DIRECTIONS
async def test_a_tree_within_sixteen_handles(tmp_path: Path, direction: str) -> None:
    await copy_tree(tmp_path, HandleCap(n=16), direction, files=200, big=2)


@DIRECTIONS
async def test_a_tree_from_a_server_with_one_open_file_at_a_time(
    tmp_path: Path, direction: str
) -> None:
    """The cap learned down to 1: one file (or directory) at a time per channel."""
    cap = HandleCap(n=1)
    await copy_tree(tmp_path, cap, direction, "--channels", "2", files=40)
    assert cap.refused  # it did bite, and was met


# -- two channels per connection: asking for more must not fail the copy -------------


@DIRECTIONS
async def test_a_big_file_with_more_channels_asked_than_a_connection_allows(
    tmp_path: Path, direction: str
) -> None:
    await copy_file(tmp_path, ChannelCap(n=2), direction, 32 * MiB, "--channels", "4")


@DIRECTIONS
async def test_a_tree_with_more_channels_asked_than_a_connection_allows(
    tmp_path: Path, direction: str
) -> None:
    await copy_tree(tmp_path, ChannelCap(n=2), direction, "--channels", "4", files=100)


# -- StallsPastOutstanding(32): after a stall, fewer requests in flight --------------

# Stalls are found within a second; one that moves nothing ends the run (a stall
# the client learns from costs one reconnect, which moves the rest).
STALL = ["--stall-timeout", "1", "--retries", "1", "--json"]
# What a copy may take here: its one stall and reconnect, and the copy many times over.
STALL_BUDGET = 8.0
SFTP_BLOCKS = ["-B", "32768"]  # OpenSSH sftp's own block size: many requests per byte


def assert_learned(result: subprocess.CompletedProcess[str], took: float, dropped: int) -> None:
    """One stall taught it: it never again sent more reads than the server answers."""
    reconnects = json.loads(result.stdout)["reconnects"]
    assert reconnects <= 1, f"{reconnects} reconnects, {dropped} reads dropped, {took:.1f} s"
    assert took < STALL_BUDGET, f"{took:.1f} s, {dropped} reads dropped"


@pytest.mark.timing  # STALL_BUDGET
async def test_a_file_in_small_blocks_from_a_server_that_answers_only_32_reads(
    tmp_path: Path,
) -> None:
    cap = StallsPastOutstanding(n=32)
    started = time.monotonic()
    result = await copy_file(tmp_path, cap, "get", 16 * MiB, *STALL, *SFTP_BLOCKS)
    assert_learned(result, time.monotonic() - started, cap.dropped)


@pytest.mark.timing  # STALL_BUDGET
@pytest.mark.parametrize(
    "blocks",
    [
        pytest.param([], id="default-blocks"),
        pytest.param(SFTP_BLOCKS, id="32KiB-blocks"),
    ],
)
async def test_a_tree_from_a_server_that_answers_only_32_reads(
    tmp_path: Path, blocks: list[str]
) -> None:
    cap = StallsPastOutstanding(n=32)
    started = time.monotonic()
    result = await copy_tree(tmp_path, cap, "get", *STALL, *blocks, files=200, big=2)
    assert_learned(result, time.monotonic() - started, cap.dropped)


# -- SequentialWritesOnly: told, or finding out, uploads write in order ---------------

# Several channels asked for: a file striped over them is written out of order
# (on loopback the flow controller alone mostly keeps to one channel).
CHANNELS = ["--channels", "4"]


@pytest.mark.parametrize(
    "told",
    [
        pytest.param(True, id="--sequential-writes"),
        pytest.param(False, id="detected"),
    ],
)
async def test_a_big_upload_to_an_append_only_server(tmp_path: Path, told: bool) -> None:
    cap = SequentialWritesOnly()
    options = ["--sequential-writes"] if told else []
    await copy_file(tmp_path, cap, "put", 32 * MiB, *options, *CHANNELS)
    if told:
        assert cap.refused == 0  # told, it never tries a write out of order


@pytest.mark.parametrize(
    "told",
    [
        pytest.param(True, id="--sequential-writes"),
        pytest.param(False, id="detected"),
    ],
)
async def test_a_tree_upload_to_an_append_only_server(tmp_path: Path, told: bool) -> None:
    cap = SequentialWritesOnly()
    options = ["--sequential-writes"] if told else []
    # A 12 MiB file goes to the striped engine, not the many-files pipeline.
    await copy_tree(tmp_path, cap, "put", *options, *CHANNELS, files=100, big=1, big_size=12 * MiB)
    if told:
        assert cap.refused == 0


async def test_an_upload_told_by_the_api_to_write_in_order(tmp_path: Path) -> None:
    cap = SequentialWritesOnly()
    data = random_file(tmp_path / "src.bin", 32 * MiB)
    config = sshpipe.TransferConfig(sequential_writes=True, channels=4)
    async with restricted_server(tmp_path / "server", cap) as server:
        async with from_embedded(server).client(config) as client:
            await client.put(str(tmp_path / "src.bin"), "/copy.bin")
        assert (server.root / "copy.bin").read_bytes() == data
        assert leftover_temps(tmp_path, server.root) == []
    assert cap.refused == 0


# -- NoExtensions: plain SFTP v3 does it all, only less cleverly ---------------------


@DIRECTIONS
async def test_a_file_with_a_server_without_extensions(tmp_path: Path, direction: str) -> None:
    await copy_file(tmp_path, NoExtensions(), direction, 4 * MiB + 5)


async def test_uploads_over_an_existing_file_without_posix_rename(tmp_path: Path) -> None:
    """Plain RENAME will not replace a file: the old one must go, the new one arrive."""
    async with restricted_server(tmp_path / "server", NoExtensions()) as server:
        (server.root / "dest.bin").write_bytes(b"the old version")
        local = tmp_path / "new.bin"
        for size in (3 * MiB, 100):
            data = random_file(local, size)
            assert_ok(await cli(server, "put", str(local), spec(server, "/dest.bin")))
            assert (server.root / "dest.bin").read_bytes() == data
        assert leftover_temps(tmp_path, server.root) == []


@DIRECTIONS
@pytest.mark.parametrize("level", ["best", "read-back"])
async def test_a_verified_file_with_a_server_without_extensions(
    tmp_path: Path, direction: str, level: str
) -> None:
    await copy_file(tmp_path, NoExtensions(), direction, 2 * MiB + 1, f"--verify={level}")


@DIRECTIONS
async def test_a_verified_tree_with_a_server_without_extensions(
    tmp_path: Path, direction: str
) -> None:
    await copy_tree(tmp_path, NoExtensions(), direction, "--verify=best", files=100, big=1)


async def test_verify_hash_by_name_fails_where_nothing_hashes_and_plain_verify_says_size(
    tmp_path: Path,
) -> None:
    """No exec, no check-file: --verify=hash is exit 10 in one line; --verify reaches size."""
    async with restricted_server(tmp_path / "server", NoExtensions()) as server:
        data = random_file(server.root / "src.bin", 100_000)
        strict = await cli(server, "get", "--verify=hash", spec(server, "/src.bin"), str(tmp_path))
        assert_one_line_error(strict, 10, "no hash check possible on this server", "/src.bin")
        assert not (tmp_path / "src.bin").exists()
        best = await cli(server, "get", "--verify", spec(server, "/src.bin"), str(tmp_path))
        assert_ok(best)
        assert "verified: size" in best.stdout
        assert (tmp_path / "src.bin").read_bytes() == data
        assert leftover_temps(tmp_path, server.root) == []


# -- DropsChannelMidTree: a channel closed under a tree is reopened ------------------


@pytest.mark.parametrize(
    ("direction", "after", "on"),
    [
        # Right after the CLOSE of an upload: it renames its file at once.
        pytest.param(
            "put",
            200,
            "close",
            id="put",
        ),
        # Right after a directory's names: the walk reads on at once.
        pytest.param(
            "get",
            250,
            "names",
            id="get",
        ),
    ],
)
async def test_a_tree_survives_its_channel_being_closed(
    tmp_path: Path, direction: str, after: int, on: Literal["close", "names"]
) -> None:
    drop = DropsChannelMidTree(after=after, on=on)
    await copy_tree(tmp_path, drop, direction, files=200, seed=5)
    assert drop.dropped, f"the tree took only {drop.replies} replies: drop earlier"


# -- DiesMidTree: a tree the server ends says so; run again, it finishes clean ----------


async def test_a_tree_upload_the_server_dies_under_then_run_again(tmp_path: Path) -> None:
    cap = DiesMidTree(after=40)
    workdir = tmp_path / "server"
    local = tree(tmp_path / "up", files=100, seed=6)
    async with restricted_server(workdir, cap) as server:
        # A dead host refuses every reconnect: one is enough to know (default: ~8 s of them).
        # Into a directory that exists: both runs land in /dest/up (scp's rule).
        (server.root / "dest").mkdir()
        command = ["-r", "--retries", "1", str(local), spec(server, "/dest")]
        first = await cli(server, "put", *command)
    assert cap.died.is_set()
    assert first.returncode == 5, first.stderr  # ConnectionBroken / ConnectError
    stray = [f"/{os.path.relpath(path, server.root)}" for path in leftover_temps(server.root)]
    lines = first.stderr.strip().splitlines()
    assert all(line.startswith("sshpipe: ") for line in lines), first.stderr
    assert len(lines) == 1 + bool(stray), first.stderr  # the error; the temps it left, if any
    if stray:  # counted exactly: those made for sure, and apart those that may have been
        there, maybe = left_counts(lines[0])
        assert there <= len(stray) <= there + maybe, (stray, first.stderr)
    assert leftover_temps(local) == []

    async with restricted_server(
        workdir, Restriction(), root=server.root, port=server.port, reuse_keys=True
    ) as again:
        assert again.cli_options() == server.cli_options()  # the very same command
        rerun = await cli(again, "put", *command)
    assert_ok(rerun)
    assert_same_tree(local, server.root / "dest" / "up", tmp_path, server.root)
