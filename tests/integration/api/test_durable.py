"""Durable commit: a file's bytes are synced before it takes its final name; --inplace.

Local side: os.fsync and os.replace are watched (in process). Remote side: an
asyncssh server records fsync@openssh.com and the rename in the order it
served them. sshd offers fsync@openssh.com too; there the tests check results.
"""

from __future__ import annotations

import errno
import os
import posixpath
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncssh
import pytest

import sshpipe
from sshpipe.local import writeback as _writeback
from sshpipe.testing.faults import Tracker, TrackingServer, factory
from sshpipe.transport.commands import RemoteCommands
from sshpipe.tree import groupcommit as _groupcommit
from sshpipe.tree import put as _treeput
from tests.support.cli import run_cli
from tests.support.files import leftover_temps
from tests.support.peers import Peer, StartServer
from tests.support.trees import compare_trees

Events = list[tuple[str, str]]
SYNCED = sshpipe.TransferConfig(fsync=True)
UNSYNCED = sshpipe.TransferConfig(fsync=False)


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def _full(path: Any, dir_fd: int | None) -> str:
    return os.path.join(_fd_path(dir_fd), path) if dir_fd is not None else os.fspath(path)


@pytest.fixture
def local_events(monkeypatch: pytest.MonkeyPatch) -> Events:
    """Every os.fsync (by path) and os.replace (by target), in order."""
    events: Events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(("fsync", _fd_path(fd)))
        real_fsync(fd)

    def replace(
        src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        # Names relative to directory descriptors (_localdir), recorded as paths.
        source, target = _full(src, src_dir_fd), _full(dst, dst_dir_fd)
        events.append(("replace", f"{source} -> {target}"))
        real_replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def sync_files(files: list[Any]) -> None:  # a tree's small files, synced by the batch
        events.extend(("fsync", str(file)) for file in files)
        real_sync_files(files)

    real_sync_files = _groupcommit.sync_files
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(_groupcommit, "sync_files", sync_files)
    return events


def _synced_before_renamed(events: Events, final: Path) -> None:
    """The temp that became ``final`` was fsynced before the rename, the directory after."""
    renames = [i for i, (kind, what) in enumerate(events) if what.endswith(f" -> {final}")]
    assert len(renames) == 1, events
    temp = events[renames[0]][1].split(" -> ")[0]
    synced = [i for i, (kind, what) in enumerate(events) if kind == "fsync" and what == temp]
    assert synced and synced[0] < renames[0], f"{temp} not synced before its rename: {events}"
    parent = [
        i for i, (kind, what) in enumerate(events) if kind == "fsync" and what == str(final.parent)
    ]
    assert parent and parent[-1] > renames[0], f"{final.parent} not synced after: {events}"


@pytest.mark.parametrize("in_thread", [False, True])
async def test_a_download_is_synced_before_its_rename(
    openssh_peer: Peer, tmp_path: Path, local_events: Events, in_thread: bool
) -> None:
    data = os.urandom(3 * 1024 * 1024)
    (openssh_peer.root / "f.bin").write_bytes(data)
    config = sshpipe.TransferConfig(local_io_in_thread=in_thread, fsync=True)
    async with openssh_peer.client(config) as sp:
        await sp.get(openssh_peer.remote("f.bin"), str(tmp_path / "f.bin"))
    assert (tmp_path / "f.bin").read_bytes() == data
    _synced_before_renamed(local_events, tmp_path / "f.bin")


async def test_a_tree_download_syncs_every_file_and_each_directory_once(
    openssh_peer: Peer, tmp_path: Path, local_events: Events
) -> None:
    src = openssh_peer.root / "tree"
    for i in range(12):
        (src / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 3}" / f"f{i}.bin").write_bytes(os.urandom(1000 + i))
    (src / "big.bin").write_bytes(os.urandom(12 * 1024 * 1024))  # the striped engine
    async with openssh_peer.client(SYNCED) as sp:
        await sp.get(openssh_peer.remote("tree"), str(tmp_path / "out"), recursive=True)
    out = tmp_path / "out"
    for path in [*out.rglob("*.bin")]:
        _synced_before_renamed(local_events, path)
    synced_dirs = [what for kind, what in local_events if kind == "fsync" and Path(what).is_dir()]
    expected = {str(out), *(str(out / f"d{i}") for i in range(3)), str(tmp_path)}
    assert set(synced_dirs) >= expected


async def test_fsync_is_the_default_and_can_be_turned_off(
    openssh_peer: Peer, tmp_path: Path, local_events: Events
) -> None:
    (openssh_peer.root / "f.bin").write_bytes(b"x" * 100_000)
    async with openssh_peer.client() as sp:
        await sp.get(openssh_peer.remote("f.bin"), str(tmp_path / "f.bin"))
    _synced_before_renamed(local_events, tmp_path / "f.bin")
    local_events.clear()
    async with openssh_peer.client(UNSYNCED) as sp:
        await sp.get(openssh_peer.remote("f.bin"), str(tmp_path / "g.bin"))
    assert [kind for kind, _ in local_events] == ["replace"]


class Recording(TrackingServer):
    """Records fsync@openssh.com and renames, by path, in the order served."""

    events: Events

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        file_obj = super().open(path, pflags, attrs)
        self._paths = getattr(self, "_paths", {})
        self._paths[id(file_obj)] = path.decode()
        return file_obj

    def fsync(self, file_obj: object) -> Any:
        self.events.append(("fsync", self._paths[id(file_obj)]))
        return super().fsync(file_obj)

    def posix_rename(self, oldpath: bytes, newpath: bytes) -> Any:
        self.events.append(("rename", f"{oldpath.decode()} -> {newpath.decode()}"))
        return super().posix_rename(oldpath, newpath)


def _recording(events: Events) -> Callable[..., Any]:
    return factory(Recording, Tracker(), events=events)


@pytest.mark.parametrize("size", [1000, 12 * 1024 * 1024])  # the tree's two paths, one file each
async def test_an_upload_is_synced_on_the_server_before_its_rename(
    faulty_server: StartServer, tmp_path: Path, size: int
) -> None:
    events: Events = []
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f.bin").write_bytes(os.urandom(size))
    async with faulty_server(_recording(events)) as peer, peer.client(SYNCED) as sp:
        await sp.put(str(tmp_path / "src" / "f.bin"), "/one.bin")
        await sp.put(str(tmp_path / "src"), "/tree", recursive=True)
    for final in ("/one.bin", "/tree/f.bin"):
        rename = next(i for i, (k, w) in enumerate(events) if w.endswith(f" -> {final}"))
        temp = events[rename][1].split(" -> ")[0]
        assert ("fsync", temp) in events[:rename], events
    assert (peer.root / "tree" / "f.bin").read_bytes() == (tmp_path / "src" / "f.bin").read_bytes()


async def test_remote_fsync_is_the_default_and_can_be_turned_off(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    events: Events = []
    (tmp_path / "f.bin").write_bytes(b"y" * 5000)
    async with faulty_server(_recording(events)) as peer:
        async with peer.client() as sp:
            await sp.put(str(tmp_path / "f.bin"), "/f.bin")
        assert [kind for kind, _ in events] == ["fsync", "rename"]
        events.clear()
        async with peer.client(UNSYNCED) as sp:
            await sp.put(str(tmp_path / "f.bin"), "/g.bin")
        assert [kind for kind, _ in events] == ["rename"]


def test_inplace_writes_the_destination_itself(openssh_peer: Peer, tmp_path: Path) -> None:
    """--inplace keeps the file's inode on both sides (no temporary name, no rename)."""
    old_local, old_remote = tmp_path / "local.bin", openssh_peer.root / "remote.bin"
    old_local.write_bytes(b"old local " * 100_000)
    old_remote.write_bytes(b"old remote " * 100_000)
    local_inode, remote_inode = old_local.stat().st_ino, old_remote.stat().st_ino
    new = os.urandom(300_000)  # shorter than what it replaces: the rest must go
    (openssh_peer.root / "new.bin").write_bytes(new)
    (tmp_path / "new.bin").write_bytes(new)
    options = openssh_peer.cli_options()
    got = run_cli("get", "--inplace", *options, openssh_peer.spec("new.bin"), str(old_local))
    put = run_cli(
        "put", "--inplace", *options, str(tmp_path / "new.bin"), openssh_peer.spec("remote.bin")
    )
    assert got.returncode == 0 and put.returncode == 0, got.stderr + put.stderr
    assert old_local.read_bytes() == new and old_local.stat().st_ino == local_inode
    assert old_remote.read_bytes() == new and old_remote.stat().st_ino == remote_inode
    # Without it, a new file takes the name (the old inode is gone).
    assert run_cli("get", *options, openssh_peer.spec("new.bin"), str(old_local)).returncode == 0
    assert old_local.stat().st_ino != local_inode


async def test_inplace_tree_writes_the_destinations_themselves(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    src = openssh_peer.root / "t"
    src.mkdir()
    (src / "a.bin").write_bytes(b"new a")
    dest = tmp_path / "t"
    dest.mkdir()
    (dest / "a.bin").write_bytes(b"old contents that are longer")
    inode = (dest / "a.bin").stat().st_ino
    async with openssh_peer.client(sshpipe.TransferConfig(inplace=True)) as sp:
        await sp.get(openssh_peer.remote("t"), str(tmp_path), recursive=True)
    assert (dest / "a.bin").read_bytes() == b"new a"
    assert (dest / "a.bin").stat().st_ino == inode


async def test_inplace_tree_upload_writes_the_remote_files_themselves(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.bin").write_bytes(b"new a")
    remote = openssh_peer.root / "t"
    remote.mkdir()
    (remote / "a.bin").write_bytes(b"old contents that are longer")
    inode = (remote / "a.bin").stat().st_ino
    config = sshpipe.TransferConfig(inplace=True, fsync=True)
    async with openssh_peer.client(config) as sp:
        await sp.put(str(tmp_path / "t"), openssh_peer.remote(""), recursive=True)
    assert (remote / "a.bin").read_bytes() == b"new a"
    assert (remote / "a.bin").stat().st_ino == inode


@pytest.mark.parametrize("flag", ["--fsync", "--no-fsync"])
def test_cli_fsync_flags_copy_both_ways(openssh_peer: Peer, tmp_path: Path, flag: str) -> None:
    data = os.urandom(2 * 1024 * 1024)
    (tmp_path / "a.bin").write_bytes(data)
    options = openssh_peer.cli_options()
    put = run_cli("put", flag, *options, str(tmp_path / "a.bin"), openssh_peer.spec("a.bin"))
    got = run_cli("get", flag, *options, openssh_peer.spec("a.bin"), str(tmp_path / "b.bin"))
    assert put.returncode == 0 and got.returncode == 0, put.stderr + got.stderr
    assert (tmp_path / "b.bin").read_bytes() == data


@pytest.fixture
def remote_sync_events(monkeypatch: pytest.MonkeyPatch) -> Events:
    """Each server-side command (as it finishes) and each rename of a tree upload, in order."""
    events: Events = []
    real_run, real_rename = RemoteCommands.run, _treeput.rename_into_place

    async def run(self: RemoteCommands, command: str, **bounds: Any) -> tuple[int, str] | None:
        result = await real_run(self, command, **bounds)
        events.append(("command", f"{command} -> {result[0] if result else None}"))
        return result

    async def rename(sftp: Any, temp: str, remote: str, size: int) -> None:
        await real_rename(sftp, temp, remote, size)
        events.append(("rename", temp))

    monkeypatch.setattr(RemoteCommands, "run", run)
    monkeypatch.setattr(_treeput, "rename_into_place", rename)
    return events


def _small_tree(root: Path, count: int = 60) -> None:
    for i in range(count):
        (root / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 3}" / f"f{i}.bin").write_bytes(os.urandom(100 + i))


async def test_small_uploads_are_synced_by_the_batch_on_the_server(
    openssh_peer: Peer, tmp_path: Path, remote_sync_events: Events
) -> None:
    """sshd runs GNU sync: one `sync -f DIR` for many files, each renamed after its batch."""
    _small_tree(tmp_path / "src")
    async with openssh_peer.client() as sp:
        stats = await sp.put(str(tmp_path / "src"), openssh_peer.remote("up"), recursive=True)
    assert stats.files_done == 60
    assert compare_trees(tmp_path / "src", openssh_peer.root / "up") == []
    events = remote_sync_events
    commands = [what for kind, what in events if kind == "command"]
    assert commands[0] == "sync --version -> 0"
    syncs = [i for i, (kind, what) in enumerate(events) if what.startswith("sync -f")]
    assert all(events[i][1].endswith("-> 0") for i in syncs), events
    assert 2 <= len(syncs) < 60 / 2, events  # batched, plus one last for the renames
    renames = [(i, what) for i, (kind, what) in enumerate(events) if kind == "rename"]
    assert len(renames) == 60
    for index, temp in renames:  # a sync naming its directory finished before its rename
        directory = posixpath.dirname(temp)
        assert any(i < index and directory in events[i][1] for i in syncs), (temp, events)
    assert syncs[-1] > renames[-1][0]  # and one after the last rename: the names are durable
    assert leftover_temps(openssh_peer.root) == []


async def test_when_sync_fails_on_the_server_each_upload_is_fsynced(
    faulty_server: StartServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server whose `sync -f` fails (here: one that runs no command at all but claims GNU
    sync) gets fsync@openssh.com per file before each rename, as without batching."""
    events: Events = []
    answers = {"sync --version": (0, "sync (GNU coreutils) 9.1\n")}

    async def run(self: RemoteCommands, command: str, **bounds: Any) -> tuple[int, str] | None:
        return answers.get(command, (1, ""))

    monkeypatch.setattr(RemoteCommands, "run", run)
    _small_tree(tmp_path / "src", count=12)
    async with faulty_server(_recording(events)) as peer, peer.client() as sp:
        await sp.put(str(tmp_path / "src"), "/up", recursive=True)
        assert compare_trees(tmp_path / "src", peer.root / "up") == []
    renames = [i for i, (kind, _) in enumerate(events) if kind == "rename"]
    assert len(renames) == 12
    for i in renames:
        temp = events[i][1].split(" -> ")[0]
        assert ("fsync", temp) in events[:i], (temp, events)


@pytest.fixture
def background_syncs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every os.fdatasync (the background syncs): the file's path, and "loop" if on the loop."""
    syncs: list[tuple[str, str]] = []
    loop_thread = threading.get_ident()
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        syncs.append((_fd_path(fd), "loop" if threading.get_ident() == loop_thread else "thread"))
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(_writeback, "SYNC_EVERY", 4 * 1024 * 1024)
    return syncs


@pytest.mark.parametrize("fsync", [True, False])
@pytest.mark.parametrize("in_thread", [False, True])
async def test_a_durable_download_is_synced_while_it_runs(
    openssh_peer: Peer,
    tmp_path: Path,
    local_events: Events,
    background_syncs: list[tuple[str, str]],
    fsync: bool,
    in_thread: bool,
) -> None:
    """The fsync before the rename then finds only the tail to write (it used to find all),
    and the syncs meanwhile never run on the loop (nor in the writer: it goes on writing)."""
    data = os.urandom(24 * 1024 * 1024)
    (openssh_peer.root / "big.bin").write_bytes(data)
    config = sshpipe.TransferConfig(fsync=fsync, local_io_in_thread=in_thread)
    async with openssh_peer.client(config) as sp:
        await sp.get(openssh_peer.remote("big.bin"), str(tmp_path / "big.bin"))
    assert (tmp_path / "big.bin").read_bytes() == data
    if not fsync:
        assert background_syncs == []
        return
    assert 1 <= len(background_syncs) <= 24 // 4, background_syncs
    assert {where for _, where in background_syncs} == {"thread"}
    assert {path for path, _ in background_syncs} == {
        what.split(" -> ")[0] for kind, what in local_events if kind == "replace"
    }
    _synced_before_renamed(local_events, tmp_path / "big.bin")  # the final fsync is still done


async def test_a_failed_background_sync_fails_the_download(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write-back error is reported once per open file: the background sync that saw it
    must fail the download, or the final fsync would pass and a bad file take the name."""

    def fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(_writeback, "SYNC_EVERY", 1024 * 1024)
    (openssh_peer.root / "big.bin").write_bytes(os.urandom(6 * 1024 * 1024))
    async with openssh_peer.client(SYNCED) as sp:
        with pytest.raises(sshpipe.LocalError, match="Input/output error"):
            await sp.get(openssh_peer.remote("big.bin"), str(tmp_path / "big.bin"))
    assert not (tmp_path / "big.bin").exists()
    assert leftover_temps(tmp_path) == []


class RecordingWrites(Recording):
    """Records each WRITE served too."""

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        self.events.append(("write", self._paths[id(file_obj)]))
        return super().write(file_obj, offset, data)


async def test_a_big_upload_is_synced_while_it_runs_and_after_its_last_write(
    faulty_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsync@openssh.com goes out while the WRITEs still do (on a channel of its own), and
    once more after the last WRITE: only that one makes the whole file durable."""
    monkeypatch.setattr(_writeback, "SYNC_EVERY", 4 * 1024 * 1024)
    events: Events = []
    data = os.urandom(20 * 1024 * 1024)
    (tmp_path / "f.bin").write_bytes(data)
    async with faulty_server(factory(RecordingWrites, Tracker(), events=events)) as peer:
        async with peer.client(SYNCED) as sp:
            await sp.put(str(tmp_path / "f.bin"), "/f.bin")
        assert (peer.root / "f.bin").read_bytes() == data
    rename = next(i for i, (kind, _) in enumerate(events) if kind == "rename")
    temp = events[rename][1].split(" -> ")[0]
    writes = [i for i, (kind, what) in enumerate(events) if kind == "write"]
    syncs = [i for i, event in enumerate(events) if event == ("fsync", temp)]
    assert any(i < writes[-1] for i in syncs), "no fsync while the writes went on"
    assert any(writes[-1] < i < rename for i in syncs), "no fsync after the last write"
