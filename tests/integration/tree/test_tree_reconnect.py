"""Trees survive a cut or silent connection: one reconnect, every file whole, nothing stray.

Through the link emulator in front of the real sshd, a generated tree (files
of mixed sizes, symlinks, empty directories, unicode names) plus two files big
enough for the striped engine is copied down and up while the connection is
reset at a seeded random offset (SSHPIPE_CUT_SEED), or goes silent. The copy
must match the source entry by entry, with no temporary file left on either
side.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from pathlib import Path

import asyncssh
import pytest

import sshpipe
from sshpipe.testing.linkemu import LinkEmulator, LinkSpec
from tests.support.cli import assert_one_line_error, run_sshpipe
from tests.support.files import leftover_temps
from tests.support.peers import EmulatedLink, Peer
from tests.support.trees import compare_trees, make_tree
from tests.support.waits import eventually

# Tests here start the link emulator themselves, not only through fixtures.
pytestmark = pytest.mark.linkemu

MiB = 1024 * 1024
CUTS = 6  # per direction
SEED = int(os.environ.get("SSHPIPE_CUT_SEED", "20261130"))


def _tree_with_big_files(root: Path) -> int:
    """The generated tree plus two striped-engine files; returns its bytes."""
    make_tree(root, files=300, depth=4, seed=7)
    rng = random.Random(11)
    for name in ("big-1.bin", "sub/big-2.bin"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(rng.randbytes(12 * MiB))
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


async def test_tree_downloads_survive_cuts(
    link: tuple[LinkEmulator, Peer],
    tmp_path: Path,
) -> None:
    emu, peer = link
    source = peer.root / "tree"
    total = _tree_with_big_files(source)
    rng = random.Random(SEED)
    print(f"cut offsets from seed {SEED} (SSHPIPE_CUT_SEED)")
    reconnected = 0
    for number in range(CUTS):
        cut = rng.randrange(64 * 1024, total * 3 // 4)
        out = tmp_path / f"out-{number}"
        async with peer.client() as sp:
            emu.cut_after(cut, direction="down")
            stats = await sp.get(peer.remote("tree"), str(out), recursive=True)
        assert compare_trees(source, out) == [], f"copy {number} (cut at {cut}) differs"
        assert stats.files_failed == 0 and stats.failures == ()
        assert stats.reconnects <= 1, f"copy {number} (cut at {cut})"
        assert leftover_temps(out) == [], f"copy {number} (cut at {cut})"
        reconnected += stats.reconnects
        shutil.rmtree(out)
    # A cut while only big files move is theirs to heal (not counted by the tree).
    assert reconnected >= 1


@pytest.mark.slow  # 15-60 s: the as-user run leaves it to the root run
async def test_tree_uploads_survive_cuts(
    link: tuple[LinkEmulator, Peer],
    tmp_path: Path,
) -> None:
    emu, peer = link
    source = tmp_path / "tree"
    total = _tree_with_big_files(source)
    rng = random.Random(SEED + 1)
    print(f"cut offsets from seed {SEED} + 1 (SSHPIPE_CUT_SEED)")
    reconnected = 0
    for number in range(CUTS):
        cut = rng.randrange(64 * 1024, total * 3 // 4)
        out = peer.root / f"up-{number}"
        async with peer.client() as sp:
            emu.cut_after(cut, direction="up")
            stats = await sp.put(str(source), peer.remote(f"up-{number}"), recursive=True)
        assert compare_trees(source, out) == [], f"copy {number} (cut at {cut}) differs"
        assert stats.files_failed == 0 and stats.failures == ()
        assert leftover_temps(out) == [], f"copy {number} (cut at {cut}): stray temp files"
        reconnected += stats.reconnects
        shutil.rmtree(out)
    # A cut while only big files move is theirs to heal (not counted by the tree).
    assert reconnected >= 1


@pytest.mark.slow  # 15-60 s: the as-user run leaves it to the root run
async def test_a_silent_link_under_a_tree_is_dropped_and_the_tree_goes_on(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    source = openssh_peer.root / "tree"
    make_tree(source, files=400, depth=4, seed=9)
    # 100 Mbit/s: the tree takes ~2 s, still long enough to go silent mid-way
    # (at 20 Mbit/s the test took 8-40 s).
    spec = LinkSpec(rtt=0.002, rate=100e6)
    async with LinkEmulator(openssh_peer.host, openssh_peer.port, spec) as emu:
        far = openssh_peer.behind(emu.port, tmp_path)
        async with far.client(sshpipe.TransferConfig(stall_timeout=0.5)) as sp:
            out = tmp_path / "out"
            task = asyncio.create_task(sp.get(far.remote("tree"), str(out), recursive=True))
            await asyncio.sleep(0.3)
            assert not task.done()
            emu.stall(2.0)
            stats = await asyncio.wait_for(task, 60)
    assert compare_trees(source, out) == []
    assert stats.reconnects >= 1
    assert leftover_temps(out) == []


async def test_a_tree_gives_up_when_the_server_is_gone(openssh_peer: Peer, tmp_path: Path) -> None:
    source = openssh_peer.root / "tree"
    make_tree(source, files=400, depth=4, seed=5)
    spec = LinkSpec(rtt=0.002, rate=20e6)
    emu = LinkEmulator(openssh_peer.host, openssh_peer.port, spec)
    await emu.start()
    far = openssh_peer.behind(emu.port, tmp_path)
    out = tmp_path / "out"
    async with far.client(sshpipe.TransferConfig(retries=2)) as sp:
        task = asyncio.create_task(sp.get(far.remote("tree"), str(out), recursive=True))
        await asyncio.sleep(0.3)
        await emu.aclose()  # every reconnect is refused
        with pytest.raises(sshpipe.ConnectionBroken, match="gave up reconnecting"):
            await asyncio.wait_for(task, 60)
    assert leftover_temps(tmp_path) == []


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_a_tree_whose_reconnect_meets_a_changed_host_key_stops_with_one_line(
    openssh_peer: Peer, emulated_link: EmulatedLink, tmp_path: Path, direction: str
) -> None:
    """Every other file would meet the same key: one line, exit 7, not one line per file."""
    local = tmp_path / "local"
    local.mkdir()
    source = (openssh_peer.root if direction == "get" else local) / "tree"
    make_tree(source, files=300, depth=3, seed=5)
    # 8 Mbit/s: a few seconds for the tree, so the cut lands in the middle of it.
    async with emulated_link(openssh_peer, LinkSpec(rtt=0.002, rate=8e6)) as (emu, far):
        if direction == "get":
            words = ["get", "-r", far.spec("tree"), str(local / "out")]
            landed = local / "out"
        else:
            words = ["put", "-r", str(source), far.spec("out")]
            landed = openssh_peer.root / "out"
        command = asyncio.create_task(
            run_sshpipe(*far.cli_options(), "--retries", "2", *words, workdir=tmp_path)
        )
        await eventually(lambda: landed.is_dir() and len(list(landed.rglob("*"))) > 30, within=30)
        # The server's key "changes": known_hosts holds another for it now.
        other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
        label = far.known_hosts.read_text().split()[0]
        far.known_hosts.write_text(f"{label} {other}")
        emu.cut_after(0, direction="down")
        run = await command
    if direction == "get":
        assert_one_line_error(run.completed, 7, "has changed")
    else:  # and a line naming the temporary files the server kept
        assert run.returncode == 7, run.stderr
        assert "Traceback" not in run.stderr
        assert run.stderr.count("has changed") == 1, run.stderr
    assert "failed:" not in run.stderr


async def test_cancelling_a_tree_during_its_reconnect_leaves_no_task(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """The reconnect runs in the tree's task group: a cancel stops it, nothing is left."""
    source = openssh_peer.root / "tree"
    make_tree(source, files=400, depth=4, seed=5)
    spec = LinkSpec(rtt=0.002, rate=20e6)
    emu = LinkEmulator(openssh_peer.host, openssh_peer.port, spec)
    await emu.start()
    far = openssh_peer.behind(emu.port, tmp_path)
    out = tmp_path / "out"
    async with far.client(sshpipe.TransferConfig(retries=50)) as sp:
        baseline = asyncio.all_tasks()
        task = asyncio.create_task(sp.get(far.remote("tree"), str(out), recursive=True))
        await asyncio.sleep(0.3)
        await emu.aclose()  # every reconnect is refused, and retried for a long while
        async with asyncio.timeout(30):
            while not any(_runs(t, "Recovery._heal") for t in asyncio.all_tasks()):
                assert not task.done()
                await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            async with asyncio.timeout(10):  # a reconnect not stopped would go on retrying
                await task
        left = [t for t in asyncio.all_tasks() - baseline if _in_sshpipe(t)]
        assert left == []
    assert leftover_temps(tmp_path) == []


def _runs(task: asyncio.Task[object], qualname: str) -> bool:
    return getattr(task.get_coro(), "__qualname__", None) == qualname


def _in_sshpipe(task: asyncio.Task[object]) -> bool:
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and code.co_filename.startswith(os.path.dirname(sshpipe.__file__))
