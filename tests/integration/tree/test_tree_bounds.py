"""Honest trees past the bounds a tree keeps: how deep it goes, how many directories
wait, a glob's matches streamed. The hostile side of each is in test_hostile_server.py.

Peers: the real OpenSSH sshd and asyncssh's in-process server.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

import sshpipe
import sshpipe.tree.run as tree_run
from sshpipe.tree.item import Item
from sshpipe.tree.run import TreeRun
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.files import leftover_temps
from tests.support.peers import Peer
from tests.support.trees import compare_trees, set_times, summarize

OLD = 1_000_000_000  # the times a -p copy must keep


def _wide_tree(root: Path, fan_out: int, levels: int) -> int:
    """``fan_out`` directories in every directory, ``levels`` deep, a file in each; some
    directories read-only (their mode is set after what is in them). How many there are."""
    made = 0
    todo = [(root, 0)]
    root.mkdir()
    while todo:
        here, level = todo.pop()
        (here / "f.txt").write_bytes(str(here).encode())
        if level == levels:
            continue
        for index in range(fan_out):
            child = here / f"d{index}"
            child.mkdir()
            made += 1
            todo.append((child, level + 1))
    for dirpath, _, _ in os.walk(root, topdown=False):
        if dirpath.endswith("d1"):
            os.chmod(dirpath, 0o555)
        elif dirpath.endswith("d2"):
            os.chmod(dirpath, 0o750)
    set_times(root, OLD)
    return made


async def test_a_tree_wider_than_its_stack_of_directories_is_copied_whole_with_p(
    tree_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 16 directories waiting at most, scanners list further down themselves; every
    directory still gets its mode and times after what is in it, both ways."""
    monkeypatch.setattr(tree_run, "DIRS_QUEUED", 16)
    went_down: list[bool] = []
    scan_one = TreeRun._scan_one

    async def spied(self: TreeRun, item: Item) -> None:
        went_down.append(self._descender is asyncio.current_task())
        await scan_one(self, item)

    monkeypatch.setattr(TreeRun, "_scan_one", spied)
    src = tmp_path / "src"
    directories = _wide_tree(src, fan_out=6, levels=3)
    async with tree_peer.client() as sp:
        up = await sp.put(str(src), tree_peer.remote("up"), recursive=True, preserve=True)
        down = await sp.get(
            tree_peer.remote("up"), str(tmp_path / "down"), recursive=True, preserve=True
        )
    for copy in (tree_peer.root / "up", tmp_path / "down"):
        diffs = compare_trees(src, copy, modes=True, mtimes=True)
        assert diffs == [], summarize(diffs)
    assert up.directories >= directories and down.directories >= directories
    assert sum(went_down) > 10, went_down.count(True)  # the stack was full, often
    assert leftover_temps(tmp_path, tree_peer.root) == []
    for copy in (tree_peer.root / "up", tmp_path / "down"):  # so the fixtures can remove it
        for dirpath, _, _ in os.walk(copy):
            os.chmod(dirpath, 0o755)


def _chain(root: Path, levels: int) -> Path:
    """``levels`` directories, one in the other, from ``root`` down; a file at the bottom."""
    bottom = root.joinpath(*["d"] * (levels - 1))
    bottom.mkdir(parents=True)
    (bottom / "f.txt").write_bytes(b"at the bottom\n")
    return bottom / "f.txt"


@pytest.mark.parametrize("direction", ["get", "put"])
def test_a_tree_deeper_than_the_limit_needs_max_depth(
    openssh_peer: Peer, tmp_path: Path, direction: str
) -> None:
    """70 levels: past the 64 OpenSSH's sftp stops at too, one line and exit 8; with
    --max-depth 100 it is copied."""
    options = openssh_peer.cli_options()
    here, there = tmp_path / "chain", openssh_peer.root / "chain"
    source = here if direction == "put" else there
    _chain(source, 70)
    if direction == "get":
        src, dest = openssh_peer.spec("chain"), tmp_path

        def spec(name: str) -> str:
            return str(tmp_path / name)
    else:
        src, spec, dest = str(here), openssh_peer.spec, openssh_peer.root
    refused = run_cli(direction, "-r", "-q", *options, src, spec("refused"))
    side = "remote" if direction == "get" else "local"
    assert_one_line_error(
        refused, 8, f"{side}: {source}/d/.../d/d: more than 64 levels", "--max-depth"
    )
    copied = run_cli(direction, "-r", "-q", "--max-depth", "100", *options, src, spec("copy"))
    assert copied.returncode == 0, copied.stderr
    assert dest.joinpath("copy", *["d"] * 69, "f.txt").read_bytes() == b"at the bottom\n"


def test_max_depth_is_a_positive_number_up_to_2048() -> None:
    assert sshpipe.TransferConfig().max_depth == 64
    for bad in (0, -1, 2049, True):
        with pytest.raises(sshpipe.UsageError, match="max_depth"):
            sshpipe.TransferConfig(max_depth=bad)


# -- globs, streamed ----------------------------------------------------------------


def _logs(root: Path, count: int) -> None:
    logs = root / "logs"
    for day in ("mon", "tue"):
        (logs / day).mkdir(parents=True)
        for index in range(count):
            (logs / day / f"{day}-{index:04d}.gz").write_bytes(f"{day} {index}\n".encode())
    (logs / "mon" / "notes.txt").write_bytes(b"not a match\n")


async def test_a_glob_copies_its_matches_as_they_are_listed(
    tree_peer: Peer, tmp_path: Path
) -> None:
    _logs(tree_peer.root, 600)
    out = tmp_path / "out"
    out.mkdir()
    async with tree_peer.client() as sp:
        stats = await sp.get(tree_peer.remote("logs/*/*.gz"), str(out), glob=True)
        assert isinstance(stats, sshpipe.TreeStats)
        assert (stats.files, stats.files_done) == (1200, 1200)
        assert len(os.listdir(out)) == 1200
        assert (out / "tue-0599.gz").read_bytes() == b"tue 599\n"
        # One match, to a name that is not a directory: it lands as that name (scp).
        one = await sp.get(tree_peer.remote("logs/mon/*.txt"), str(tmp_path / "n"), glob=True)
        assert one.files == 1 and (tmp_path / "n").read_bytes() == b"not a match\n"
        # Two, to a name that is not a directory: refused before either lands.
        with pytest.raises(sshpipe.LocalError, match="several sources need one"):
            await sp.get(tree_peer.remote("logs/*"), str(tmp_path / "two"), glob=True)
        assert not (tmp_path / "two").exists()
        with pytest.raises(sshpipe.RemoteNotFound, match="no match"):
            await sp.get(tree_peer.remote("logs/*.nope"), str(out), glob=True)
        # Among several sources, one that matches nothing fails alone.
        with pytest.raises(sshpipe.IncompleteTransfer) as caught:
            await sp.get(
                [tree_peer.remote("logs/*.nope"), tree_peer.remote("logs/mon/notes.txt")],
                str(out),
                glob=True,
            )
        assert [f.error for f in caught.value.failures] == [
            f"remote: {tree_peer.remote('logs/*.nope')}: no match"
        ]
        assert (out / "notes.txt").exists()


async def test_a_globs_matches_that_share_a_name_are_refused(
    tree_peer: Peer, tmp_path: Path
) -> None:
    """mon/x and tue/x would both be out/x: the second is refused (exit 2)."""
    for day in ("mon", "tue"):
        (tree_peer.root / "days" / day).mkdir(parents=True)
        (tree_peer.root / "days" / day / "x").write_bytes(day.encode())
    out = tmp_path / "out"
    out.mkdir()
    async with tree_peer.client() as sp:
        with pytest.raises(sshpipe.UsageError, match="where another source goes"):
            await sp.get(tree_peer.remote("days/*/x"), str(out), glob=True)
    assert [stat.S_ISREG(os.lstat(out / name).st_mode) for name in os.listdir(out)] in ([], [True])
