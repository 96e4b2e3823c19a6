"""The public calls take path objects as well as strings (issue 20, part 6).

``tests/typing/check_api.py`` pins what the type checker infers; these prove
the same calls run, against the embedded server, every byte compared.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

import sshpipe
from tests.support.files import leftover_temps, random_file
from tests.support.peers import Peer


def client_of(peer: Peer) -> sshpipe.Client:
    # One Path each, not a list of str: connect() takes either.
    return sshpipe.connect(
        f"{peer.user}@{peer.host}",
        port=peer.port,
        identity_files=peer.client_key,
        known_hosts=peer.known_hosts,
        ssh_config=[],
    )


async def test_single_files_with_path_objects(asyncssh_peer: Peer, tmp_path: Path) -> None:
    peer = asyncssh_peer
    data = random_file(tmp_path / "up.bin", 100_003)
    remote = PurePosixPath(peer.remote("up.bin"))
    async with client_of(peer) as client:
        sent = await client.put(tmp_path / "up.bin", remote)
        got = await client.get(remote, tmp_path / "down.bin")
        assert isinstance(sent, sshpipe.TransferStats) and sent.bytes == len(data)
        assert isinstance(got, sshpipe.TransferStats) and got.bytes == len(data)
        pieces = [piece async for piece in client.stream(remote)]
        streamed = await client.put_stream(_once(data), PurePosixPath(peer.remote("s.bin")))
        assert await client.glob(PurePosixPath(peer.remote("*.bin"))) == [
            peer.remote("s.bin"),
            peer.remote("up.bin"),
        ]
    assert (peer.root / "up.bin").read_bytes() == data
    assert (tmp_path / "down.bin").read_bytes() == data
    assert b"".join(pieces) == data
    assert streamed.bytes == len(data) and (peer.root / "s.bin").read_bytes() == data
    assert leftover_temps(tmp_path, peer.root) == []


async def _once(data: bytes):  # type: ignore[no-untyped-def]
    yield data


@pytest.mark.parametrize("recursive", [False, True])
async def test_a_flag_and_lists_of_paths(
    asyncssh_peer: Peer, tmp_path: Path, recursive: bool
) -> None:
    """``recursive=flag`` gives a file's stats or a tree's; a list of paths is a tree."""
    peer = asyncssh_peer
    one = random_file(tmp_path / "one.bin", 5000)
    two = random_file(tmp_path / "two.bin", 7000)
    async with client_of(peer) as client:
        stats = await client.put(tmp_path / "one.bin", peer.remote("one.bin"), recursive=recursive)
        expected = sshpipe.TreeStats if recursive else sshpipe.TransferStats
        assert isinstance(stats, expected)
        tree = await client.put([tmp_path / "one.bin", tmp_path / "two.bin"], peer.remote(""))
        assert isinstance(tree, sshpipe.TreeStats) and tree.files_done == 2
        (tmp_path / "back").mkdir()
        sources = [PurePosixPath(peer.remote("one.bin")), peer.remote("two.bin")]
        back = await client.get(sources, tmp_path / "back", recursive=recursive)
        assert isinstance(back, sshpipe.TreeStats) and back.files_done == 2
    assert (peer.root / "one.bin").read_bytes() == one
    assert (peer.root / "two.bin").read_bytes() == two
    assert (tmp_path / "back" / "one.bin").read_bytes() == one
    assert (tmp_path / "back" / "two.bin").read_bytes() == two


async def test_a_bytes_path_is_a_usage_error(asyncssh_peer: Peer, tmp_path: Path) -> None:
    async with client_of(asyncssh_peer) as client:
        with pytest.raises(sshpipe.UsageError, match="bytes"):
            await client.get(b"/up.bin", tmp_path / "x")  # type: ignore[call-overload]
    with pytest.raises(sshpipe.UsageError, match="bytes"):
        sshpipe.connect("h", identity_files=b"key")  # type: ignore[arg-type]
