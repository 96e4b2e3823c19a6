"""Recursive directory-tree transfers (issue 4), against the spec in .git/notes/tree-spec.md.

Peers: the real OpenSSH sshd and asyncssh's in-process server. asyncssh 2.24's
chrooted readlink cannot serve a relative link's text (see
``sshpipe.testing.hostile``), so tree tests use a subclass that serves it as stored;
symlink *creation* goes to the stock code, whose argument order differs from
OpenSSH's (the client must send each server its own order).

The 2,000-file tree is generated once per module; the other tests use small trees.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import stat
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sshpipe
import sshpipe.transfer.progress
from sshpipe.testing.faults import Slow, Tracker, factory
from sshpipe.testing.hostile import (
    HOSTILE_DIR,
    HOSTILE_ENTRIES,
    MARKER,
    NORMAL_FILES,
    Recorder,
    denies_open,
    hostile_listing,
    populate_hostile,
)
from tests.support.cli import assert_one_line_error, run_cli, run_cli_async
from tests.support.files import leftover_temps
from tests.support.peers import Peer, StartServer
from tests.support.trees import (
    GeneratedTree,
    compare_trees,
    make_small_tree,
    make_tree,
    set_times,
    snapshot,
    summarize,
)

NOT_ROOT = pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads chmod 000 files; covered by the ordinary-user run"
)
# A transfer that would hang (a FIFO opened for reading) must fail the test, not the run.
HANG_GUARD = 30.0


# -- fixtures and helpers ----------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> GeneratedTree:
    """The big tree: ~2,000 files, depth 5, built once (read-only for the tests)."""
    return make_tree(tmp_path_factory.mktemp("generated") / "src")


def assert_same(expected: Path, actual: Path, **options: Any) -> None:
    diffs = compare_trees(expected, actual, **options)
    assert diffs == [], summarize(diffs)


def failures_of(error: BaseException) -> list[Any]:
    failures = list(error.failures)  # type: ignore[attr-defined]
    assert failures == list(error.stats.failures)  # type: ignore[attr-defined]
    return failures


def describe(failures: list[Any]) -> str:
    return "\n".join(f"{f.path!r}: {f.error!r} ({f.exit_code})" for f in failures)


def assert_clean_failure_output(result: subprocess.CompletedProcess[str]) -> list[str]:
    """No traceback, every stderr line is sshpipe's; returns the ``failed:`` lines."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines, "no error message"
    assert all(line.startswith("sshpipe: ") for line in lines), result.stderr
    failed = [line for line in lines if line.startswith("sshpipe: failed: ")]
    # One line per failure and the summary once: no failure's text repeated in it.
    for line in failed:
        text = line.removeprefix("sshpipe: failed: ")
        assert sum(text in other for other in lines) == 1, result.stderr
    assert sum(" entries failed" in line for line in lines) == 1, result.stderr
    return failed


def make_files(root: Path, count: int, size: int) -> dict[str, bytes]:
    """``count`` files of ``size`` bytes spread over three subdirectories."""
    files = {f"d{i % 3}/f{i:03}.bin": os.urandom(size) for i in range(count)}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


@contextlib.contextmanager
def unblocking(fifo: Path) -> Iterator[None]:
    """Whatever happens, release a reader stuck in open() on ``fifo`` (a client bug
    would otherwise leave a thread or an sftp-server blocked for ever)."""
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


# -- round trip of the big tree ----------------------------------------------------


async def test_round_trip_of_the_generated_tree_with_preserve(
    tree_peer: Peer, generated: GeneratedTree, tmp_path: Path
) -> None:
    remote_copy = tree_peer.root / "up"
    async with tree_peer.client() as sp:
        up = await sp.put(
            str(generated.root), tree_peer.remote("up"), recursive=True, preserve=True
        )
        assert_same(generated.root, remote_copy, modes=True, mtimes=True)
        down = await sp.get(
            tree_peer.remote("up"), str(tmp_path / "down"), recursive=True, preserve=True
        )
    assert_same(generated.root, tmp_path / "down", modes=True, mtimes=True)
    for stats in (up, down):
        assert isinstance(stats, sshpipe.TreeStats)
        assert (stats.files, stats.files_done, stats.files_failed) == (generated.files,) * 2 + (0,)
        assert stats.symlinks == generated.symlinks
        assert stats.bytes == generated.bytes
        assert stats.skipped == 0
        assert tuple(stats.failures) == ()
        # Whether the top directory itself is counted is not specified.
        assert stats.directories in (generated.directories, generated.directories + 1)
        assert stats.seconds > 0
        assert stats.throughput == pytest.approx(stats.bytes / stats.seconds, rel=0.01)
        assert stats.files_per_second == pytest.approx(stats.files / stats.seconds, rel=0.01)
        as_dict = stats.as_dict()
        assert as_dict["files"] == generated.files and as_dict["failures"] in ([], ())
    assert leftover_temps(tmp_path, tree_peer.root) == []


def test_cli_round_trip_of_the_generated_tree_with_p(
    openssh_peer: Peer, generated: GeneratedTree, tmp_path: Path
) -> None:
    options = openssh_peer.cli_options()
    put = run_cli(
        "put", "-r", "-p", "-q", *options, str(generated.root), openssh_peer.spec("cli-up")
    )
    assert put.returncode == 0, put.stderr
    assert (put.stdout, put.stderr) == ("", "")
    assert_same(generated.root, openssh_peer.root / "cli-up", modes=True, mtimes=True)
    got = run_cli(
        "get", "-r", "-p", *options, openssh_peer.spec("cli-up"), str(tmp_path / "cli-down")
    )
    assert got.returncode == 0, got.stderr
    assert got.stderr == ""
    assert_same(generated.root, tmp_path / "cli-down", modes=True, mtimes=True)
    assert leftover_temps(tmp_path, openssh_peer.root) == []


async def test_without_preserve_times_are_now_and_modes_are_masked(
    tree_peer: Peer, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    make_small_tree(src)
    (src / "a.txt").chmod(0o600)  # private stays private
    (src / "sub" / "b.bin").chmod(0o755)
    (src / "sub").chmod(0o700)
    set_times(src, 1_000_000_000)
    started = int(time.time()) - 2
    umask = os.umask(0o022)
    os.umask(umask)
    async with tree_peer.client() as sp:
        await sp.put(str(src), tree_peer.remote("up"), recursive=True)
        await sp.get(tree_peer.remote("up"), str(tmp_path / "down"), recursive=True)
    assert_same(src, tree_peer.root / "up")  # content, types and link targets
    assert_same(src, tmp_path / "down")
    want = snapshot(src)
    for copy in (tree_peer.root / "up", tmp_path / "down"):
        got = snapshot(copy)
        for path, entry in want.items():
            if entry.kind in ("file", "dir"):
                assert got[path].mtime >= started, f"{copy}: {path} kept its old mtime"
                # The server's umask may differ from ours, but never adds bits.
                assert got[path].mode & ~entry.mode == 0, f"{copy}: {path} {got[path].mode:#o}"
    local = snapshot(tmp_path / "down")
    for path, entry in snapshot(tree_peer.root / "up").items():
        if entry.kind in ("file", "dir") and path != ".":
            assert local[path].mode == entry.mode & ~umask, path


# -- scp layout rules ---------------------------------------------------------------


async def test_put_layout_follows_scp(tree_peer: Peer, tmp_path: Path) -> None:
    src = tmp_path / "proj"
    make_small_tree(src)
    single = tmp_path / "single.txt"
    single.write_bytes(b"single\n")
    for name in ("existing", "existing-slash", "multi"):
        (tree_peer.root / name).mkdir()
    async with tree_peer.client() as sp:
        # Into an existing directory: proj/ is created inside it.
        await sp.put(str(src), tree_peer.remote("existing"), recursive=True)
        # Into a new name: that name is the copy.
        await sp.put(str(src), tree_peer.remote("fresh"), recursive=True)
        # A trailing slash on the source changes nothing (scp, not rsync).
        await sp.put(str(src) + "/", tree_peer.remote("existing-slash"), recursive=True)
        # Several sources go into an existing directory...
        stats = await sp.put([str(src), str(single)], tree_peer.remote("multi"), recursive=True)
        # ...and are refused when it does not exist.
        with pytest.raises(sshpipe.SSHPipeError):
            await sp.put([str(src), str(single)], tree_peer.remote("nowhere"), recursive=True)
        # recursive with a single file copies that file, scp -r style.
        one = await sp.put(str(single), tree_peer.remote("existing"), recursive=True)
    assert_same(src, tree_peer.root / "existing" / "proj", include_root=False)
    assert_same(src, tree_peer.root / "fresh", include_root=False)
    assert sorted(os.listdir(tree_peer.root / "existing-slash")) == ["proj"]
    assert_same(src, tree_peer.root / "existing-slash" / "proj", include_root=False)
    assert sorted(os.listdir(tree_peer.root / "multi")) == ["proj", "single.txt"]
    assert_same(src, tree_peer.root / "multi" / "proj", include_root=False)
    assert (tree_peer.root / "multi" / "single.txt").read_bytes() == b"single\n"
    assert isinstance(stats, sshpipe.TreeStats) and stats.files == 5
    assert not (tree_peer.root / "nowhere").exists()
    assert (tree_peer.root / "existing" / "single.txt").read_bytes() == b"single\n"
    assert isinstance(one, sshpipe.TreeStats) and one.files == 1
    assert leftover_temps(tree_peer.root) == []


async def test_get_never_writes_through_a_local_symlink_but_into_the_named_destination(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """A symlink where a directory goes (left by an earlier hostile run) is refused, not
    entered; the destination the user named may be one (it is theirs)."""
    src = openssh_peer.root / "proj"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "x.txt").write_bytes(b"x\n")
    (src / "top.txt").write_bytes(b"top\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    trap = tmp_path / "trap"
    (trap / "proj").mkdir(parents=True)
    (trap / "proj" / "sub").symlink_to(outside)  # where the remote directory "sub" would go
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "named").symlink_to(real)
    async with openssh_peer.client() as sp:
        with pytest.raises(sshpipe.IncompleteTransfer) as caught:
            await sp.get(openssh_peer.remote("proj"), str(trap), recursive=True)
        await sp.get(openssh_peer.remote("proj"), str(tmp_path / "named"), recursive=True)
    assert [f.path for f in caught.value.failures] == [openssh_peer.remote("proj/sub")]
    assert "symbolic link" in caught.value.failures[0].error
    assert os.listdir(outside) == []  # nothing written through the link
    assert (trap / "proj" / "top.txt").read_bytes() == b"top\n"  # the rest was copied
    assert (real / "proj" / "sub" / "x.txt").read_bytes() == b"x\n"


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_two_sources_landing_in_one_place_are_refused(
    tree_peer: Peer, tmp_path: Path, direction: str
) -> None:
    """a/x and b/x into one directory: one would overwrite the other (or both race)."""
    here, there = tmp_path / "local", tree_peer.root / "remote"
    for side in (here, there):
        for parent in ("a", "b"):
            (side / parent / "x").mkdir(parents=True)
            (side / parent / "x" / "f.txt").write_bytes(parent.encode())
    (here / "out").mkdir()
    (there / "out").mkdir()
    async with tree_peer.client() as sp:
        with pytest.raises(sshpipe.UsageError, match="would both be copied to"):
            if direction == "put":
                sources = [str(here / "a" / "x"), str(here / "b" / "x")]
                await sp.put(sources, tree_peer.remote("remote/out"), recursive=True)
            else:
                sources = [tree_peer.remote("remote/a/x"), tree_peer.remote("remote/b/x")]
                await sp.get(sources, str(here / "out"), recursive=True)
    assert list((here / "out").iterdir()) == [] and list((there / "out").iterdir()) == []


async def test_get_layout_follows_scp(tree_peer: Peer, tmp_path: Path) -> None:
    src = tree_peer.root / "proj"
    make_small_tree(src)
    (tree_peer.root / "single.txt").write_bytes(b"single\n")
    for name in ("existing", "existing-slash", "multi"):
        (tmp_path / name).mkdir()
    remote = tree_peer.remote
    async with tree_peer.client() as sp:
        await sp.get(remote("proj"), str(tmp_path / "existing"), recursive=True)
        await sp.get(remote("proj"), str(tmp_path / "fresh"), recursive=True)
        await sp.get(remote("proj") + "/", str(tmp_path / "existing-slash"), recursive=True)
        stats = await sp.get(
            [remote("proj"), remote("single.txt")], str(tmp_path / "multi"), recursive=True
        )
        with pytest.raises(sshpipe.SSHPipeError):
            await sp.get(
                [remote("proj"), remote("single.txt")], str(tmp_path / "nowhere"), recursive=True
            )
        one = await sp.get(remote("single.txt"), str(tmp_path / "existing"), recursive=True)
    assert_same(src, tmp_path / "existing" / "proj", include_root=False)
    assert_same(src, tmp_path / "fresh", include_root=False)
    assert sorted(os.listdir(tmp_path / "existing-slash")) == ["proj"]
    assert_same(src, tmp_path / "existing-slash" / "proj", include_root=False)
    assert sorted(os.listdir(tmp_path / "multi")) == ["proj", "single.txt"]
    assert_same(src, tmp_path / "multi" / "proj", include_root=False)
    assert (tmp_path / "multi" / "single.txt").read_bytes() == b"single\n"
    assert isinstance(stats, sshpipe.TreeStats) and stats.files == 5
    assert not (tmp_path / "nowhere").exists()
    assert (tmp_path / "existing" / "single.txt").read_bytes() == b"single\n"
    assert isinstance(one, sshpipe.TreeStats) and one.files == 1
    assert leftover_temps(tmp_path) == []


async def test_single_file_without_recursive_still_returns_transfer_stats(
    tree_peer: Peer, tmp_path: Path
) -> None:
    (tree_peer.root / "f.txt").write_bytes(b"x" * 1000)
    (tree_peer.root / "f.txt").chmod(0o640)
    os.utime(tree_peer.root / "f.txt", (1_000_000_000, 1_000_000_000))
    async with tree_peer.client() as sp:
        stats = await sp.get(tree_peer.remote("f.txt"), str(tmp_path / "f.txt"), preserve=True)
    assert isinstance(stats, sshpipe.TransferStats)
    assert (stats.bytes, stats.requests > 0) == (1000, True)  # the engine's own counters
    st = os.stat(tmp_path / "f.txt")
    assert (stat.S_IMODE(st.st_mode), int(st.st_mtime)) == (0o640, 1_000_000_000)
    # And back up, into a directory (scp: it keeps its name there), with -p.
    (tmp_path / "f.txt").chmod(0o604)
    os.utime(tmp_path / "f.txt", (1_100_000_000, 1_100_000_000))
    (tree_peer.root / "up").mkdir()
    async with tree_peer.client() as sp:
        stats = await sp.put(str(tmp_path / "f.txt"), tree_peer.remote("up"), preserve=True)
    assert isinstance(stats, sshpipe.TransferStats)
    st = os.stat(tree_peer.root / "up" / "f.txt")
    assert (stat.S_IMODE(st.st_mode), int(st.st_mtime)) == (0o604, 1_100_000_000)


def test_cli_several_sources_need_an_existing_directory(openssh_peer: Peer, tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_bytes(name.encode())
    options = openssh_peer.cli_options()
    sources = [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    result = run_cli("put", *options, *sources, openssh_peer.spec("missing-dir"))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (openssh_peer.root / "missing-dir").exists()
    (openssh_peer.root / "dir").mkdir()
    result = run_cli("put", "-q", *options, *sources, openssh_peer.spec("dir"))
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(openssh_peer.root / "dir")) == ["a.txt", "b.txt"]
    # A directory source without -r is refused, as scp does.
    (tmp_path / "adir").mkdir()
    result = run_cli("put", *options, str(tmp_path / "adir"), openssh_peer.spec("dir"))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert not (openssh_peer.root / "dir" / "adir").exists()


# -- symlinks, special files, empty directories -------------------------------------


@pytest.mark.parametrize("direction", ["put", "get"])
async def test_symlinks_recreated_by_default_followed_with_follow_symlinks(
    tree_peer: Peer, tmp_path: Path, direction: str
) -> None:
    local_src = tmp_path / "src"
    if direction == "put":
        make_small_tree(local_src)
        src = local_src
    else:
        src = tree_peer.root / "src"
        make_small_tree(src)
    copies = {}
    async with tree_peer.client() as sp:
        for follow in (False, True):
            name = f"copy-{follow}"
            if direction == "put":
                stats = await sp.put(
                    str(src), tree_peer.remote(name), recursive=True, follow_symlinks=follow
                )
                copies[follow] = tree_peer.root / name
            else:
                stats = await sp.get(
                    tree_peer.remote("src"),
                    str(tmp_path / name),
                    recursive=True,
                    follow_symlinks=follow,
                )
                copies[follow] = tmp_path / name
            assert stats.symlinks == (0 if follow else 2)
    assert_same(src, copies[False])
    assert os.readlink(copies[False] / "link-file") == "a.txt"
    assert os.readlink(copies[False] / "link-dir") == "sub"
    # -L: the link to a file is a file, the link to a directory a real directory.
    assert_same(src, copies[True], follow_symlinks=True)
    assert stat.S_ISREG(os.lstat(copies[True] / "link-file").st_mode)
    assert stat.S_ISDIR(os.lstat(copies[True] / "link-dir").st_mode)
    assert (copies[True] / "link-dir" / "b.bin").read_bytes() == (
        src / "sub" / "b.bin"
    ).read_bytes()


@pytest.mark.parametrize("direction", ["put", "get"])
async def test_following_a_link_to_an_ancestor_does_not_loop(
    tree_peer: Peer, tmp_path: Path, direction: str
) -> None:
    base = tmp_path if direction == "put" else tree_peer.root
    src = base / "src"
    files = make_small_tree(src, links=False)
    (src / "sub" / "deeper" / "back to top").symlink_to("../..")
    async with tree_peer.client() as sp:
        # How the loop is reported is not specified (skipped or a failure); that it
        # ends, and copies everything else, is.
        with contextlib.suppress(sshpipe.IncompleteTransfer):
            if direction == "put":
                job = sp.put(
                    str(src), tree_peer.remote("out"), recursive=True, follow_symlinks=True
                )
            else:
                job = sp.get(
                    tree_peer.remote("src"),
                    str(tmp_path / "out"),
                    recursive=True,
                    follow_symlinks=True,
                )
            await asyncio.wait_for(job, HANG_GUARD)
    out = (tree_peer.root if direction == "put" else tmp_path) / "out"
    for rel, data in files.items():
        assert (out / rel).read_bytes() == data
    copied = snapshot(out)
    assert max(path.count("/") for path in copied) <= 3, sorted(copied)


def test_cli_follows_symlinks_with_L(openssh_peer: Peer, tmp_path: Path) -> None:
    src = openssh_peer.root / "src"
    make_small_tree(src)
    result = run_cli(
        "get",
        "-r",
        "-L",
        "-q",
        *openssh_peer.cli_options(),
        openssh_peer.spec("src"),
        str(tmp_path / "out"),
    )
    assert result.returncode == 0, result.stderr
    assert_same(src, tmp_path / "out", follow_symlinks=True)
    result = run_cli(
        "get",
        "-r",
        "-q",
        *openssh_peer.cli_options(),
        openssh_peer.spec("src"),
        str(tmp_path / "links"),
    )
    assert result.returncode == 0, result.stderr
    assert_same(src, tmp_path / "links")


def _warned_about(name: str, caplog: pytest.LogCaptureFixture, caught: list[Any]) -> bool:
    texts = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    texts += [str(w.message) for w in caught]
    return any(name in text for text in texts)


async def test_local_fifo_is_skipped_with_a_warning_on_put(
    tree_peer: Peer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "src"
    make_small_tree(src, links=False)
    os.mkfifo(src / "sub" / "a pipe")
    with (
        unblocking(src / "sub" / "a pipe"),
        caplog.at_level(logging.WARNING),
        warnings.catch_warnings(record=True) as caught,
    ):
        warnings.simplefilter("always")
        async with tree_peer.client() as sp:
            stats = await asyncio.wait_for(
                sp.put(str(src), tree_peer.remote("up"), recursive=True), HANG_GUARD
            )
    assert stats.skipped == 1
    assert stats.files == stats.files_done == 4
    assert compare_trees(src, tree_peer.root / "up") == ["missing: 'sub/a pipe' (other)"]
    assert _warned_about("a pipe", caplog, caught), caplog.text
    assert leftover_temps(tree_peer.root) == []


async def test_remote_fifo_is_skipped_on_get_without_hanging_the_server(
    openssh_peer: Peer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # sshd only: opening the FIFO in the in-process server would block the test's own loop.
    src = openssh_peer.root / "src"
    make_small_tree(src, links=False)
    os.mkfifo(src / "a pipe")
    with unblocking(src / "a pipe"), caplog.at_level(logging.WARNING):
        async with openssh_peer.client() as sp:
            stats = await asyncio.wait_for(
                sp.get(openssh_peer.remote("src"), str(tmp_path / "out"), recursive=True),
                HANG_GUARD,
            )
    assert stats.skipped == 1
    assert compare_trees(src, tmp_path / "out") == ["missing: 'a pipe' (other)"]
    assert _warned_about("a pipe", caplog, [])


def test_cli_warns_about_a_skipped_fifo(openssh_peer: Peer, tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_small_tree(src, links=False)
    os.mkfifo(src / "a pipe")
    with unblocking(src / "a pipe"):
        result = run_cli(
            "put",
            "-r",
            "-q",
            *openssh_peer.cli_options(),
            str(src),
            openssh_peer.spec("up"),
        )
    # A skipped special file is a warning, not a failure.
    assert result.returncode == 0, result.stderr
    assert "a pipe" in result.stderr
    assert "Traceback" not in result.stderr
    assert compare_trees(src, openssh_peer.root / "up") == ["missing: 'a pipe' (other)"]


async def test_empty_directories_are_created(tree_peer: Peer, tmp_path: Path) -> None:
    src = tmp_path / "src"
    for rel in ("e1/e2/e3", "e4", "with files/e5"):
        (src / rel).mkdir(parents=True)
    (src / "with files" / "f").write_bytes(b"f")
    async with tree_peer.client() as sp:
        up = await sp.put(str(src), tree_peer.remote("up"), recursive=True)
        down = await sp.get(tree_peer.remote("up"), str(tmp_path / "down"), recursive=True)
    assert_same(src, tree_peer.root / "up")
    assert_same(src, tmp_path / "down")
    assert up.files == down.files == 1
    assert up.directories in (6, 7) and down.directories in (6, 7)
    # Only empty directories, nothing else: still a copy.
    (src / "with files" / "f").unlink()
    async with tree_peer.client() as sp:
        await sp.put(str(src), tree_peer.remote("up2"), recursive=True)
    assert_same(src, tree_peer.root / "up2")


# -- partial failure ----------------------------------------------------------------


def _tree_with_locked_file(root: Path) -> dict[str, bytes]:
    files = make_files(root, 24, 40_000)
    (root / "d1" / "locked.bin").write_bytes(b"secret")
    return files


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_one_failing_file_does_not_stop_the_others(
    faulty_server: StartServer, tmp_path: Path, direction: str
) -> None:
    recorder = Recorder()
    local = tmp_path / "local"
    async with faulty_server(denies_open(recorder)) as peer:
        if direction == "get":
            src, dest = peer.root / "tree", local
            files = _tree_with_locked_file(src)
        else:
            src, dest = local, peer.root / "tree"
            files = _tree_with_locked_file(src)
        async with peer.client() as sp:
            with pytest.raises(sshpipe.IncompleteTransfer) as caught:
                if direction == "get":
                    await sp.get("/tree", str(dest), recursive=True)
                else:
                    await sp.put(str(src), "/tree", recursive=True)
        assert compare_trees(src, dest) == ["missing: 'd1/locked.bin' (file)"]
        for rel, data in files.items():
            assert (dest / rel).read_bytes() == data
        assert leftover_temps(tmp_path, peer.root) == []
    error = caught.value
    failures = failures_of(error)
    assert len(failures) == 1, describe(failures)
    assert failures[0].path.endswith("d1/locked.bin")
    assert "Permission denied" in str(failures[0].error)
    assert failures[0].exit_code == 4
    assert isinstance(error, sshpipe.SSHPipeError) and error.exit_code == 4
    assert (error.stats.files, error.stats.files_done, error.stats.files_failed) == (25, 24, 1)


@NOT_ROOT
@pytest.mark.parametrize("direction", ["get", "put"])
async def test_unreadable_file_on_sshd_or_locally_fails_alone(
    openssh_peer: Peer, tmp_path: Path, direction: str
) -> None:
    if direction == "get":
        src, dest = openssh_peer.root / "tree", tmp_path / "out"
    else:
        src, dest = tmp_path / "tree", openssh_peer.root / "out"
    files = _tree_with_locked_file(src)
    (src / "d1" / "locked.bin").chmod(0)
    async with openssh_peer.client() as sp:
        with pytest.raises(sshpipe.IncompleteTransfer) as caught:
            if direction == "get":
                await sp.get(openssh_peer.remote("tree"), str(dest), recursive=True)
            else:
                await sp.put(str(src), openssh_peer.remote("out"), recursive=True)
    failures = failures_of(caught.value)
    assert len(failures) == 1, describe(failures)
    assert failures[0].path.endswith("d1/locked.bin")
    assert "Permission denied" in str(failures[0].error)
    # Remote permission denied is exit 4, local is 3.
    assert failures[0].exit_code == caught.value.exit_code == (4 if direction == "get" else 3)
    for rel, data in files.items():
        assert (dest / rel).read_bytes() == data
    assert not (dest / "d1" / "locked.bin").exists()
    assert leftover_temps(tmp_path, openssh_peer.root) == []


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_fail_fast_raises_the_first_failure_as_is(
    faulty_server: StartServer, tmp_path: Path, direction: str
) -> None:
    recorder = Recorder()
    async with faulty_server(denies_open(recorder)) as peer:
        if direction == "get":
            _tree_with_locked_file(peer.root / "tree")
        else:
            _tree_with_locked_file(tmp_path / "tree")
        async with peer.client() as sp:
            with pytest.raises(sshpipe.RemotePermissionDenied) as caught:
                if direction == "get":
                    await sp.get("/tree", str(tmp_path / "out"), recursive=True, fail_fast=True)
                else:
                    await sp.put(str(tmp_path / "tree"), "/out", recursive=True, fail_fast=True)
            assert "busy_channels=0" in repr(sp)
        assert not isinstance(caught.value, sshpipe.IncompleteTransfer)
        assert "locked.bin" in str(caught.value)
        assert leftover_temps(tmp_path, peer.root) == []


async def test_cli_partial_failure_lists_it_and_exits_with_its_code(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    recorder = Recorder()
    async with faulty_server(denies_open(recorder)) as peer:
        files = _tree_with_locked_file(peer.root / "tree")
        spec = f"{peer.user}@{peer.host}:/tree"
        result = await run_cli_async(
            "get", "-r", "-q", *peer.cli_options(), spec, str(tmp_path / "out")
        )
        assert result.returncode == 4, result.stderr
        failed = assert_clean_failure_output(result)
        assert len(failed) == 1, result.stderr
        assert "locked.bin" in failed[0] and "Permission denied" in failed[0]
        assert re.fullmatch(r"sshpipe: 1 of \d+ entries failed", result.stderr.splitlines()[-1])
        for rel, data in files.items():
            assert (tmp_path / "out" / rel).read_bytes() == data

        result = await run_cli_async(
            "get", "-r", "--fail-fast", *peer.cli_options(), spec, str(tmp_path / "ff")
        )
        assert_one_line_error(result, 4, "locked.bin", "Permission denied")

        result = await run_cli_async(
            "get", "-r", "--json", *peer.cli_options(), spec, str(tmp_path / "json")
        )
        assert result.returncode == 4, result.stderr
        report = json.loads(result.stdout)
        assert (report["files"], report["files_done"], report["files_failed"]) == (25, 24, 1)
        assert len(report["failures"]) == 1
        (failure,) = report["failures"]
        assert failure["path"].endswith("d1/locked.bin")
        assert "Permission denied" in failure["error"] and failure["exit_code"] == 4
    assert leftover_temps(tmp_path, peer.root) == []


@NOT_ROOT
def test_cli_partial_failure_on_sshd(openssh_peer: Peer, tmp_path: Path) -> None:
    files = _tree_with_locked_file(openssh_peer.root / "tree")
    (openssh_peer.root / "tree" / "d1" / "locked.bin").chmod(0)
    options = openssh_peer.cli_options()
    result = run_cli("get", "-r", *options, openssh_peer.spec("tree"), str(tmp_path / "out"))
    assert result.returncode == 4, result.stderr
    failed = assert_clean_failure_output(result)
    assert len(failed) == 1 and "locked.bin" in failed[0], result.stderr
    for rel, data in files.items():
        assert (tmp_path / "out" / rel).read_bytes() == data
    result = run_cli(
        "get", "-r", "--fail-fast", *options, openssh_peer.spec("tree"), str(tmp_path / "ff")
    )
    assert_one_line_error(result, 4, "locked.bin", "Permission denied")


# -- hostile names --------------------------------------------------------------------


def _files_containing(root: Path, needle: bytes) -> list[str]:
    found = []
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            with contextlib.suppress(OSError):
                if not os.path.islink(path) and needle in Path(path).read_bytes():
                    found.append(path)
    return found


async def test_hostile_names_in_a_listing_are_refused_and_never_written(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    recorder = Recorder()
    tmp_x = Path("/tmp/x")
    before = tmp_x.read_bytes() if tmp_x.is_file() else None
    existed = os.path.lexists(tmp_x)
    outer = tmp_path / "outer"
    outer.mkdir()
    dest = outer / "dest"
    async with faulty_server(hostile_listing(recorder)) as peer:
        populate_hostile(peer.root)
        async with peer.client() as sp:
            with pytest.raises(sshpipe.IncompleteTransfer) as caught:
                await sp.get(f"/{HOSTILE_DIR}", str(dest), recursive=True)
    failures = failures_of(caught.value)
    assert len(failures) == len(HOSTILE_ENTRIES), describe(failures)
    # TreeFailure.error is the one-line message; UnsafePath shows as its text and exit code.
    assert issubclass(sshpipe.UnsafePath, sshpipe.ProtocolError)
    for failure in failures:
        assert "unsafe name" in str(failure.error), describe(failures)
        assert failure.exit_code == sshpipe.UnsafePath.exit_code == 8
    assert caught.value.exit_code == 8
    # Nothing outside the destination, nothing under a hostile name inside it.
    assert sorted(os.listdir(outer)) == ["dest"]
    assert os.path.lexists(tmp_x) == existed
    if before is not None:
        assert tmp_x.read_bytes() == before
    assert _files_containing(tmp_path, MARKER) == []
    copied = snapshot(dest)
    del copied["."]
    assert set(copied) - {"dup.txt"} == set(NORMAL_FILES), sorted(copied)
    for name, data in NORMAL_FILES.items():
        assert (dest / name).read_bytes() == data
    if "dup.txt" in copied:
        assert (dest / "dup.txt").read_bytes() == b"the real dup.txt\n"
    assert leftover_temps(tmp_path) == []


# -- globs --------------------------------------------------------------------------


def _logs(root: Path) -> None:
    logs = root / "logs"
    (logs / "sub").mkdir(parents=True)
    for name in ("a.gz", "b.gz", "c.txt", ".hidden.gz", "sub/d.gz"):
        (logs / name).write_bytes(name.encode())


async def test_glob_matches_per_component_and_skips_hidden_names(peer: Peer) -> None:
    _logs(peer.root)
    (peer.root / "logs2").mkdir()
    (peer.root / "logs2" / "e.gz").write_bytes(b"e")
    remote = peer.remote
    async with peer.client() as sp:
        assert await sp.glob(remote("logs/*.gz")) == [remote("logs/a.gz"), remote("logs/b.gz")]
        assert await sp.glob(remote("logs/.*.gz")) == [remote("logs/.hidden.gz")]
        assert await sp.glob(remote("logs/[bc].*")) == [remote("logs/b.gz"), remote("logs/c.txt")]
        assert await sp.glob(remote("log?/?.gz")) == [remote("logs/a.gz"), remote("logs/b.gz")]
        assert await sp.glob(remote("logs*/*.gz")) == [
            remote("logs/a.gz"),
            remote("logs/b.gz"),
            remote("logs2/e.gz"),
        ]
        assert await sp.glob(remote("logs/*/*.gz")) == [remote("logs/sub/d.gz")]
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.glob(remote("logs/*.nope"))


def test_cli_expands_remote_globs(openssh_peer: Peer, tmp_path: Path) -> None:
    _logs(openssh_peer.root)
    options = openssh_peer.cli_options()
    (tmp_path / "gz").mkdir()
    result = run_cli("get", "-q", *options, openssh_peer.spec("logs/*.gz"), str(tmp_path / "gz"))
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(tmp_path / "gz")) == ["a.gz", "b.gz"]
    assert (tmp_path / "gz" / "a.gz").read_bytes() == b"a.gz"
    (tmp_path / "all").mkdir()
    result = run_cli(
        "get", "-r", "-q", *options, openssh_peer.spec("logs/*"), str(tmp_path / "all")
    )
    assert result.returncode == 0, result.stderr
    assert sorted(snapshot(tmp_path / "all")) == [".", "a.gz", "b.gz", "c.txt", "sub", "sub/d.gz"]
    result = run_cli("get", *options, openssh_peer.spec("logs/*.nope"), str(tmp_path / "none"))
    assert_one_line_error(result, 4, "*.nope")
    assert not (tmp_path / "none").exists()


# -- reporting ------------------------------------------------------------------------


def test_cli_json_on_a_tree(openssh_peer: Peer, tmp_path: Path) -> None:
    src = openssh_peer.root / "proj"
    files = make_small_tree(src)
    result = run_cli(
        "get",
        "-r",
        "--json",
        *openssh_peer.cli_options(),
        openssh_peer.spec("proj"),
        str(tmp_path / "out"),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) >= {
        "source",
        "target",
        "files",
        "files_done",
        "files_failed",
        "directories",
        "symlinks",
        "skipped",
        "bytes",
        "seconds",
        "files_per_second",
        "throughput",
        "failures",
    }
    assert isinstance(report["source"], list) and len(report["source"]) == 1
    assert report["source"][0].endswith("proj")
    assert report["target"].endswith("out")
    assert (report["files"], report["files_done"], report["files_failed"]) == (4, 4, 0)
    assert (report["symlinks"], report["skipped"], report["failures"]) == (2, 0, [])
    assert report["directories"] in (4, 5)
    assert report["bytes"] == sum(len(d) for d in files.values())
    assert report["seconds"] > 0 and report["throughput"] > 0 and report["files_per_second"] > 0
    assert_same(src, tmp_path / "out")


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_progress_reaches_the_totals(
    tree_peer: Peer, tmp_path: Path, direction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = (tree_peer.root if direction == "get" else tmp_path) / "src"
    files = make_files(src, 40, 20_000)
    big = os.urandom(12 * 1024 * 1024)  # over the small files' limit: the striped engine
    (src / "big.bin").write_bytes(big)
    files["big.bin"] = big
    seen: list[Any] = []
    monkeypatch.setattr(sshpipe.transfer.progress, "INTERVAL", 0.001)
    async with tree_peer.client() as sp:
        if direction == "get":
            stats = await sp.get(
                tree_peer.remote("src"), str(tmp_path / "out"), recursive=True, progress=seen.append
            )
        else:
            stats = await sp.put(
                str(src), tree_peer.remote("out"), recursive=True, progress=seen.append
            )
    assert seen, "progress was never called"
    assert all(isinstance(p, sshpipe.TreeProgress) for p in seen)
    last = seen[-1]
    total = sum(len(d) for d in files.values())
    assert (last.files_done, last.files_total, last.scan_done) == (41, 41, True)
    assert (last.bytes_done, last.bytes_total) == (total, total)  # the big file counted once
    done = [p.files_done for p in seen]
    assert done == sorted(done), "files_done went backwards"
    moved = [p.bytes_done for p in seen]
    assert moved == sorted(moved), "bytes_done went backwards"
    assert [p.finished for p in seen].count(True) == 1 and last.finished
    # The big file's bytes count as they move, while it is named in flight.
    during = [p.bytes_done for p in seen if any(path.endswith("big.bin") for path in p.current)]
    assert len(set(during)) > 1, "bytes_done did not grow while big.bin moved"
    assert all(len(p.current) <= 4 for p in seen)
    moved = [p.bytes_done for p in seen]
    assert moved == sorted(moved), "bytes_done went backwards"
    assert all(p.files_done <= p.files_total and p.bytes_done <= p.bytes_total for p in seen)
    assert all(p.rate >= 0 for p in seen)
    assert stats.files_done == 41 and stats.bytes == total


# -- cancellation ---------------------------------------------------------------------


class SignalingSlow(Slow):
    """Slow server that sets ``reached`` once ``after`` reads plus writes were served."""

    after = 1
    reached: asyncio.Event

    def _count(self) -> None:
        if self.tracker.reads + self.tracker.writes >= self.after:
            self.reached.set()

    async def read(self, file_obj: object, offset: int, size: int) -> bytes:  # type: ignore[override]
        data = await super().read(file_obj, offset, size)
        self._count()
        return data

    async def write(self, file_obj: object, offset: int, data: bytes) -> None:  # type: ignore[override]
        await super().write(file_obj, offset, data)
        self._count()


def sshpipe_tasks(tasks: set[asyncio.Task[Any]]) -> list[str]:
    """The tasks running sshpipe's code. A tree transfer may open channels the warm-up
    did not, and the in-process server keeps a task per open channel: those are the
    server's, and stay while the client pools the channel."""
    package = os.path.dirname(sshpipe.__file__)
    found = []
    for task in tasks:
        code = getattr(task.get_coro(), "cr_code", None)
        if code is not None and code.co_filename.startswith(package):
            found.append(repr(task))
    return found


@pytest.mark.parametrize("direction", ["get", "put"])
@pytest.mark.parametrize("after", [1, 60])
async def test_cancel_a_tree_transfer_leaves_no_task_handle_or_partial(
    faulty_server: StartServer, tmp_path: Path, direction: str, after: int
) -> None:
    tracker = Tracker()
    reached = asyncio.Event()
    server = factory(SignalingSlow, tracker, after=after, reached=reached)
    async with faulty_server(server) as peer:
        make_files(peer.root / "tree", 60, 100_000)
        make_files(tmp_path / "tree", 60, 100_000)
        (peer.root / "warm.bin").write_bytes(b"w" * 1000)
        config = sshpipe.TransferConfig(block_size=32 * 1024)
        async with peer.client(config) as sp:
            await sp.get("/warm.bin", str(tmp_path / "warm.bin"))  # channel pooled
            tracker.reads = tracker.writes = 0
            baseline = asyncio.all_tasks()
            if direction == "get":
                job = sp.get("/tree", str(tmp_path / "out"), recursive=True)
            else:
                job = sp.put(str(tmp_path / "tree"), "/out", recursive=True)
            task = asyncio.create_task(job)
            await asyncio.wait_for(reached.wait(), HANG_GUARD)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert sshpipe_tasks(asyncio.all_tasks() - baseline) == []
            # As for one file (test_faults): handles are closed once the channels settle.
            assert await sp._pool._settling.wait(HANG_GUARD) == 0
            assert tracker.open_handles == 0, "server handles still open after the cancel"
            # Still usable.
            await sp.get("/warm.bin", str(tmp_path / "after.bin"))
        assert leftover_temps(tmp_path, peer.root) == []
    assert (tmp_path / "after.bin").read_bytes() == b"w" * 1000


# Keep the tests' own helpers honest: a comparator that sees no difference would
# make every tree assertion above pass vacuously.
def test_comparator_sees_each_kind_of_difference(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_small_tree(a)
    make_small_tree(b)
    set_times(a, 1_000_000_000)
    set_times(b, 1_000_000_000)
    assert compare_trees(a, b, modes=True, mtimes=True) == []
    (b / "a.txt").write_bytes(b"changed\n")
    (b / "sub" / "b.bin").chmod(0o600)
    (a / "sub" / "b.bin").chmod(0o644)
    os.utime(b / "void", (5, 5))
    (b / "link-file").unlink()
    (b / "link-file").symlink_to("sub")
    (b / "extra").write_bytes(b"")
    (b / "name with space" / "ü.txt").unlink()
    (b / "link-dir").unlink()
    (b / "link-dir").mkdir()
    os.utime(b / "name with space", (1_000_000_000, 1_000_000_000))
    diffs = compare_trees(a, b, modes=True, mtimes=True)
    assert diffs[0] == "missing: 'name with space/ü.txt' (file)"
    assert "extra: 'extra' (file)" in diffs
    assert "type: 'link-dir': expected symlink, got dir" in diffs
    assert "symlink target: 'link-file': 'a.txt' != 'sub'" in diffs
    assert "mode: 'sub/b.bin': 0o644 != 0o600" in diffs
    assert "mtime: 'void': 1000000000 != 5" in diffs
    assert any(d.startswith("content: 'a.txt'") for d in diffs)
    assert compare_trees(a, b) != []
    # Following links describes what -L copies.
    assert "link-dir/b.bin" in snapshot(a, follow_symlinks=True)
