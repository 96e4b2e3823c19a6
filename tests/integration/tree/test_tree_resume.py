"""-r --resume: a tree killed mid-way skips what it finished, continues its big files.

Through a 40 Mbit/s emulated link in front of sshd, a tree of small files and
two big ones is copied with `-r --resume` and killed (SIGKILL) once some files
are done. The second run skips the files the journal lists (unless their
source or destination changed since), continues the big file from its partial
copy, ends identical to the source, and removes its journal.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from sshpipe.testing.linkemu import LinkEmulator
from tests.support.cli import run_cli_async
from tests.support.files import leftover_temps
from tests.support.peers import Peer
from tests.support.trees import compare_trees

MiB = 1024 * 1024
SMALL = 40


pytestmark = pytest.mark.usefixtures("state_home")


def _make(root: Path) -> None:
    for i in range(SMALL):
        (root / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 4}" / f"f{i:02}.bin").write_bytes(os.urandom(64 * 1024))
    for name in ("big-a.bin", "big-b.bin"):
        (root / name).write_bytes(os.urandom(16 * MiB))


def _journaled(state_home: Path) -> int:
    journals = list(state_home.glob("tree-*.journal")) if state_home.exists() else []
    if not journals:
        return 0
    return len(journals[0].read_text().splitlines()) - 1


async def _killed_once_some_are_done(argv: list[str], state_home: Path) -> int:
    env = {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "sshpipe", *argv, env=env)
    for _ in range(800):
        await asyncio.sleep(0.025)
        if _journaled(state_home) > SMALL // 2:
            break
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the copy ended before it could be killed"
    return _journaled(state_home)


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_a_killed_tree_resumes_where_it_stopped(
    slow_link: tuple[Peer, LinkEmulator],
    tmp_path: Path,
    state_home: Path,
    direction: str,
) -> None:
    peer, _ = slow_link
    if direction == "get":
        source, dest = peer.root / "src", tmp_path / "out"
        args = [peer.spec("src"), str(dest)]
    else:
        source, dest = tmp_path / "src", peer.root / "out"
        args = [str(source), peer.spec("out")]
    _make(source)
    options = peer.cli_options()
    before = await _killed_once_some_are_done(
        [direction, "-r", "--resume", "-q", *options, *args], state_home
    )
    assert before > 0
    # Since then: one finished file's source changed (it is copied again), another's
    # copy was damaged to a new size (copied again too).
    done = [p for p in dest.rglob("f*.bin")]
    assert len(done) >= 2
    changed, damaged = done[0], done[1]
    src_of_changed = source / changed.relative_to(dest)
    src_of_changed.write_bytes(os.urandom(64 * 1024))
    os.utime(src_of_changed, (1_000_000_000, 1_000_000_000))
    damaged.write_bytes(b"short")
    # What the killed run was writing left its temp files (a SIGKILL cleans up
    # nothing): planted too, so that it is so in every run, at the top and below.
    for stray in (
        dest / ".big-a.bin.sshpipe-0a1b2c.partial",
        dest / "d1/.f01.bin.sshpipe-3d4e5f.partial",
    ):
        stray.write_bytes(b"cut off")
    result = await run_cli_async(direction, "-r", "--resume", "--json", *options, *args)
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert compare_trees(source, dest) == []
    assert 0 < stats["resumed_files"] <= before - 2  # the changed and damaged ones were not
    assert stats["files_done"] == SMALL + 2
    assert stats["bytes"] < SMALL * 64 * 1024 + 32 * MiB  # not everything again
    assert list(state_home.glob("tree-*.journal")) == []
    assert leftover_temps(dest) == []
    assert not list(dest.rglob("*.sshpipe.partial")) and not list(dest.rglob("*.journal"))


async def test_without_resume_nothing_is_journaled(
    openssh_peer: Peer, tmp_path: Path, state_home: Path
) -> None:
    (openssh_peer.root / "t").mkdir()
    (openssh_peer.root / "t" / "a.bin").write_bytes(b"a")
    result = await run_cli_async(
        "get", "-r", *openssh_peer.cli_options(), openssh_peer.spec("t"), str(tmp_path / "t")
    )
    assert result.returncode == 0, result.stderr
    assert not state_home.exists() or list(state_home.iterdir()) == []
