"""Uploads to servers with cloud SFTP quirks: told by the banner, forced, or found at run time.

Each server (``sshpipe.testing.restrictive``: ``NoSetstat``, ``NoCombinedOpen``,
``MaxWriteBlocks``, ``NoSymlinks``) refuses what AWS Transfer Family or Azure
Blob's SFTP endpoint refuses. A copy must land byte for byte with nothing of
ours left on the server, whether the client expected the quirk (its
``core.quirks`` profile, from the banner or ``server_profile``) and so never
met the refusal, or met it once and learned it; ``Client.server["adapted"]``
(``--json``'s) names what changed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import stat
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

import sshpipe
from sshpipe.core import quirks
from sshpipe.core.errors import RemoteError
from sshpipe.core.servercaps import OPEN_SPLIT, SETSTAT_REFUSED, SYMLINK_REFUSED
from sshpipe.testing.embedded import EmbeddedServer
from sshpipe.testing.restrictive import (
    MaxWriteBlocks,
    NoCombinedOpen,
    NoSetstat,
    NoSymlinks,
    Restriction,
    restricted_server,
)
from tests.support.cli import run_cli_async
from tests.support.files import leftover_temps, random_file
from tests.support.peers import from_embedded

# In-process servers; upload journals (--resume) go to a throwaway state directory.
pytestmark = [pytest.mark.asyncssh_server, pytest.mark.usefixtures("state_home")]

MiB = 1024 * 1024
AWS = "AWS_SFTP_1.1"
AZURE = "AzureSSH_1.0.0"
# How the client comes to know the quirk: the server's banner, the setting, or
# by meeting it (a standard banner, nothing forced).
HOW = ["banner", "forced", "learned"]


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, restriction: Restriction, banner: str | None
) -> AsyncIterator[EmbeddedServer]:
    async with restricted_server(tmp_path / "server", restriction, server_version=banner) as server:
        yield server


def config_for(how: str, profile: str, **fields: object) -> sshpipe.TransferConfig:
    forced = profile if how == "forced" else "auto"
    return sshpipe.TransferConfig(server_profile=forced, **fields)  # type: ignore[arg-type]


def banner_for(how: str, banner: str) -> str | None:
    return banner if how == "banner" else None


def small_tree(root: Path, *, seed: int, links: bool = False, big: int = 0) -> dict[str, bytes]:
    """Files in nested directories (and ``big`` bytes in one more); with ``links``, symlinks."""
    rng = random.Random(seed)
    files: dict[str, bytes] = {}
    for number in range(12):
        name = f"d{number % 3}/sub{number % 2}/f{number}.bin"
        files[name] = rng.randbytes(rng.randrange(0, 70_000))
    if big:
        files["big.bin"] = rng.randbytes(big)
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (root / "d0").chmod(0o750)
    (root / "d1/sub1/f1.bin").chmod(0o600)
    if links:
        (root / "d0/to-f0").symlink_to("sub0/f0.bin")
        (root / "d2/to-d1").symlink_to("../d1")
    return files


def assert_tree(copy: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        assert (copy / name).read_bytes() == data, name


def assert_nothing_left(server: EmbeddedServer, *roots: Path) -> None:
    assert leftover_temps(server.root, *roots) == []


def server_side(client: sshpipe.Client) -> tuple[str, list[str]]:
    shown = client.server
    adapted = shown["adapted"]
    assert isinstance(adapted, list)
    return str(shown["profile"]), adapted


# -- no SETSTAT / FSETSTAT ----------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
async def test_no_setstat_put_tree_verify_resume(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    cap = NoSetstat()
    caplog.set_level(logging.WARNING)
    async with serving(tmp_path, cap, banner_for(how, AWS)) as server:
        src = tmp_path / "src.bin"
        data = random_file(src, 3 * MiB + 7)
        (server.root / "old.bin").write_bytes(b"x" * 100)  # a replaced file keeps its mode
        (server.root / "old.bin").chmod(0o640)
        tree_src = tmp_path / "tree"
        files = small_tree(tree_src, seed=1, big=2 * MiB)
        config = config_for(how, "aws-transfer")
        async with from_embedded(server).client(config) as client:
            await client.put(str(src), "/old.bin")
            await client.put(str(src), "/kept.bin", preserve=True)
            await client.put(str(src), "/verified.bin", config=replace(config, verify="read-back"))
            await client.put(str(src), "/resumed.bin", config=replace(config, resume=True))
            stats = await client.put(str(tree_src), "/tree", recursive=True, preserve=True)
            profile, adapted = server_side(client)
            got = tmp_path / "back.bin"
            await client.get("/kept.bin", str(got))
        for name in ("old.bin", "kept.bin", "verified.bin", "resumed.bin"):
            assert (server.root / name).read_bytes() == data, name
        assert got.read_bytes() == data
        assert_tree(server.root / "tree", files)
        assert stats.files == len(files)
        assert_nothing_left(server, tmp_path)
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    if how == "learned":
        assert cap.refused >= 1  # met once, then not asked again
        assert profile == "standard"
        assert SETSTAT_REFUSED in adapted
        assert [SETSTAT_REFUSED in r.getMessage() for r in warned] == [True], warned
    else:
        assert cap.refused == 0  # told: never sent
        assert profile == "aws-transfer"
        assert "times and modes are not set (no SETSTAT)" in adapted
        assert warned == []


@pytest.mark.parametrize("status", [3, 4], ids=["permission-denied", "failure"])
async def test_a_setstat_refused_with_another_status_is_learned_too(
    tmp_path: Path, status: int
) -> None:
    cap = NoSetstat(status)
    async with serving(tmp_path, cap, None) as server:
        tree_src = tmp_path / "tree"
        files = small_tree(tree_src, seed=2)
        async with from_embedded(server).client() as client:
            await client.put(str(tree_src), "/tree", recursive=True, preserve=True)
            _, adapted = server_side(client)
        assert_tree(server.root / "tree", files)
        assert_nothing_left(server, tmp_path)
    assert cap.refused >= 1
    assert SETSTAT_REFUSED in adapted


async def test_cli_says_once_that_times_are_not_set(tmp_path: Path) -> None:
    cap = NoSetstat()
    async with serving(tmp_path, cap, None) as server:
        src = tmp_path / "src.bin"
        data = random_file(src, 300_000)
        spec = f"{server.destination}:/copy.bin"
        result = await run_cli_async("put", *server.cli_options(), "-p", "--json", str(src), spec)
        assert result.returncode == 0, result.stderr
        assert (server.root / "copy.bin").read_bytes() == data
        assert_nothing_left(server, tmp_path)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sshpipe: ") and "refuses SETSTAT" in lines[0]
    shown = json.loads(result.stdout)
    assert SETSTAT_REFUSED in shown["server"]["adapted"]
    assert shown["server"]["learned"]["no_setstat"] is True
    assert cap.refused == 1


# -- no OPEN with CREAT|TRUNC and WRITE together ---------------------------------------


@pytest.mark.parametrize("how", HOW)
async def test_split_opens_put_tree_inplace_verify_resume(tmp_path: Path, how: str) -> None:
    cap = NoCombinedOpen()
    async with serving(tmp_path, cap, banner_for(how, AWS)) as server:
        src = tmp_path / "src.bin"
        data = random_file(src, 2 * MiB + 3)
        (server.root / "longer.bin").write_bytes(b"z" * (3 * MiB))  # in place: cut to size
        tree_src = tmp_path / "tree"
        files = small_tree(tree_src, seed=3, big=2 * MiB)
        config = config_for(how, "aws-transfer")
        async with from_embedded(server).client(config) as client:
            await client.put(str(src), "/plain.bin")
            await client.put(str(src), "/longer.bin", config=replace(config, inplace=True))
            await client.put(str(src), "/fresh-inplace.bin", config=replace(config, inplace=True))
            await client.put(str(src), "/verified.bin", config=replace(config, verify="read-back"))
            await client.put(str(src), "/resumed.bin", config=replace(config, resume=True))
            await client.put(str(tree_src), "/tree", recursive=True)
            profile, adapted = server_side(client)
        for name in ("plain", "longer", "fresh-inplace", "verified", "resumed"):
            assert (server.root / f"{name}.bin").read_bytes() == data, name
        assert_tree(server.root / "tree", files)
        assert_nothing_left(server, tmp_path)
    combined = quirks.combined_open
    assert not any(combined(flags) for flags in cap.opened)
    if how == "learned":
        assert cap.refused >= 1
        assert OPEN_SPLIT in adapted
    else:
        assert cap.refused == 0
        assert profile == "aws-transfer"


async def test_an_open_refused_for_its_own_sake_reports_the_first_refusal(
    tmp_path: Path,
) -> None:
    cap = NoCombinedOpen()
    async with serving(tmp_path, cap, None) as server:
        src = tmp_path / "src.bin"
        random_file(src, 1000)
        (server.root / "taken").write_bytes(b"")  # a file: no name can be made in it
        async with from_embedded(server).client(sshpipe.TransferConfig(inplace=True)) as client:
            with pytest.raises(RemoteError, match="unsupported flags") as caught:
                await client.put(str(src), "/taken/copy.bin")
            _, adapted = server_side(client)
    assert caught.value.exit_code == 4
    assert OPEN_SPLIT not in adapted  # the split one failed too: nothing learned
    assert cap.refused == 1  # tried split once, no more


# -- in order, at most so many WRITEs a file ------------------------------------------


@pytest.fixture
def few_blocks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Azure's profile with a cap of 8 WRITEs a file (its 50,000 at a test's scale)."""
    cap = 8
    azure = replace(quirks.PROFILES["azure-blob"], max_write_blocks=cap)
    monkeypatch.setitem(quirks.PROFILES, "azure-blob", azure)
    return cap


@pytest.mark.parametrize("how", ["banner", "forced"])
async def test_azure_writes_in_order_within_the_block_cap(
    tmp_path: Path, how: str, few_blocks: int
) -> None:
    cap = MaxWriteBlocks(few_blocks, sequential=True)
    async with serving(tmp_path, cap, banner_for(how, AZURE)) as server:
        src = tmp_path / "src.bin"
        data = random_file(src, 3 * MiB + 11)  # 13 WRITEs of 255 KiB: more than 8
        (server.root / "old.bin").write_bytes(b"o" * (4 * MiB))
        tree_src = tmp_path / "tree"
        files = small_tree(tree_src, seed=4, big=2 * MiB)
        # Asked for what writes out of order: striping, several channels, in place.
        config = config_for(how, "azure-blob", channels=4, workers=2)
        async with from_embedded(server).client(config) as client:
            await client.put(str(src), "/plain.bin")
            await client.put(str(src), "/old.bin", config=replace(config, inplace=True))
            await client.put(str(src), "/verified.bin", config=replace(config, verify="read-back"))
            await client.put(str(tree_src), "/tree", recursive=True)
            profile, adapted = server_side(client)
        for name in ("plain", "old", "verified"):
            assert (server.root / f"{name}.bin").read_bytes() == data, name
        assert_tree(server.root / "tree", files)
        assert_nothing_left(server, tmp_path)
    assert (cap.refused, cap.out_of_order) == (0, 0)
    assert 1 <= cap.most <= few_blocks
    assert profile == "azure-blob"
    assert f"at most {few_blocks:,} WRITEs per file" in adapted


async def test_a_resume_to_an_append_only_server_appends(tmp_path: Path, few_blocks: int) -> None:
    cap = MaxWriteBlocks(few_blocks, sequential=True)
    async with serving(tmp_path, cap, None) as server:
        src = tmp_path / "src.bin"
        data = random_file(src, 2 * MiB)
        first = sshpipe.TransferConfig(resume=True, sequential_writes=True, block_size=64 * 1024)
        async with from_embedded(server).client(first) as client:
            with pytest.raises(RemoteError, match="too many blocks"):
                await client.put(str(src), "/copy.bin")  # 32 blocks: the 9th is refused
        assert cap.refused == 1
        # The WRITEs in flight behind the refused one were past the end too.
        behind = cap.out_of_order
        # Four channels asked for: striped, the rest would go out of order.
        again = sshpipe.TransferConfig(resume=True, server_profile="azure-blob", channels=4)
        async with from_embedded(server).client(again) as client:
            stats = await client.put(str(src), "/copy.bin")
        assert (server.root / "copy.bin").read_bytes() == data
        assert_nothing_left(server, tmp_path)
    assert cap.out_of_order == behind  # resumed: nothing written but at the end
    assert cap.refused == 1
    assert 0 < stats.resumed_bytes <= few_blocks * 64 * 1024, stats
    assert stats.channels == 1, stats


async def test_a_file_too_big_for_the_block_cap_fails_before_a_byte(
    tmp_path: Path, few_blocks: int
) -> None:
    cap = MaxWriteBlocks(few_blocks)
    async with serving(tmp_path, cap, AZURE) as server:
        src = tmp_path / "sparse.bin"
        with src.open("wb") as sparse:  # past 8 x 4 MiB, asyncssh's longest WRITE
            sparse.truncate(few_blocks * 4 * MiB + 1)
        async with from_embedded(server).client() as client:
            with pytest.raises(RemoteError) as caught:
                await client.put(str(src), "/copy.bin")
        assert not (server.root / "copy.bin").exists()
        assert_nothing_left(server, tmp_path)
    message = str(caught.value)
    assert "\n" not in message and "too big for this server (azure-blob)" in message
    assert caught.value.exit_code == 4
    assert cap.most == 0  # refused before any WRITE


async def test_cli_a_file_too_big_for_azure_is_one_line_and_exit_4(tmp_path: Path) -> None:
    async with serving(tmp_path, MaxWriteBlocks(), AZURE) as server:
        src = tmp_path / "sparse.bin"
        with src.open("wb") as sparse:  # sparse: 50,000 x 4 MiB + 1 bytes, none written
            sparse.truncate(quirks.AZURE_MAX_WRITE_BLOCKS * 4 * MiB + 1)
        spec = f"{server.destination}:/copy.bin"
        result = await run_cli_async("put", *server.cli_options(), str(src), spec)
        assert_nothing_left(server, tmp_path)
        assert not (server.root / "copy.bin").exists()
    assert result.returncode == 4, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "too big for this server (azure-blob)" in lines[0], lines


# -- no symlinks ----------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
async def test_links_are_skipped_and_counted_where_the_server_makes_none(
    tmp_path: Path, how: str
) -> None:
    cap = NoSymlinks()
    async with serving(tmp_path, cap, banner_for(how, AZURE)) as server:
        tree_src = tmp_path / "tree"
        files = small_tree(tree_src, seed=5, links=True)
        config = config_for(how, "azure-blob")
        async with from_embedded(server).client(config) as client:
            stats = await client.put(str(tree_src), "/tree", recursive=True)
            followed = await client.put(
                str(tree_src), "/followed", recursive=True, follow_symlinks=True
            )
            _, adapted = server_side(client)
        assert_tree(server.root / "tree", files)
        links = [Path(p) for p in stats.skipped_paths]
        assert stats.skipped == 2 and {p.name for p in links} == {"to-f0", "to-d1"}
        assert not (server.root / "tree/d0/to-f0").exists()
        assert not os.path.lexists(server.root / "tree/d2/to-d1")
        # -L: what each points to is copied instead.
        assert (server.root / "followed/d0/to-f0").read_bytes() == files["d0/sub0/f0.bin"]
        assert stat.S_ISDIR((server.root / "followed/d2/to-d1").lstat().st_mode)
        assert followed.skipped == 0
        assert_nothing_left(server, tmp_path)
    if how == "learned":
        assert 1 <= cap.refused <= 2
        assert SYMLINK_REFUSED in adapted
    else:
        assert cap.refused == 0
        assert "no symlinks are made" in adapted
