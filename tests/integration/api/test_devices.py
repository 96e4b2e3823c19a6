"""FIFOs, devices and sockets where a file would be read or land.

A get wrote a temporary file and renamed it over its destination: as root,
``get host:f /dev/null`` (a speed test) replaced /dev/null with a regular file
and exited 0, and a FIFO was replaced under its reader, who waited for ever.
Now the user's FIFO or character device is written into, in file order (as
scp does), and left what it was; a tree's entry that is one is refused and
left alone; a socket or a block device is refused in one line. A put streams
from a pipe and refuses a device (/dev/zero never ends).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.faults import BLOCK, Reordering, ShortReads, Tracker, factory
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.files import random_file
from tests.support.peers import Peer, StartServer

MiB = 1024 * 1024
NULL, FULL = os.makedev(1, 3), os.makedev(1, 7)  # Linux's /dev/null and /dev/full


def _char_device(path: Path, numbers: int) -> Path:
    """A character device node (mknod needs root) with the numbers of one in /dev."""
    os.mknod(path, 0o666 | stat.S_IFCHR, numbers)
    return path


def _still_device(path: Path, numbers: int) -> bool:
    info = os.lstat(path)
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == numbers


class _FifoReader:
    """A thread that opens a FIFO (once ``after`` is set, if given) and reads it to its end."""

    def __init__(
        self, path: Path, after: threading.Event | None = None, limit: int | None = None
    ) -> None:
        self.got = b""
        self._path, self._after, self._limit = path, after, limit
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        if self._after is not None:
            self._after.wait(30)  # set or not, then open: a blocked open() is let go
        with open(self._path, "rb") as fifo:
            self.got = fifo.read() if self._limit is None else fifo.read(self._limit)

    def join(self) -> bytes:
        self._thread.join(30)
        assert not self._thread.is_alive(), "the FIFO never ended"
        return self.got


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    yield path
    # A reader still blocked in open() (a failed test) is let go.
    with open(os.open(path, os.O_RDWR | os.O_NONBLOCK), "rb"):
        pass


def _get(peer: Peer, name: str, dest: Path | str, *more: str) -> subprocess.CompletedProcess[str]:
    return run_cli("get", *peer.cli_options(), *more, peer.spec(name), str(dest))


# -- character devices --------------------------------------------------------------------


def test_a_get_into_dev_null_leaves_it_a_character_device_and_writes_nothing_beside(
    openssh_peer: Peer, tmp_path: Path, needs_root: None
) -> None:
    random_file(openssh_peer.root / "big.bin", 8 * MiB)
    # First a node of our own with /dev/null's numbers: were it replaced, the
    # test stops here, before /dev/null itself is touched.
    ours = _char_device(tmp_path / "null", NULL)
    result = _get(openssh_peer, "big.bin", ours)
    assert result.returncode == 0, result.stderr
    assert _still_device(ours, NULL)
    assert os.listdir(tmp_path) == ["null"]  # no temporary file went beside it
    result = _get(openssh_peer, "big.bin", "/dev/null")
    assert result.returncode == 0, result.stderr
    assert "8.0 MiB" in result.stdout
    assert _still_device(Path("/dev/null"), NULL)
    assert [name for name in os.listdir("/dev") if "sshpipe" in name] == []


def test_dev_full_fails_as_a_full_disk_in_one_line(
    openssh_peer: Peer, tmp_path: Path, needs_root: None
) -> None:
    random_file(openssh_peer.root / "big.bin", MiB)
    ours = _char_device(tmp_path / "full", FULL)  # as above: ours first, then /dev/full
    for target in (ours, Path("/dev/full")):
        result = _get(openssh_peer, "big.bin", target)
        assert_one_line_error(result, 3, "local:", str(target), "No space left on device")
        assert _still_device(target, FULL)
    assert os.listdir(tmp_path) == ["full"]


def test_verify_into_a_device_checks_the_hash_of_the_bytes_as_written_and_p_leaves_it(
    openssh_peer: Peer, tmp_path: Path, needs_root: None
) -> None:
    random_file(openssh_peer.root / "big.bin", 3 * MiB + 5)
    (openssh_peer.root / "big.bin").chmod(0o640)
    node = _char_device(tmp_path / "null", NULL)
    node.chmod(0o620)
    result = _get(openssh_peer, "big.bin", node, "--verify", "-p")
    assert result.returncode == 0, result.stderr
    assert "verified: hash-remote" in result.stdout  # sha256sum against the streamed hash
    assert _still_device(node, NULL)
    assert stat.S_IMODE(os.lstat(node).st_mode) == 0o620  # -p sets no device's mode


# -- FIFOs ----------------------------------------------------------------------------------


async def test_a_get_waits_for_its_fifos_reader_without_blocking_and_writes_in_order(
    openssh_peer: Peer, fifo: Path
) -> None:
    data = random_file(openssh_peer.root / "big.bin", 6 * MiB + 7)
    # The reader opens only once the loop has run on while the get waited for
    # one: were the FIFO's open blocking the loop, the ticks never come (the
    # reader then opens after 30 s, to let the open go, and the test fails).
    waiting, ticked = asyncio.Event(), threading.Event()

    class Waiting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "no reader yet" in record.getMessage():
                waiting.set()

    async def tick() -> None:
        await waiting.wait()
        for _ in range(5):
            await asyncio.sleep(0.01)
        ticked.set()

    handler = Waiting(logging.DEBUG)
    logger = logging.getLogger("sshpipe.local")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    # A small budget and blocks: many requests, the file ten times the budget.
    config = sshpipe.TransferConfig(max_bytes_in_flight=512 * 1024, block_size=64 * 1024)
    reader = _FifoReader(fifo, after=ticked)
    try:
        async with openssh_peer.client(config) as client, asyncio.TaskGroup() as group:
            ticker = group.create_task(tick())
            stats = await client.get(openssh_peer.remote("big.bin"), str(fifo))
            ticker.cancel()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert reader.join() == data
    assert ticked.is_set()
    assert stats.bytes == len(data) and stats.peak_bytes_in_flight <= 512 * 1024 + 64 * 1024
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.listdir(fifo.parent) == ["fifo"]


@pytest.mark.parametrize("fault", [Reordering, ShortReads])
async def test_a_fifo_gets_the_bytes_in_order_from_a_server_that_reorders_or_cuts_replies(
    faulty_server: StartServer, fifo: Path, fault: type[Reordering]
) -> None:
    async with faulty_server(factory(fault, Tracker())) as peer:
        data = random_file(peer.root / "src.bin", 2 * MiB + 3)
        # A budget of 8 blocks: replies beyond a hole wait for it, charged.
        config = sshpipe.TransferConfig(block_size=BLOCK, max_bytes_in_flight=8 * BLOCK)
        reader = _FifoReader(fifo)
        async with peer.client(config) as client:
            await client.get("/src.bin", str(fifo))
    assert reader.join() == data


def test_a_fifo_whose_reader_goes_away_is_a_broken_pipe_in_one_line(
    openssh_peer: Peer, fifo: Path
) -> None:
    random_file(openssh_peer.root / "big.bin", 8 * MiB)
    reader = _FifoReader(fifo, limit=MiB)
    result = _get(openssh_peer, "big.bin", fifo)
    reader.join()
    assert_one_line_error(result, 3, "local:", str(fifo), "Broken pipe")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_resume_into_a_fifo_is_refused(openssh_peer: Peer, fifo: Path) -> None:
    random_file(openssh_peer.root / "big.bin", MiB)
    result = _get(openssh_peer, "big.bin", fifo, "--resume")
    assert_one_line_error(result, 2, str(fifo), "is a FIFO", "--resume")
    assert os.listdir(fifo.parent) == ["fifo"]


def test_a_tree_refuses_a_fifo_where_a_file_would_land_and_copies_the_rest(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    tree = openssh_peer.root / "tree"
    tree.mkdir()
    kept = random_file(tree / "kept.bin", 5000)
    random_file(tree / "small", 5000)
    random_file(tree / "big", 40 * MiB)  # the single-file engine's, not the pipeline's
    dest = tmp_path / "dest"
    (dest / "tree").mkdir(parents=True)
    for name in ("small", "big"):
        os.mkfifo(dest / "tree" / name)
    result = run_cli("get", "-r", *openssh_peer.cli_options(), openssh_peer.spec("tree"), str(dest))
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr
    for name in ("small", "big"):
        assert f"{dest / 'tree' / name}: is a FIFO; not replaced by a file" in result.stderr
        assert stat.S_ISFIFO(os.lstat(dest / "tree" / name).st_mode)
    assert (dest / "tree" / "kept.bin").read_bytes() == kept
    assert sorted(os.listdir(dest / "tree")) == ["big", "kept.bin", "small"]


def test_a_get_into_its_own_stdout_writes_the_bytes_there_and_the_result_to_stderr(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    data = random_file(openssh_peer.root / "big.bin", 3 * MiB + 1)
    # A link of our own as /dev/stdout is (to /proc/self/fd/1) first: were links
    # to descriptors replaced as other links are, the test stops before /dev/stdout.
    ours = tmp_path / "stdout"
    ours.symlink_to("/proc/self/fd/1")
    get = [sys.executable, "-m", "sshpipe", "get", *openssh_peer.cli_options()]
    for target in (str(ours), "/dev/stdout"):
        done = subprocess.run(
            [*get, openssh_peer.spec("big.bin"), target],
            capture_output=True,  # stdout: a pipe
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == data
        assert f"-> {target}: 3.0 MiB".encode() in done.stderr
        assert os.readlink(target) == "/proc/self/fd/1"
    # Its stdout a regular file: neither written through the link nor replaced.
    with open(tmp_path / "out", "wb") as out:
        done = subprocess.run(
            [*get, openssh_peer.spec("big.bin"), str(ours)],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert_one_line_error(done, 3, str(ours), "is a descriptor of this process; not replaced")
    assert os.readlink(ours) == "/proc/self/fd/1"
    assert (tmp_path / "out").read_bytes() == b""


# -- sockets and sources --------------------------------------------------------------------


def test_a_socket_is_refused_as_a_destination_and_as_a_source(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    random_file(openssh_peer.root / "big.bin", MiB)
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(path))
        result = _get(openssh_peer, "big.bin", path)
        assert_one_line_error(result, 3, "local:", str(path), "is a socket")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        result = run_cli("put", *openssh_peer.cli_options(), str(path), openssh_peer.spec("s"))
        assert_one_line_error(result, 3, "local:", str(path), "is a socket")
    assert not (openssh_peer.root / "s").exists()


def test_a_put_streams_from_a_pipe_and_refuses_a_device(openssh_peer: Peer, fifo: Path) -> None:
    data = os.urandom(3 * MiB + 11)

    def write() -> None:
        with open(fifo, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result = run_cli("put", *openssh_peer.cli_options(), str(fifo), openssh_peer.spec("up.bin"))
    writer.join(30)
    assert result.returncode == 0, result.stderr
    assert (openssh_peer.root / "up.bin").read_bytes() == data
    result = run_cli("put", *openssh_peer.cli_options(), "/dev/zero", openssh_peer.spec("z"))
    assert_one_line_error(result, 3, "local:", "/dev/zero", "is a character device")
    assert not (openssh_peer.root / "z").exists()
