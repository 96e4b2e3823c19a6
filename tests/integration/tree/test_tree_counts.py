"""A tree's failure counts add up: "N of M entries failed" counts every entry met.

A directory that cannot be listed, a source that is not there: each is one
entry that failed, never more failures than entries ("1 of 0").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.hostile import Recorder, denies_listing
from tests.support.files import leftover_temps
from tests.support.peers import StartServer


@pytest.fixture
def unreadable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A local directory that cannot be listed: chmod 0, or (root reads through
    that) an os.scandir that says what the kernel says to anyone else."""
    locked = tmp_path / "src" / "locked"
    locked.mkdir(parents=True)
    (locked / "inside.bin").write_bytes(b"never copied")
    if os.geteuid() != 0:
        locked.chmod(0)
        yield locked
        locked.chmod(0o700)
        return
    scandir = os.scandir

    def refusing(path: object) -> object:
        if os.fspath(path) == str(locked):  # type: ignore[arg-type]
            raise PermissionError(13, "Permission denied", str(locked))
        return scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", refusing)
    yield locked


def _only_failure(error: sshpipe.IncompleteTransfer, path: str) -> None:
    (failure,) = error.failures
    assert failure.path == path and "Permission denied" in failure.error


async def test_put_of_an_unreadable_directory_counts_it_once(
    faulty_server: StartServer, tmp_path: Path, unreadable: Path
) -> None:
    src = unreadable.parent
    (src / "ok.bin").write_bytes(b"copied")
    async with faulty_server() as peer, peer.client() as sp:
        with pytest.raises(sshpipe.IncompleteTransfer) as caught:
            await sp.put(str(src), "/out", recursive=True)
        _only_failure(caught.value, str(unreadable))
        stats = caught.value.stats
        # src, ok.bin, locked: three entries, one failed.
        assert (stats.entries, stats.files_done, stats.directories) == (3, 1, 2)
        assert str(caught.value).startswith("1 of 3 entries failed")
        assert (peer.root / "out" / "ok.bin").read_bytes() == b"copied"
        assert not (peer.root / "out" / "locked" / "inside.bin").exists()

        # The unreadable directory alone, with a source that is not there.
        missing = str(tmp_path / "missing")
        with pytest.raises(sshpipe.IncompleteTransfer) as both:
            await sp.put([str(unreadable), missing], "/", recursive=True)
        assert str(both.value).startswith("2 of 2 entries failed")
        assert both.value.exit_code == 3
        assert both.value.stats.entries == 2
    assert leftover_temps(tmp_path, peer.root) == []


async def test_get_of_an_unlistable_remote_directory_counts_it_once(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    async with faulty_server(denies_listing(Recorder())) as peer:
        (peer.root / "t" / "locked").mkdir(parents=True)
        (peer.root / "t" / "locked" / "inside.bin").write_bytes(b"never copied")
        (peer.root / "t" / "ok.bin").write_bytes(b"copied")
        async with peer.client() as sp:
            with pytest.raises(sshpipe.IncompleteTransfer) as caught:
                await sp.get("/t", str(tmp_path / "out"), recursive=True)
            _only_failure(caught.value, "/t/locked")
            assert str(caught.value).startswith("1 of 3 entries failed")
            assert caught.value.exit_code == 4
            (tmp_path / "two").mkdir()
            with pytest.raises(sshpipe.IncompleteTransfer) as alone:
                await sp.get(["/t/locked", "/nope"], str(tmp_path / "two"), recursive=True)
            assert str(alone.value).startswith("2 of 2 entries failed")
    assert (tmp_path / "out" / "ok.bin").read_bytes() == b"copied"
    assert not (tmp_path / "out" / "locked" / "inside.bin").exists()
    assert leftover_temps(tmp_path, peer.root) == []
