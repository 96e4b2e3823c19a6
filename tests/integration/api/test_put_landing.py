"""Where a put lands when its OPEN goes out with the STAT of the destination.

The OPEN of the temporary name beside ``remote`` is sent before the server
has said whether ``remote`` is a directory: when it is, the file it created
must be gone, and the upload land inside the directory as scp does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sshpipe
from tests.support.files import leftover_temps, random_file
from tests.support.peers import Peer


async def test_a_put_onto_a_directory_lands_inside_and_leaves_no_temp(
    peer: Peer, tmp_path: Path
) -> None:
    data = random_file(tmp_path / "src.bin", 300_000)
    (peer.root / "dir").mkdir()
    async with peer.client() as client:
        await client.put(str(tmp_path / "src.bin"), peer.remote("dir"))
        await client.put(str(tmp_path / "src.bin"), peer.remote("file.bin"))
    assert (peer.root / "dir" / "src.bin").read_bytes() == data
    assert (peer.root / "file.bin").read_bytes() == data
    assert leftover_temps(peer.root) == []


async def test_a_stream_onto_a_directory_fails_and_leaves_no_temp(peer: Peer) -> None:
    (peer.root / "dir").mkdir()

    async def chunks() -> AsyncIterator[bytes]:
        yield b"x" * 1000

    async with peer.client() as client:
        with pytest.raises(sshpipe.RemoteIsADirectory):
            await client.put_stream(chunks(), peer.remote("dir"))
        # The session is still good: the handle the early OPEN got was closed.
        await client.put_stream(chunks(), peer.remote("after.bin"))
    assert (peer.root / "after.bin").read_bytes() == b"x" * 1000
    assert leftover_temps(peer.root) == []


async def test_a_put_over_a_directory_inside_the_directory_says_so(
    peer: Peer, tmp_path: Path
) -> None:
    """dir/src.bin is itself a directory: the rename cannot replace it (scp: "Is a
    directory"), and the server's bare FAILURE is not what the user is told."""
    random_file(tmp_path / "src.bin", 300_000)
    (peer.root / "dir" / "src.bin").mkdir(parents=True)
    async with peer.client() as client:
        with pytest.raises(sshpipe.RemoteIsADirectory, match="is a directory"):
            await client.put(str(tmp_path / "src.bin"), peer.remote("dir"))
    assert (peer.root / "dir" / "src.bin").is_dir()
    assert leftover_temps(peer.root) == []
