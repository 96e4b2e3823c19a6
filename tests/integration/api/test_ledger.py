"""Nothing left behind: every temporary file is removed or in the ledger, and swept.

Against the real sshd, behind the link emulator where a copy must be cut or
killed mid-way:

- a put whose reconnect fails (sshd gone for good, or back with another host
  key) says why, exit 5 or 7, never 70; the count of temporary files it says
  it left brackets what is on the server, every one of them is in the
  ledger, and the next upload to the server leaves none;
- a copy killed with SIGKILL (get, put, one file or a tree, no --resume)
  leaves its temporary file recorded, and the next run, or ``clean``,
  leaves none on either side;
- a put into a read-only directory made nothing and says nothing was left;
- a name of 255 bytes (NAME_MAX) copies both ways, alone and in a tree;
- a record holding what cannot be one of our files (a NUL, a name of ours
  that is a link or a directory now, a name not ours) never fails an upload,
  touches none of it, and is gone after.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import sshpipe
from sshpipe.durability import ledger
from sshpipe.testing.embedded import embedded_server
from sshpipe.testing.linkemu import LinkEmulator, LinkSpec
from sshpipe.testing.restrictive import ReadOnlyMount, restricted_server
from tests.support.cli import run_cli, run_cli_async, run_sshpipe
from tests.support.files import left_counts, leftover_temps, random_file
from tests.support.peers import EmulatedLink, Peer, from_embedded
from tests.support.trees import compare_trees

MiB = 1024 * 1024
pytestmark = pytest.mark.usefixtures("state_home")


def _pending(kind: str) -> set[str]:
    """Every path the records of runs that are gone still hold (nothing changed)."""
    found: set[str] = set()
    for record in ledger.dead_records(kind):
        record.keep = True
        found |= set(record.pending)
    return found


def _records() -> list[str]:
    return sorted(os.listdir(ledger.ledger_dir()))


def _tree(root: Path, *, small: int, big: int) -> Path:
    """``small`` files of 32 KiB, half of them in three directories, and one of ``big`` bytes."""
    for i in range(small):
        path = root / f"d{i % 3}" / f"f{i:02}.bin" if i % 2 else root / f"f{i:02}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        random_file(path, 32 * 1024)
    random_file(root / "big.bin", big)
    return root


def _closed_port() -> int:
    """A loopback port nothing listens on (the server is gone)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _carried(emu: LinkEmulator, direction: str, nbytes: int) -> None:
    """Until the link has carried ``nbytes`` in ``direction`` ("up": client to server)."""
    async with asyncio.timeout(30):
        while True:  # the emulator has no event for "so many bytes carried"
            stats = emu.stats
            if (stats.bytes_up if direction == "up" else stats.bytes_down) >= nbytes:
                return
            await asyncio.sleep(0.01)


def _lines(stderr: str) -> tuple[list[str], list[str]]:
    """stderr's lines: (about temporary files left, the others); never a traceback."""
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert all(line.startswith("sshpipe: ") for line in lines), stderr
    temps = [line for line in lines if "temporary file(s)" in line]
    return temps, [line for line in lines if line not in temps]


# -- a put whose reconnect fails --------------------------------------------------------


def _source(tmp_path: Path, tree: bool) -> Path:
    if tree:
        return _tree(tmp_path / "src", small=60, big=6 * MiB)
    source = tmp_path / "src.bin"
    random_file(source, 6 * MiB)
    return source


@pytest.mark.parametrize("tree", [False, True], ids=["file", "tree"])
@pytest.mark.parametrize("after", ["server-gone", "new-host-key"])
async def test_a_put_that_cannot_reconnect_says_why_and_counts_what_it_left(
    openssh_peer: Peer, emulated_link: EmulatedLink, tmp_path: Path, tree: bool, after: str
) -> None:
    source = _source(tmp_path, tree)
    small = random_file(tmp_path / "small.bin", 1000)
    async with (
        emulated_link(openssh_peer, LinkSpec(rtt=0.004, rate=40e6)) as (emu, far),
        embedded_server(tmp_path / "other") as other,
    ):
        options = [*far.cli_options(), "--retries", "1", "--stall-timeout", "3"]
        recursive = ["-r"] if tree else []
        put = asyncio.ensure_future(
            run_sshpipe("put", *recursive, *options, str(source), far.spec("dst"), limit=60)
        )
        await _carried(emu, "up", MiB)
        # Every later connection goes to nothing, or to a server with another host key.
        emu.target_port = other.port if after == "new-host-key" else _closed_port()
        emu.cut_after(0)
        first = (await put).completed
        assert first.returncode == (7 if after == "new-host-key" else 5), first.stderr
        said, errors = _lines(first.stderr)
        assert len(errors) == 1 if not tree else errors, first.stderr  # why, in one line
        on_server = leftover_temps(openssh_peer.root)
        if on_server:  # counted exactly, and every one of them recorded for the next run
            (line,) = said
            there, maybe = left_counts(line)
            assert there <= len(on_server) <= there + maybe, first.stderr
            assert set(on_server) <= _pending("remote")
        else:
            assert said == [] or left_counts(said[0])[0] == 0, first.stderr

        emu.target_port = openssh_peer.port  # sshd is back: the next upload to it sweeps
        async with far.client() as client:
            if tree:  # the same tree again, no --resume: into what the first run made
                await client.put(str(source), far.remote("dst"), recursive=True)
            await client.put(str(tmp_path / "small.bin"), far.remote("x"))
    assert (openssh_peer.root / "x").read_bytes() == small
    if tree:
        assert compare_trees(source, openssh_peer.root / "dst" / "src") == []
    assert leftover_temps(openssh_peer.root) == []
    assert _records() == []


# -- copies killed outright ---------------------------------------------------------------


KILLED = [
    ("get", False, "next-run"),
    ("get", False, "clean"),
    ("put", False, "next-run"),
    ("put", False, "clean"),
    ("get", True, "next-run"),
    ("put", True, "next-run"),
]


@pytest.mark.parametrize(("direction", "tree", "then"), KILLED)
async def test_a_killed_copy_leaves_nothing_once_the_next_run_or_clean_has_run(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path, direction: str, tree: bool, then: str
) -> None:
    peer, emu = slow_link
    here, there = tmp_path / "here", peer.root
    here.mkdir()
    if direction == "get":
        source, target, data_flows = there / "src", here / "dst", "down"
        remote_args = [peer.spec("src"), str(target)]
    else:
        source, target, data_flows = here / "src", there / "dst", "up"
        remote_args = [str(source), peer.spec("dst")]
    if tree:
        _tree(source, small=40, big=6 * MiB)
    else:
        random_file(source, 6 * MiB)
    # Killed at a seeded point: past the first MiB, before the last.
    at = random.Random(f"{direction}-{tree}-{then}").randint(MiB, 4 * MiB)
    argv = [direction, *(["-r"] if tree else []), "-q", *peer.cli_options(), *remote_args]
    env = {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "sshpipe", *argv, env=env)
    try:
        await _carried(emu, data_flows, at)
        written = target.parent if not tree else target
        async with asyncio.timeout(30):
            while not leftover_temps(written):  # noqa: ASYNC110 (polling the disk)
                await asyncio.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the copy ended before it could be killed"
    left = leftover_temps(here) if direction == "get" else leftover_temps(there)
    assert left and set(left) <= _pending("local" if direction == "get" else "remote")

    if then == "clean":
        host = [] if direction == "get" else [*peer.cli_options(), f"{peer.user}@{peer.host}"]
        done = await run_cli_async("clean", *host)
        assert done.returncode == 0, done.stderr
        assert f"removed {len(left)} temporary file(s)" in done.stdout, done.stdout
    else:  # the same command, without --resume (a tree lands inside what the first made)
        done = await run_cli_async(*argv)
        assert done.returncode == 0, done.stderr
        copied = (target / "src") if tree else target
        assert (
            compare_trees(source, copied) == []
            if tree
            else copied.read_bytes() == source.read_bytes()
        )
    assert leftover_temps(here) == [] and leftover_temps(there) == []
    assert _records() == []


# -- a read-only directory ------------------------------------------------------------------


async def test_a_put_into_a_read_only_directory_made_nothing_and_says_so(tmp_path: Path) -> None:
    """EROFS: the OPEN is refused, and so would be a REMOVE of what was never made."""
    cap = ReadOnlyMount("/ro")
    source = tmp_path / "f.bin"
    random_file(source, 100_000)
    tree = _tree(tmp_path / "t", small=6, big=2 * MiB)
    async with restricted_server(tmp_path / "server", cap) as server:
        # Its directories there already (a MKDIR would be refused first): files are refused.
        shutil.copytree(
            tree,
            server.root / "ro" / "t",
            ignore=lambda d, names: [n for n in names if (Path(d) / n).is_file()],
        )
        peer = from_embedded(server)
        one = await run_cli_async("put", *peer.cli_options(), str(source), peer.spec("ro/f.bin"))
        many = await run_cli_async("put", "-r", *peer.cli_options(), str(tree), peer.spec("ro"))
    for done in (one, many):
        assert done.returncode == 4, done.stderr
        said, errors = _lines(done.stderr)
        assert said == [] and errors, done.stderr
    assert cap.refused["open"] > 0 and cap.refused["remove"] == 0  # nothing to remove: not asked
    assert _records() == []


@contextlib.contextmanager
def _read_only_mount(directory: Path) -> Iterator[None]:
    """``directory`` bind-mounted read-only on itself for the block (root, CAP_SYS_ADMIN)."""
    mounted = subprocess.run(
        ["mount", "--bind", str(directory), str(directory)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"no bind mount here: {mounted.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(directory)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(directory)], check=True)


@pytest.mark.usefixtures("needs_root")
def test_a_put_onto_a_read_only_mount_of_sshd_says_nothing_was_left(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """The same on a real read-only bind mount (OpenSSH answers FAILURE for EROFS)."""
    ro = openssh_peer.root / "ro"
    ro.mkdir()
    source = tmp_path / "f.bin"
    random_file(source, 100_000)
    with _read_only_mount(ro):
        done = run_cli("put", *openssh_peer.cli_options(), str(source), openssh_peer.spec("ro/"))
    assert done.returncode == 4, done.stderr
    said, errors = _lines(done.stderr)
    assert said == [] and len(errors) == 1, done.stderr
    assert _records() == []


# -- names of 255 bytes -------------------------------------------------------------------------

LONG = "é" * 127 + "x"  # 255 bytes: the temporary name beside it would be 279


async def test_a_255_byte_name_is_copied_both_ways_alone_in_a_tree_and_resumed(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    assert len(LONG.encode()) == 255
    data = random_file(tmp_path / LONG, 300_000)
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    random_file(tree / LONG, 5000)  # a small file: the tree's own path
    random_file(tree / "sub" / LONG, 3 * MiB)  # a big one: the single-file engine
    got = tmp_path / "got"
    got.mkdir()
    async with openssh_peer.client() as client:
        await client.put(str(tmp_path / LONG), openssh_peer.remote(""))
        await client.get(openssh_peer.remote(LONG), str(got))
        await client.put(str(tree), openssh_peer.remote("tree"), recursive=True)
        await client.get(openssh_peer.remote("tree"), str(got / "tree"), recursive=True)
        resumed = sshpipe.TransferConfig(resume=True)
        await client.put(
            str(tmp_path / LONG), openssh_peer.remote("r-" + LONG[:-2]), config=resumed
        )
        await client.get(openssh_peer.remote(LONG), str(got / "r"), config=resumed)
    assert (openssh_peer.root / LONG).read_bytes() == data == (got / LONG).read_bytes()
    assert compare_trees(tree, openssh_peer.root / "tree") == []
    assert compare_trees(tree, got / "tree") == []
    assert (got / "r").read_bytes() == data
    assert leftover_temps(openssh_peer.root, tmp_path) == []
    assert not [p for p in (*openssh_peer.root.rglob("*"), *got.rglob("*")) if ".sshpipe" in p.name]


# -- records that hold what cannot be swept -------------------------------------------------


def _dead_record(place: str, paths: list[str]) -> None:
    """A record as a killed run leaves it, holding ``paths`` whatever they are.

    A run enters only names that can be ours; an older one's record, or a
    damaged one, may hold anything: those are appended by hand.
    """
    before = set(ledger.ledger_dir().glob("*.ledger"))
    record = ledger.RecordFile("remote", lambda: place)
    record.add(paths[0])
    record.close()  # let go with an entry: a run that is gone
    (path,) = set(ledger.ledger_dir().glob("*.ledger")) - before
    with path.open("a") as out:
        out.writelines(json.dumps(["+", other]) + "\n" for other in paths[1:])


async def test_a_record_of_what_cannot_be_swept_never_fails_an_upload_and_goes(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    root = openssh_peer.root
    ours = root / ".a.bin.sshpipe-0a1b2c.partial"
    ours.write_bytes(b"cut off")
    victim = tmp_path / "victim"
    victim.write_bytes(b"not ours")
    linked = root / ".l.sshpipe-0a1b2c.partial"  # our shape, a link now
    linked.symlink_to(victim)
    a_dir = root / ".d.sshpipe-0a1b2c.partial"  # our shape, a directory now
    a_dir.mkdir()
    theirs = root / "data.bin"  # not our shape
    theirs.write_bytes(b"theirs")
    nul = str(root / ".n\x00.sshpipe-0a1b2c.partial")
    place = f"{openssh_peer.user}@{openssh_peer.host}:{openssh_peer.port}"
    _dead_record(place, [str(ours), str(linked), str(a_dir), str(theirs), nul])
    # And the record of an older sshpipe, the entry that made every put fail (exit 5).
    legacy = ledger.ledger_dir().parent / "leftover"
    legacy.mkdir()
    (legacy / "old.json").write_text(json.dumps({"peer": place, "paths": [nul]}))
    random_file(tmp_path / "up.bin", 1000)
    done = await run_cli_async(
        "put", *openssh_peer.cli_options(), str(tmp_path / "up.bin"), openssh_peer.spec("up.bin")
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert not ours.exists()
    assert linked.is_symlink() and victim.read_bytes() == b"not ours"
    assert a_dir.is_dir() and theirs.read_bytes() == b"theirs"
    assert _records() == [] and not any(legacy.iterdir())


# -- clean without a host ----------------------------------------------------------------


async def test_clean_here_removes_this_machines_and_lists_the_servers_pending(
    tmp_path: Path,
) -> None:
    left = tmp_path / ".got.bin.sshpipe-0a1b2c.partial"
    left.write_bytes(b"cut off")
    local = ledger.RecordFile("local", lambda: socket.gethostname())
    local.add(str(left))
    local.close()  # as a run killed mid-download leaves it
    _dead_record("me@example.org:2222", ["/srv/.x.sshpipe-0a1b2c.partial"])
    dry = await run_cli_async("clean", "--dry-run")
    assert dry.returncode == 0 and dry.stderr == "", dry.stderr
    assert dry.stdout.splitlines() == [
        str(left),
        "1 temporary file(s) to remove on this machine",
        "me@example.org:2222: 1 temporary file(s) recorded "
        "(clean -P 2222 me@example.org removes them)",
    ]
    assert left.exists() and len(_records()) == 2  # a dry run changes nothing
    done = await run_cli_async("clean")
    assert done.returncode == 0 and done.stdout.startswith("removed 1 temporary file(s)")
    assert not left.exists() and len(_records()) == 1  # the server's waits for it
