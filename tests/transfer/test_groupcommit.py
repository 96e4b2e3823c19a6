"""GroupCommit: files synced by the batch, each renamed only after its sync, nothing left."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sshpipe.core.errors import LocalError
from sshpipe.local.dirfd import DirRoot, LocalFile
from sshpipe.tree import groupcommit as _groupcommit
from sshpipe.tree.groupcommit import GroupCommit, sync_files

Log = list[tuple[str, object]]


@pytest.fixture
def log(monkeypatch: pytest.MonkeyPatch) -> Log:
    """Each batch synced (its paths) and each rename, in order."""
    events: Log = []
    real_sync, real_replace = _groupcommit.sync_files, os.replace

    def sync(files: list[LocalFile]) -> None:
        events.append(("sync", [f.name for f in files]))
        real_sync(files)

    def replace(src: str, dst: str, **dir_fds: int) -> None:
        events.append(("rename", src))
        real_replace(src, dst, **dir_fds)

    monkeypatch.setattr(_groupcommit, "sync_files", sync)
    monkeypatch.setattr(os, "replace", replace)
    return events


@pytest.fixture
def root(tmp_path: Path) -> Iterator[DirRoot]:
    """``tmp_path`` held by descriptor, as a download's destination is (``_localdir``)."""
    held = DirRoot(str(tmp_path))
    yield held
    held.close()


def _temp(root: DirRoot, name: str, data: bytes = b"data") -> LocalFile:
    temp = root.top.file(f".{name}.tmp")
    Path(str(temp)).write_bytes(data)
    return temp


def _at(root: DirRoot, name: str) -> LocalFile:
    return root.top.file(name)


async def test_many_files_share_few_syncs_and_each_is_synced_before_its_rename(
    tmp_path: Path, root: DirRoot, log: Log
) -> None:
    committer = GroupCommit()
    temps = [_temp(root, f"f{i}", bytes([i])) for i in range(50)]
    async with committer.running():
        await asyncio.gather(
            *(committer.commit(t, _at(root, f"f{i}")) for i, t in enumerate(temps))
        )
    for i in range(50):
        assert (tmp_path / f"f{i}").read_bytes() == bytes([i])
    assert not list(tmp_path.glob(".*.tmp"))
    syncs = [i for i, (kind, _) in enumerate(log) if kind == "sync"]
    assert len(syncs) < 50 / 2, log  # batched: the first alone, the other 49 together
    for name in (t.name for t in temps):
        synced = next(i for i, (k, what) in enumerate(log) if k == "sync" and name in what)  # type: ignore[operator]
        renamed = next(i for i, (k, what) in enumerate(log) if k == "rename" and what == name)
        assert synced < renamed


async def test_a_failed_rename_fails_that_file_only(tmp_path: Path, root: DirRoot) -> None:
    committer = GroupCommit()
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "inside").write_bytes(b"keeps the directory non-empty")
    good, bad = _temp(root, "good"), _temp(root, "bad")
    async with committer.running():
        results = await asyncio.gather(
            committer.commit(good, _at(root, "good")),
            committer.commit(bad, _at(root, "dir")),
            return_exceptions=True,
        )
    assert results[0] is None
    assert isinstance(results[1], LocalError) and str(tmp_path / "dir") in str(results[1])
    assert (tmp_path / "good").read_bytes() == b"data"
    assert not (tmp_path / bad.name).exists()


async def test_a_failed_sync_fails_the_batch_and_removes_its_files(
    tmp_path: Path, root: DirRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(files: list[LocalFile]) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(_groupcommit, "sync_files", broken)
    committer = GroupCommit()
    temp = _temp(root, "f")
    async with committer.running():
        with pytest.raises(LocalError, match="Input/output error"):
            await committer.commit(temp, _at(root, "f"))
    assert not (tmp_path / temp.name).exists() and not (tmp_path / "f").exists()


async def test_files_handed_over_are_still_committed_when_their_waiters_are_cancelled(
    tmp_path: Path, root: DirRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They are whole: a cancelled tree keeps them, as it keeps files already renamed."""
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    real_sync = _groupcommit.sync_files

    def slow(files: list[LocalFile]) -> None:  # runs in a worker thread
        loop.call_soon_threadsafe(started.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(timeout=10)
        real_sync(files)

    monkeypatch.setattr(_groupcommit, "sync_files", slow)
    committer = GroupCommit()

    async def tree() -> None:
        async with committer.running():
            first = asyncio.create_task(committer.commit(_temp(root, "a"), _at(root, "a")))
            await started.wait()  # "a" is being synced; "b" and "c" wait for the next batch
            later = [
                asyncio.create_task(committer.commit(_temp(root, n), _at(root, n)))
                for n in ("b", "c")
            ]
            await asyncio.sleep(0)
            for task in (first, *later):
                task.cancel()
            await asyncio.gather(first, *later, return_exceptions=True)

    closing = asyncio.create_task(tree())
    await asyncio.sleep(0.05)
    assert not closing.done()  # it waits for the sync under way and the batch after it
    release.set()
    await closing
    for name in ("a", "b", "c"):
        assert (tmp_path / name).read_bytes() == b"data"
    assert not list(tmp_path.glob(".*.tmp"))
    assert committer._batches._task is not None and committer._batches._task.done()


def _counting_syncfs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = _groupcommit._syncfs()
    if real is None:
        pytest.skip("no syncfs on this system")

    def syncfs(fd: int) -> int:
        calls.append(fd)
        return real(fd)

    monkeypatch.setattr(_groupcommit, "_syncfs", lambda: syncfs)
    return calls


def test_one_syncfs_per_file_system(root: DirRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting_syncfs(monkeypatch)
    sync_files([_temp(root, f"f{i}") for i in range(20)])
    assert len(calls) == 1


def test_without_syncfs_each_file_is_fsynced(
    root: DirRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync: Callable[[int], None] = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(_groupcommit, "_syncfs", lambda: None)
    monkeypatch.setattr(os, "fsync", fsync)
    temps = [_temp(root, f"f{i}") for i in range(3)]
    sync_files(temps)
    assert synced == [str(t) for t in temps]


def test_a_failing_syncfs_raises(root: DirRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_groupcommit, "_syncfs", lambda: lambda fd: -1)
    with pytest.raises(OSError):
        sync_files([_temp(root, "f")])
