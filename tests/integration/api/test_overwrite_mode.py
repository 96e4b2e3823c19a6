"""A copy over an existing file keeps that file's permissions (and owner), as sftp and scp do.

An upload goes to a temporary name renamed over the destination; without care
the new file takes the source's mode and a 0600 secret replaced by a copy of a
0644 file becomes world-readable. ``-p`` alone asks for the source's mode.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sshpipe
from tests.support.files import leftover_temps, random_file
from tests.support.peers import Peer

# A tree budget this small makes the 3 MiB file one of the tree's big files
# (the single-file engine), the 4 KiB one a small file (written in one go).
TREE_CONFIG = sshpipe.TransferConfig(
    max_bytes_in_flight=2 * 1024 * 1024, min_bytes_in_flight=1024 * 1024
)
BIG = 3 * 1024 * 1024


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _existing(path: Path, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"old secret")
    path.chmod(mode)


async def test_a_put_over_a_0600_file_leaves_it_0600(peer: Peer, tmp_path: Path) -> None:
    data = random_file(tmp_path / "src.bin", 300_000)
    (tmp_path / "src.bin").chmod(0o644)
    _existing(peer.root / "secret", 0o600)
    _existing(peer.root / "dir" / "src.bin", 0o640)  # replaced inside a directory, scp-style
    async with peer.client() as client:
        await client.put(str(tmp_path / "src.bin"), peer.remote("secret"))
        await client.put(str(tmp_path / "src.bin"), peer.remote("dir"))
        await client.put(str(tmp_path / "src.bin"), peer.remote("new.bin"))
        await client.put(str(tmp_path / "src.bin"), peer.remote("kept"))
    assert (peer.root / "secret").read_bytes() == data
    assert _mode(peer.root / "secret") == 0o600
    assert (peer.root / "dir" / "src.bin").read_bytes() == data
    assert _mode(peer.root / "dir" / "src.bin") == 0o640
    # Nothing was there: the source's mode, as the server's umask lets it.
    assert _mode(peer.root / "new.bin") & ~0o022 == 0o644 & ~0o022
    assert leftover_temps(peer.root) == []


async def test_put_with_p_gives_the_source_mode_and_put_stream_keeps_the_old(
    peer: Peer, tmp_path: Path
) -> None:
    data = random_file(tmp_path / "src.bin", 100_000)
    (tmp_path / "src.bin").chmod(0o654)
    _existing(peer.root / "preserved", 0o600)
    _existing(peer.root / "streamed", 0o600)

    async def chunks() -> AsyncIterator[bytes]:
        yield data

    async with peer.client() as client:
        await client.put(str(tmp_path / "src.bin"), peer.remote("preserved"), preserve=True)
        await client.put_stream(chunks(), peer.remote("streamed"), mode=0o644)
    assert _mode(peer.root / "preserved") == 0o654
    assert _mode(peer.root / "streamed") == 0o600
    assert (peer.root / "streamed").read_bytes() == data


@pytest.mark.parametrize("preserve", [False, True], ids=["plain", "preserve"])
async def test_a_tree_put_keeps_the_modes_of_the_files_it_replaces(
    peer: Peer, tmp_path: Path, preserve: bool
) -> None:
    src = tmp_path / "tree"
    (src / "sub").mkdir(parents=True)
    small = random_file(src / "small.txt", 4096)
    big = random_file(src / "sub" / "big.bin", BIG)
    fresh = random_file(src / "sub" / "fresh.txt", 100)
    for path in (src / "small.txt", src / "sub" / "big.bin", src / "sub" / "fresh.txt"):
        path.chmod(0o644)
    dest = peer.root / "dest" / "tree"  # "dest" is a directory: the tree lands inside
    _existing(dest / "small.txt", 0o600)
    _existing(dest / "sub" / "big.bin", 0o640)
    async with peer.client(TREE_CONFIG) as client:
        await client.put(str(src), peer.remote("dest"), recursive=True, preserve=preserve)
    assert (dest / "small.txt").read_bytes() == small
    assert (dest / "sub" / "big.bin").read_bytes() == big
    assert (dest / "sub" / "fresh.txt").read_bytes() == fresh
    if preserve:
        assert [_mode(dest / "small.txt"), _mode(dest / "sub" / "big.bin")] == [0o644, 0o644]
    else:
        assert [_mode(dest / "small.txt"), _mode(dest / "sub" / "big.bin")] == [0o600, 0o640]
    assert _mode(dest / "sub" / "fresh.txt") & ~0o022 == 0o644 & ~0o022
    assert leftover_temps(peer.root) == []


async def test_a_get_over_a_0600_file_leaves_it_0600(peer: Peer, tmp_path: Path) -> None:
    data = random_file(peer.root / "src.bin", 200_000)
    (peer.root / "src.bin").chmod(0o644)
    tree = peer.root / "tree"
    tree.mkdir()
    small = random_file(tree / "small.txt", 4096)
    big = random_file(tree / "big.bin", BIG)
    local = tmp_path / "local"
    _existing(local / "secret", 0o600)
    _existing(local / "tree" / "small.txt", 0o600)
    _existing(local / "tree" / "big.bin", 0o640)
    async with peer.client(TREE_CONFIG) as client:
        await client.get(peer.remote("src.bin"), str(local / "secret"))
        await client.get(peer.remote("tree"), str(local), recursive=True)
    assert (local / "secret").read_bytes() == data
    assert _mode(local / "secret") == 0o600
    assert (local / "tree" / "small.txt").read_bytes() == small
    assert (local / "tree" / "big.bin").read_bytes() == big
    assert [_mode(local / "tree" / "small.txt"), _mode(local / "tree" / "big.bin")] == [
        0o600,
        0o640,
    ]
    assert leftover_temps(local) == []


@pytest.mark.root
@pytest.mark.openssh
async def test_a_put_as_root_keeps_the_owner_of_the_file_it_replaces(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file another owner")
    peer = openssh_peer
    data = random_file(tmp_path / "src.bin", 50_000)
    _existing(peer.root / "owned", 0o640)
    os.chown(peer.root / "owned", 4321, 4322)
    async with peer.client() as client:
        await client.put(str(tmp_path / "src.bin"), peer.remote("owned"))
    info = (peer.root / "owned").stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (4321, 4322, 0o640)
    assert (peer.root / "owned").read_bytes() == data
