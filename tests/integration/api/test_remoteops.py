"""Remote file operations on ``Client`` (ls, stat, remove, rmtree, mkdir, rename, copy,
checksum) against every server: OpenSSH's sshd, asyncssh's, ProFTPD's, Green End's.

The files are made and looked at through the local side of the server's root, so
each result is checked against what the file system really holds, not against
what the client says it did. The bare server (no extensions) runs the fallbacks:
copy through the client, rename over a file without posix-rename.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

import sshpipe
from sshpipe.core import codec
from sshpipe.testing.embedded import ChannelSFTP, SFTPOnlySession
from sshpipe.testing.hostile import (
    HOSTILE_DIR,
    Recorder,
    hostile_listing,
    populate_hostile,
)
from sshpipe.testing.restrictive import NoExtensions, Restriction, restricted_server
from sshpipe.testing.tap import FXP_EXTENDED, Packet, Tap, TappedSession
from sshpipe.transport import remoteops
from sshpipe.tree import rmtree as rmtree_module
from sshpipe.tree.rmtree import REMOVES_IN_FLIGHT
from tests.support.files import leftover_temps, random_file
from tests.support.peers import ALL_SERVER_PARAMS, Peer, StartServer, from_embedded

MiB = 1024 * 1024
# Whether each server offers copy-data (else ``copy`` streams through the client).
COPY_DATA = {"openssh": True, "asyncssh": True, "proftpd": False, "greenend": False}
# How each server makes a SHA-256 (``checksum``): its sha256sum (exec), its
# check-file, or neither (the embedded server runs no commands).
# ProFTPD resolves a path before it LSTATs it: its LSTAT of a link that resolves
# describes the target (its listings describe links as links). The server's quirk.
LSTAT_SEES_LINKS = {"openssh": True, "asyncssh": True, "proftpd": False, "greenend": True}
HASHES_SHA256 = {"openssh": True, "asyncssh": False, "proftpd": True, "greenend": True}
# Other algorithms come from check-file alone: ProFTPD's.
MD5 = {"openssh": False, "asyncssh": False, "proftpd": True, "greenend": False}


@pytest.fixture(params=ALL_SERVER_PARAMS)
def server(request: pytest.FixtureRequest) -> Peer:
    """Each test taking ``server`` runs once against each server, in a fresh directory."""
    peer: Peer = request.getfixturevalue(f"{request.param}_peer")
    return peer


@pytest.fixture
def copy_data_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The destinations ``copy`` sent through the server's copy-data."""
    calls: list[str] = []
    real = remoteops.copy_data

    async def counted(sftp: object, src: str, dst: str, size: int, mode: int) -> None:
        calls.append(dst)
        await real(sftp, src, dst, size, mode)  # type: ignore[arg-type]

    monkeypatch.setattr(remoteops, "copy_data", counted)
    yield calls


def populate(peer: Peer) -> Path:
    """d/ with a file, an empty subdirectory, a link to the file and a dangling link."""
    d = peer.root / "d"
    d.mkdir()
    (d / "f.txt").write_bytes(b"hello")
    (d / "sub").mkdir()
    (d / "link").symlink_to("f.txt")
    (d / "dangling").symlink_to("nowhere")
    return d


async def test_ls_stat_lstat_and_exists(server: Peer) -> None:
    d = populate(server)
    at = server.remote
    async with server.client() as sp:
        assert await sp.ls(at("d")) == ["dangling", "f.txt", "link", "sub"]
        entries = {entry.name: entry for entry in await sp.ls(at("d"), detail=True)}
        assert {name: e.type for name, e in entries.items()} == {
            "dangling": "symlink",
            "f.txt": "file",
            "link": "symlink",
            "sub": "directory",
        }
        f = entries["f.txt"]
        assert (f.path, f.size, f.is_file(), f.is_dir()) == (at("d/f.txt"), 5, True, False)
        assert f.mtime == int((d / "f.txt").stat().st_mtime)
        assert f.mode is not None and stat.S_ISREG(f.mode)
        assert entries["sub"].is_dir() and entries["link"].is_symlink()

        followed = await sp.stat(at("d/link"))
        assert (followed.type, followed.size, followed.name) == ("file", 5, "link")
        sees_links = LSTAT_SEES_LINKS[server.name]
        assert (await sp.lstat(at("d/link"))).is_symlink() == sees_links
        # A dangling link: nothing exists through it, the link itself does.
        assert (await sp.lstat(at("d/dangling"))).is_symlink()
        assert not await sp.exists(at("d/dangling"))
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.stat(at("d/dangling"))
        assert await sp.exists(at("d/sub")) and await sp.exists(at("d/f.txt"))
        assert not await sp.exists(at("missing"))

        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.ls(at("missing"))
        with pytest.raises(sshpipe.RemoteError) as not_dir:
            await sp.ls(at("d/f.txt"))
        assert not isinstance(not_dir.value, sshpipe.RemoteNotFound), not_dir.value
        assert await sp.ls(at("d/sub")) == []


async def test_mkdir_remove_and_rmdir(server: Peer) -> None:
    d = populate(server)
    at = server.remote
    async with server.client() as sp:
        await sp.mkdir(at("new"), mode=0o700)
        assert (server.root / "new").is_dir()
        assert stat.S_IMODE((server.root / "new").stat().st_mode) == 0o700
        with pytest.raises(sshpipe.RemoteExists):
            await sp.mkdir(at("new"))
        await sp.mkdir(at("new"), exist_ok=True)
        with pytest.raises(sshpipe.RemoteExists):  # a file is not a directory that exists
            await sp.mkdir(at("d/f.txt"), exist_ok=True)
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.mkdir(at("a/b/c"))
        await sp.mkdir(at("a/b/c"), parents=True)
        assert (server.root / "a/b/c").is_dir()
        await sp.mkdir(at("a/b/c"), parents=True, exist_ok=True)

        with pytest.raises(sshpipe.RemoteError) as not_empty:
            await sp.rmdir(at("a"))
        assert type(not_empty.value) is sshpipe.RemoteError, not_empty.value
        assert (server.root / "a/b/c").is_dir()
        await sp.rmdir(at("a/b/c"))
        assert not (server.root / "a/b/c").exists()
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.rmdir(at("a/b/c"))

        with pytest.raises(sshpipe.RemoteIsADirectory):
            await sp.remove(at("d/sub"))
        await sp.remove(at("d/link"))  # the link goes, not what it points to
        assert not os.path.lexists(d / "link") and (d / "f.txt").read_bytes() == b"hello"
        await sp.remove(at("d/dangling"))
        assert not os.path.lexists(d / "dangling")
        await sp.remove(at("d/f.txt"))
        assert not (d / "f.txt").exists()
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.remove(at("d/f.txt"))


async def test_rename_with_and_without_overwrite(server: Peer) -> None:
    root, at = server.root, server.remote
    (root / "a").write_bytes(b"first")
    (root / "b").write_bytes(b"second")
    async with server.client() as sp:
        with pytest.raises(sshpipe.RemoteExists):
            await sp.rename(at("a"), at("b"))
        assert (root / "a").read_bytes() == b"first" and (root / "b").read_bytes() == b"second"
        await sp.rename(at("a"), at("b"), overwrite=True)
        assert not (root / "a").exists() and (root / "b").read_bytes() == b"first"
        await sp.rename(at("b"), at("c"))
        assert not (root / "b").exists() and (root / "c").read_bytes() == b"first"
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.rename(at("b"), at("d"))
        (root / "dir").mkdir()
        await sp.rename(at("dir"), at("moved"))
        assert (root / "moved").is_dir() and not (root / "dir").exists()
    assert leftover_temps(root) == []


async def test_rmtree_removes_a_tree_and_never_follows_a_link_out(server: Peer) -> None:
    root, at = server.root, server.remote
    outside = root / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "precious").write_bytes(b"keep me")
    tree = root / "tree"
    # More entries than rmtree keeps requests in flight, spread over levels.
    for sub in ("x", "x/y", "x/y/z", "w"):
        (tree / sub).mkdir(parents=True)
    for index in range(REMOVES_IN_FLIGHT + 20):
        (tree / ("x/y" if index % 2 else "w") / f"f{index}").write_bytes(b"%d" % index)
    (tree / "x/y/z/out").symlink_to("../../../../outside")
    (tree / "x/file-link").symlink_to("../../outside/keep/precious")
    (root / "top-link").symlink_to("outside")
    async with server.client() as sp:
        with pytest.raises(sshpipe.RemoteError, match="symbolic link"):
            await sp.rmtree(at("top-link"))
        with pytest.raises(sshpipe.RemoteError, match="not a directory"):
            await sp.rmtree(at("outside/keep/precious"))
        await sp.rmtree(at("tree"))
        assert not os.path.lexists(tree)
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.rmtree(at("tree"))
    assert (outside / "keep" / "precious").read_bytes() == b"keep me"
    assert os.path.islink(root / "top-link")


async def test_copy_and_checksum(server: Peer, copy_data_calls: list[str]) -> None:
    root, at = server.root, server.remote
    data = random_file(root / "src.bin", MiB + 1)
    os.chmod(root / "src.bin", 0o640)
    (root / "dst.bin").write_bytes(b"old")
    os.chmod(root / "dst.bin", 0o600)
    async with server.client() as sp:
        await sp.copy(at("src.bin"), at("dst.bin"))  # replaced: it keeps its mode (cp)
        assert (root / "dst.bin").read_bytes() == data
        assert stat.S_IMODE((root / "dst.bin").stat().st_mode) == 0o600
        await sp.copy(at("src.bin"), at("new.bin"))  # new: the source's mode
        assert (root / "new.bin").read_bytes() == data
        assert stat.S_IMODE((root / "new.bin").stat().st_mode) == 0o640
        (root / "empty").write_bytes(b"")
        await sp.copy(at("empty"), at("empty-copy"))
        assert (root / "empty-copy").read_bytes() == b""
        copied = [at("dst.bin"), at("new.bin"), at("empty-copy")]
        assert copy_data_calls == copied * COPY_DATA[server.name]
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.copy(at("missing"), at("x"))
        (root / "dir").mkdir()
        with pytest.raises(sshpipe.RemoteIsADirectory):
            await sp.copy(at("dir"), at("x"))
        with pytest.raises(sshpipe.RemoteIsADirectory):
            await sp.copy(at("src.bin"), at("dir"))
        assert list((root / "dir").iterdir()) == []

        if HASHES_SHA256[server.name]:
            assert await sp.checksum(at("src.bin")) == hashlib.sha256(data).hexdigest()
        else:
            with pytest.raises(sshpipe.HashUnavailable):
                await sp.checksum(at("src.bin"))
        if MD5[server.name]:
            assert await sp.checksum(at("src.bin"), "md5") == hashlib.md5(data).hexdigest()
        else:
            with pytest.raises(sshpipe.HashUnavailable):
                await sp.checksum(at("src.bin"), "md5")
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.checksum(at("missing"))
        with pytest.raises(sshpipe.UsageError):
            await sp.checksum(at("src.bin"), "crc32")
    assert leftover_temps(root) == []


@pytest.mark.asyncssh_server
async def test_copy_and_rename_on_a_server_without_extensions(
    tmp_path: Path, copy_data_calls: list[str]
) -> None:
    """No copy-data: the bytes go through the client; no posix-rename: the old target
    is moved aside, never lost, and the rename still replaces it."""
    bare = NoExtensions()
    async with restricted_server(tmp_path / "server", bare) as embedded:
        peer, root = from_embedded(embedded), embedded.root
        data = random_file(root / "src.bin", 2 * MiB + 3)
        (root / "dst.bin").write_bytes(b"old")
        async with peer.client() as sp:
            await sp.copy("/src.bin", "/dst.bin")
            assert (root / "dst.bin").read_bytes() == data
            with pytest.raises(sshpipe.RemoteExists):
                await sp.rename("/src.bin", "/dst.bin")
            (root / "src.bin").write_bytes(b"new")
            await sp.rename("/src.bin", "/dst.bin", overwrite=True)
            assert (root / "dst.bin").read_bytes() == b"new" and not (root / "src.bin").exists()
            (root / "dir").mkdir()
            (root / "f").write_bytes(b"f")
            with pytest.raises(sshpipe.RemoteIsADirectory):
                await sp.rename("/f", "/dir", overwrite=True)
            with pytest.raises(sshpipe.HashUnavailable):
                await sp.checksum("/dst.bin")
    assert copy_data_calls == []
    assert bare.refused == []  # nothing asked that the server did not offer
    assert sorted(p.name for p in root.iterdir()) == ["dir", "dst.bin", "f"]


@pytest.mark.asyncssh_server
async def test_a_hostile_listing_fails_ls_and_rmtree_and_nothing_outside_goes(
    faulty_server: StartServer,
) -> None:
    """'..', 'a/b', '../escape' in a listing: refused (UnsafePath), never a request for them."""
    recorder = Recorder()
    async with faulty_server(hostile_listing(recorder)) as peer:
        populate_hostile(peer.root)
        (peer.root / "escape").write_bytes(b"outside")
        async with peer.client() as sp:
            with pytest.raises(sshpipe.UnsafePath):
                await sp.ls(f"/{HOSTILE_DIR}")
            with pytest.raises(sshpipe.UnsafePath):
                await sp.rmtree(f"/{HOSTILE_DIR}")
        assert (peer.root / "escape").read_bytes() == b"outside"
        assert (peer.root / HOSTILE_DIR).is_dir()  # its RMDIR was never sent
    assert recorder.faked == []  # no request named a hostile entry


@pytest.mark.openssh
async def test_a_cancelled_rmtree_leaves_the_client_usable(
    openssh_peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancelled with REMOVEs in flight: their answers settle, the next call runs clean."""
    tree = openssh_peer.root / "tree"
    for sub in ("a", "b"):
        (tree / sub).mkdir(parents=True)
        for index in range(100):
            (tree / sub / f"f{index}").write_bytes(b"x")
    built = 0
    real = rmtree_module._remove
    current: list[asyncio.Task[None]] = []

    def cancelling(path: str) -> rmtree_module.Builder:
        nonlocal built
        built += 1
        if built == 50:
            current[0].cancel()
        return real(path)

    monkeypatch.setattr(rmtree_module, "_remove", cancelling)
    async with openssh_peer.client() as sp:
        task = asyncio.create_task(sp.rmtree(openssh_peer.remote("tree")))
        current.append(task)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert tree.is_dir()  # its RMDIR waits for entries the cancel left
        await sp.rmtree(openssh_peer.remote("tree"))
        assert not tree.exists()
        assert await sp.ls(openssh_peer.remote("")) == []


@pytest.mark.openssh
async def test_rmtree_keeps_many_requests_in_flight_and_never_more_than_its_budget(
    openssh_peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = openssh_peer.root / "tree"
    tree.mkdir()
    for index in range(60):
        (tree / f"f{index}").write_bytes(b"x")
    monkeypatch.setattr(rmtree_module, "REMOVES_IN_FLIGHT", 8)
    owed: list[int] = []
    real = rmtree_module._Removal.send

    async def send(self: rmtree_module._Removal, build: rmtree_module.Builder) -> object:
        future = await real(self, build)
        owed.append(len(self.owed))
        return future

    monkeypatch.setattr(rmtree_module._Removal, "send", send)
    async with openssh_peer.client() as sp:
        await sp.rmtree(openssh_peer.remote("tree"))
    assert not tree.exists()
    assert len(owed) == 61  # 60 REMOVEs and the RMDIR
    assert max(owed) == 8  # a batch's REMOVEs go out together, up to the budget


@pytest.mark.openssh
async def test_rmtree_with_fewer_walkers_than_directories_never_deadlocks(
    openssh_peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every walker busy and each finding subdirectories: one walks them itself."""
    tree = openssh_peer.root / "tree"
    paths = [tree]
    for _ in range(3):  # 3 levels of 3 subdirectories: 39 directories, a file in each
        paths = [parent / f"s{index}" for parent in paths for index in range(3)]
        for path in paths:
            path.mkdir(parents=True)
            (path / "f").write_bytes(b"x")
    monkeypatch.setattr(rmtree_module, "WALKERS", 2)
    async with openssh_peer.client() as sp, asyncio.timeout(30):
        await sp.rmtree(openssh_peer.remote("tree"))
    assert not tree.exists()


class _RefusingCopyData(Tap):
    def __init__(self) -> None:
        self.refused = 0

    def request(self, session: TappedSession, packet: Packet) -> bool:
        if packet.type == FXP_EXTENDED and packet.first_string() == b"copy-data":
            assert packet.id is not None
            self.refused += 1
            session.answer(packet.id, codec.FX_OP_UNSUPPORTED, "copy-data not supported")
            return False
        return True


class ListsCopyDataRefusesIt(Restriction):
    """asyncssh's server, which lists copy-data, with every copy-data answered unsupported."""

    def __init__(self) -> None:
        self.tap = _RefusingCopyData()

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, self.tap)


@pytest.mark.asyncssh_server
async def test_copy_data_listed_but_refused_falls_back_to_the_client(
    tmp_path: Path, copy_data_calls: list[str]
) -> None:
    restriction = ListsCopyDataRefusesIt()
    async with restricted_server(tmp_path / "server", restriction) as embedded:
        root = embedded.root
        data = random_file(root / "src.bin", MiB + 7)
        async with from_embedded(embedded).client() as sp:
            await sp.copy("/src.bin", "/dst.bin")
        assert (root / "dst.bin").read_bytes() == data
    assert copy_data_calls == ["/dst.bin"] and restriction.tap.refused == 1
    assert leftover_temps(root) == []  # the temporary file copy-data was to fill is gone
