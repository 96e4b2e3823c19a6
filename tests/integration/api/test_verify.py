"""--verify: the copy's SHA-256 (taken as the bytes flow) against the server's file.

sshd runs commands, so it is checked with sha256sum there ("hash-remote");
the in-process asyncssh server runs none, so it falls back to the size or,
if asked, to a read-back. Corruption comes from servers that damage one read
(transient: the read-back sees the truth) or store one write wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sshpipe
import sshpipe.transfer.verify
from sshpipe.core.checkfile import SHA256, HashSpec
from sshpipe.testing.faults import Tracker, TrackingServer, factory
from sshpipe.testing.sshd import SSHServerInfo, openssh_server
from sshpipe.transport.commands import RemoteCommands
from tests.support.cli import run_cli
from tests.support.files import leftover_temps
from tests.support.peers import Peer, StartServer, from_openssh
from tests.support.trees import compare_trees, make_tree

SIZE = 3 * 1024 * 1024 + 123
HASHED = sshpipe.TransferConfig(verify="hash")
BEST = sshpipe.TransferConfig(verify="best")
READ_BACK = sshpipe.TransferConfig(verify="read-back")


def test_ordered_hash_takes_pieces_in_any_order() -> None:
    data = os.urandom(100_000)
    cuts = sorted(random.Random(7).sample(range(1, len(data)), 40))
    pieces = [(a, data[a:b]) for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    random.Random(8).shuffle(pieces)
    md5_blocks = HashSpec("md5", 4096)
    digest = sshpipe.transfer.verify.OrderedHash([SHA256, md5_blocks])  # both in one pass
    for offset, piece in pieces:
        digest.add(offset, piece)
    assert digest.buffered == 0
    blocks = b"".join(hashlib.md5(data[a : a + 4096]).digest() for a in range(0, len(data), 4096))
    expected = {SHA256: hashlib.sha256(data).digest(), md5_blocks: blocks}
    assert digest.digests(len(data)) == expected
    short = sshpipe.transfer.verify.OrderedHash()
    short.add(10, b"x")  # a gap at 0: not a whole file
    with pytest.raises(sshpipe.IntegrityError):
        short.digests(11)


async def test_sshd_checks_with_sha256sum_both_ways(openssh_peer: Peer, tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    (openssh_peer.root / "a.bin").write_bytes(data)
    async with openssh_peer.client(HASHED) as sp:
        got = await sp.get(openssh_peer.remote("a.bin"), str(tmp_path / "a.bin"))
        put = await sp.put(str(tmp_path / "a.bin"), openssh_peer.remote("b.bin"))
    assert (got.verified, put.verified) == ("hash-remote", "hash-remote")
    assert (openssh_peer.root / "b.bin").read_bytes() == data


async def test_a_source_that_changed_fails_the_check_and_leaves_nothing(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote = openssh_peer.root / "a.bin"
    remote.write_bytes(os.urandom(SIZE))
    real = sshpipe.transfer.verify.remote_sha256

    async def changed_then_hashed(sftp: Any, path: str, size: int) -> str | None:
        with remote.open("ab") as grown:  # someone appends while we finish
            grown.write(b"late")
        return await real(sftp, path, size)

    monkeypatch.setattr(sshpipe.transfer.verify, "remote_sha256", changed_then_hashed)
    async with openssh_peer.client(HASHED) as sp:
        with pytest.raises(sshpipe.IntegrityError) as caught:
            await sp.get(openssh_peer.remote("a.bin"), str(tmp_path / "a.bin"))
    assert "sha256" in str(caught.value) and caught.value.exit_code == 10
    assert os.listdir(tmp_path) == []  # no file, no .partial


class DamagesOneRead(TrackingServer):
    """Flips a byte in the first read at ``offset``; later reads are right."""

    offset = 1024 * 1024
    damaged = False

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        data = super().read(file_obj, offset, size)
        if not self.damaged and offset <= self.offset < offset + len(data):
            self.damaged = True
            i = self.offset - offset
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
        return data


class StoresOneWriteWrong(TrackingServer):
    """Flips a byte of the write that covers ``offset`` before storing it."""

    offset = 1024 * 1024

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        if offset <= self.offset < offset + len(data):
            i = self.offset - offset
            data = data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
        return super().write(file_obj, offset, data)


async def test_without_commands_best_falls_back_to_the_size(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    async with faulty_server() as peer:
        data = os.urandom(SIZE)
        (peer.root / "a.bin").write_bytes(data)
        async with peer.client(BEST) as sp:
            got = await sp.get("/a.bin", str(tmp_path / "a.bin"))
            sent = await sp.put(str(tmp_path / "a.bin"), "/b.bin")
    assert got.verified == sent.verified == "size"
    assert (tmp_path / "a.bin").read_bytes() == (peer.root / "b.bin").read_bytes() == data


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_without_commands_hash_asked_by_name_fails_and_lands_nothing(
    faulty_server: StartServer, tmp_path: Path, direction: str
) -> None:
    """No sha256sum, no check-file: "hash" is not quietly a size check."""
    async with faulty_server() as peer:
        source = (peer.root if direction == "get" else tmp_path) / "a.bin"
        source.write_bytes(os.urandom(100_000))
        async with peer.client(HASHED) as sp:
            with pytest.raises(sshpipe.HashUnavailable) as caught:
                if direction == "get":
                    await sp.get("/a.bin", str(tmp_path / "out.bin"))
                else:
                    await sp.put(str(source), "/out.bin")
    error = caught.value
    assert "no hash check possible on this server" in str(error)
    assert error.path == ("/a.bin" if direction == "get" else "/out.bin")  # the remote file
    assert isinstance(error, sshpipe.IntegrityError) and not error.retryable
    assert error.exit_code == 10
    assert not (tmp_path / "out.bin").exists() and not (peer.root / "out.bin").exists()
    assert leftover_temps(tmp_path, peer.root) == []


async def test_read_back_catches_a_damaged_download(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    async with faulty_server(factory(DamagesOneRead, Tracker())) as peer:
        (peer.root / "a.bin").write_bytes(os.urandom(SIZE))
        async with peer.client(READ_BACK) as sp:
            with pytest.raises(sshpipe.IntegrityError) as caught:
                await sp.get("/a.bin", str(tmp_path / "a.bin"))
            assert "read back" in str(caught.value)
            ok = await sp.get("/a.bin", str(tmp_path / "a.bin"))  # now undamaged
    assert ok.verified == "read-back"
    assert (tmp_path / "a.bin").read_bytes() == (peer.root / "a.bin").read_bytes()
    assert leftover_temps(tmp_path) == []


async def test_read_back_catches_a_damaged_upload_and_keeps_the_old_file(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    (tmp_path / "a.bin").write_bytes(os.urandom(SIZE))
    async with faulty_server(factory(StoresOneWriteWrong, Tracker())) as peer:
        (peer.root / "a.bin").write_bytes(b"the old file")
        async with peer.client(READ_BACK) as sp:
            with pytest.raises(sshpipe.IntegrityError):
                await sp.put(str(tmp_path / "a.bin"), "/a.bin")
    assert (peer.root / "a.bin").read_bytes() == b"the old file"
    assert leftover_temps(peer.root) == []


def test_cli_verify_says_what_it_checked_and_fails_in_one_line(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    (openssh_peer.root / "a.bin").write_bytes(os.urandom(SIZE))
    options = openssh_peer.cli_options()
    ok = run_cli("get", "--verify", *options, openssh_peer.spec("a.bin"), str(tmp_path / "a"))
    assert ok.returncode == 0, ok.stderr
    assert "verified: hash-remote" in ok.stdout
    (openssh_peer.root / "t").mkdir()
    (openssh_peer.root / "t" / "b.bin").write_bytes(b"b" * 1000)
    tree = run_cli(
        "get", "-r", "--verify", "--json", *options, openssh_peer.spec("t"), str(tmp_path / "t")
    )
    assert tree.returncode == 0, tree.stderr
    assert json.loads(tree.stdout)["verified"] == "hash-remote"
    assert (tmp_path / "t" / "b.bin").read_bytes() == b"b" * 1000


# -- trees -------------------------------------------------------------------------


def _tree(root: Path) -> None:
    make_tree(root, files=120, depth=3, seed=3)
    (root / "big.bin").write_bytes(os.urandom(12 * 1024 * 1024))  # the single-file engine


async def test_a_tree_put_in_place_checks_its_small_files(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """--inplace renames nothing, and still checks each file it wrote (small ones only
    here: the tree reports the weakest check any file passed, "none" for none)."""
    make_tree(tmp_path / "src", files=30, depth=3, seed=5)
    config = sshpipe.TransferConfig(verify="hash", inplace=True)
    async with openssh_peer.client(config) as sp:
        put = await sp.put(str(tmp_path / "src"), openssh_peer.remote("put"), recursive=True)
    assert put.verified == "hash-remote" and put.files_done == put.files
    assert compare_trees(tmp_path / "src", openssh_peer.root / "put") == []


async def test_a_tree_is_checked_with_one_sha256sum_per_batch_both_ways(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[str] = []
    real_run = RemoteCommands.run

    async def run(self: RemoteCommands, command: str, **bounds: Any) -> tuple[int, str] | None:
        commands.append(command)
        return await real_run(self, command, **bounds)

    monkeypatch.setattr(RemoteCommands, "run", run)
    _tree(openssh_peer.root / "src")
    async with openssh_peer.client(HASHED) as sp:
        got = await sp.get(openssh_peer.remote("src"), str(tmp_path / "got"), recursive=True)
        put = await sp.put(str(tmp_path / "got"), openssh_peer.remote("put"), recursive=True)
    assert (got.verified, put.verified) == ("hash-remote", "hash-remote")
    assert compare_trees(openssh_peer.root / "src", tmp_path / "got") == []
    assert compare_trees(openssh_peer.root / "src", openssh_peer.root / "put") == []
    hashed = [c for c in commands if c.startswith("sha256sum -z")]
    assert 2 <= len(hashed) < got.files_done // 4, hashed  # batched, both ways
    # The big file too, both ways: through the kept shell, not an exec of its own
    # (its channels may fill the connection's sessions: it then fell back to the size).
    assert len([c for c in hashed if "big.bin" in c]) == 2, hashed
    assert leftover_temps(tmp_path, openssh_peer.root) == []


async def test_a_file_changed_on_the_server_fails_alone_and_is_not_written(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = openssh_peer.root / "src"
    for i in range(30):
        (src / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 3}" / f"f{i}.bin").write_bytes(os.urandom(5000))
    victim = src / "d1" / "f4.bin"
    real_run = RemoteCommands.run

    async def run(self: RemoteCommands, command: str, **bounds: Any) -> tuple[int, str] | None:
        if command.startswith("sha256sum -z") and str(victim) in command:
            with victim.open("ab") as grown:  # someone appends after we read it
                grown.write(b"late")
        return await real_run(self, command, **bounds)

    monkeypatch.setattr(RemoteCommands, "run", run)
    async with openssh_peer.client(HASHED) as sp:
        with pytest.raises(sshpipe.IncompleteTransfer) as caught:
            await sp.get(openssh_peer.remote("src"), str(tmp_path / "out"), recursive=True)
    stats = caught.value.stats
    assert stats.files_done == 29 and stats.files_failed == 1
    (failure,) = stats.failures
    assert failure.path == str(victim) and failure.exit_code == 10 and "sha256" in failure.error
    assert not (tmp_path / "out" / "d1" / "f4.bin").exists()
    assert leftover_temps(tmp_path) == []


class DamagesOneSmallRead(DamagesOneRead):
    offset = 100  # the first read of whichever small file comes first (on each channel)


class StoresF7Wrong(TrackingServer):
    """Flips the first byte of every write to a file whose name has "f7.bin" in it.

    The victims are kept, not their ids: a closed file's id is soon another
    file's (f17.bin was damaged too, once a CLOSE was no longer waited for).
    """

    def open(self, path: bytes, pflags: int, attrs: Any) -> object:
        file_obj = super().open(path, pflags, attrs)
        if b"f7.bin" in path:
            self.victims = [*getattr(self, "victims", []), file_obj]
        return file_obj

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        if any(file_obj is victim for victim in getattr(self, "victims", [])) and data:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        return super().write(file_obj, offset, data)


async def test_without_sha256sum_read_back_catches_a_damaged_file_in_a_tree(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    async with faulty_server(factory(DamagesOneSmallRead, Tracker())) as peer:
        for i in range(20):
            (peer.root / "t").mkdir(exist_ok=True)
            (peer.root / "t" / f"f{i}.bin").write_bytes(os.urandom(4000))
        async with peer.client(READ_BACK) as sp:
            with pytest.raises(sshpipe.IncompleteTransfer) as caught:
                await sp.get("/t", str(tmp_path / "t"), recursive=True)
        stats = caught.value.stats
        # Each channel's server damages its first read: one file per channel fails.
        assert 1 <= stats.files_failed <= 4 and stats.files_done + stats.files_failed == 20
        assert stats.verified == "read-back"
        for failure in stats.failures:
            assert "read back" in failure.error and failure.exit_code == 10
            assert not (tmp_path / "t" / Path(failure.path).name).exists()
        assert len(os.listdir(tmp_path / "t")) == stats.files_done
        for name in os.listdir(tmp_path / "t"):
            assert (tmp_path / "t" / name).read_bytes() == (peer.root / "t" / name).read_bytes()
    assert leftover_temps(tmp_path) == []


async def test_without_sha256sum_read_back_catches_a_damaged_upload_in_a_tree(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    for i in range(20):
        (tmp_path / "t").mkdir(exist_ok=True)
        (tmp_path / "t" / f"f{i}.bin").write_bytes(os.urandom(4000))
    async with faulty_server(factory(StoresF7Wrong, Tracker())) as peer:
        async with peer.client(READ_BACK) as sp:
            with pytest.raises(sshpipe.IncompleteTransfer) as caught:
                await sp.put(str(tmp_path / "t"), "/t", recursive=True)
        stats = caught.value.stats
        assert (stats.files_done, stats.files_failed) == (19, 1), stats.failures
        failure = stats.failures[0]
        assert failure.path == str(tmp_path / "t" / "f7.bin") and "read back" in failure.error
        assert not (peer.root / "t" / "f7.bin").exists()
        assert len(os.listdir(peer.root / "t")) == 19  # and no temporary file
    assert leftover_temps(peer.root) == []


async def test_without_commands_a_tree_falls_back_to_sizes_or_fails_for_hash(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    async with faulty_server() as peer:
        (peer.root / "t").mkdir()
        data = os.urandom(3000)
        (peer.root / "t" / "a.bin").write_bytes(data)
        async with peer.client(BEST) as sp:
            stats = await sp.get("/t", str(tmp_path / "t"), recursive=True)
            assert stats.verified == "size"
            assert (tmp_path / "t" / "a.bin").read_bytes() == data
            with pytest.raises(sshpipe.HashUnavailable):
                await sp.put(str(tmp_path / "t"), "/u", recursive=True, config=HASHED)
            with pytest.raises(sshpipe.HashUnavailable):
                await sp.get("/t", str(tmp_path / "v"), recursive=True, config=HASHED)
    assert not (peer.root / "u" / "a.bin").exists()
    assert not (tmp_path / "v" / "a.bin").exists()
    assert leftover_temps(tmp_path, peer.root) == []


def test_cli_verify_before_the_paths_takes_no_path_for_a_level(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """`--verify SRC DST` means --verify=best; a level must be attached or one of the four."""
    (openssh_peer.root / "a.bin").write_bytes(b"a" * 5000)
    options = openssh_peer.cli_options()
    ok = run_cli("get", *options, "--verify", openssh_peer.spec("a.bin"), str(tmp_path / "a"))
    assert ok.returncode == 0, ok.stderr
    assert "verified: hash-remote" in ok.stdout
    sized = run_cli(
        "get", *options, "--verify", "size", openssh_peer.spec("a.bin"), str(tmp_path / "b")
    )
    assert sized.returncode == 0, sized.stderr
    assert "verified: size" in sized.stdout


@pytest.fixture(scope="module")
def stock_sshd(
    sshd_executable: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SSHServerInfo]:
    """sshd with its stock MaxSessions 10 (the shared fixture allows 64)."""
    with openssh_server(tmp_path_factory.mktemp("sshd10"), max_sessions=10) as info:
        yield info


async def test_a_file_striped_over_many_channels_is_still_hashed_on_the_server(
    stock_sshd: SSHServerInfo, tmp_path: Path
) -> None:
    """Ten channels on a connection filled sshd's MaxSessions 10 and left no session for
    the sha256sum exec (the check fell back to the size): one is kept free for it."""
    root = stock_sshd.root / tmp_path.name
    root.mkdir()
    peer = from_openssh(stock_sshd, root)
    data = os.urandom(8 * 1024 * 1024)
    (tmp_path / "a.bin").write_bytes(data)
    config = sshpipe.TransferConfig(verify="hash", channels=10)
    async with peer.client(config) as sp:
        put = await sp.put(str(tmp_path / "a.bin"), peer.remote("a.bin"))
        got = await sp.get(peer.remote("a.bin"), str(tmp_path / "b.bin"))
    assert (put.channels, got.channels) == (10, 10)
    assert (put.verified, got.verified) == ("hash-remote", "hash-remote")
    assert (tmp_path / "b.bin").read_bytes() == data
