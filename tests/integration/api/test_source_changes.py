"""A put whose source changes while it is uploaded: exit 10, nothing takes the name, no temp left.

What is sent is hashed as it is read, so ``--verify`` checks the server's copy
against the bytes sent: a source rewritten in place mid-way (its old head and
new tail sent) passed as ``hash-remote``. The source's identity (device,
inode, size, mtime, ctime) is taken when it is opened and compared before
the rename, for single files (with and without --verify, --resume, worker
processes) and trees (big files through the single-file engine; small ones
sent from memory, checked once read). Against a real sshd.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import sshpipe
import sshpipe.local.source
from tests.support.cli import assert_one_line_error, run_cli_async
from tests.support.files import leftover_temps, random_file
from tests.support.peers import Peer

KiB = 1024
MiB = 1024 * KiB
SIZE = 512 * KiB
RATE = 256 * KiB  # bytes/s: SIZE takes ~2 s, time to rewrite it mid-way
OLD = b"the file the put would replace\n"


def rewrite_tail(path: Path) -> None:
    """Rewrite the second half in place, the size kept (a log writer, an editor saving in place)."""
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.seek(size // 2)
        file.write(os.urandom(size - size // 2))


def rewriting(path: Path) -> Any:
    """A progress callback that rewrites ``path``'s tail once 64 KiB of it are acknowledged
    (long after it was opened: a tree's small files are a few bytes)."""
    done: list[bool] = []

    def seen(progress: sshpipe.Progress) -> None:
        if not done and progress.bytes_done > 64 * KiB and not progress.finished:
            done.append(True)
            rewrite_tail(path)

    seen.done = done  # type: ignore[attr-defined]
    return seen


@pytest.mark.parametrize("verify", [False, True], ids=["plain", "verify"])
async def test_a_put_whose_source_is_rewritten_mid_way_exits_10(
    openssh_peer: Peer, tmp_path: Path, verify: bool
) -> None:
    source = tmp_path / "src.bin"
    random_file(source, SIZE)
    dest = openssh_peer.root / "dest.bin"
    dest.write_bytes(OLD)
    options = ["--verify"] if verify else []
    command = asyncio.ensure_future(
        run_cli_async(
            "put",
            "-l",
            str(RATE * 8 // 1024),
            *options,
            *openssh_peer.cli_options(),
            str(source),
            openssh_peer.spec("dest.bin"),
        )
    )
    for _ in range(400):  # until its temporary file is on the server: the source is open
        if leftover_temps(openssh_peer.root) or command.done():
            break
        await asyncio.sleep(0.01)
    rewrite_tail(source)
    done = await command
    assert_one_line_error(done, 10, str(source), "changed while it was uploaded")
    assert "its mtime changed" in done.stderr, done.stderr
    assert dest.read_bytes() == OLD
    assert leftover_temps(openssh_peer.root) == []


async def test_a_tree_fails_the_big_file_rewritten_mid_way_alone(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """Under a rate limit a file past the limiter's burst goes by the single-file engine."""
    tree = tmp_path / "tree"
    tree.mkdir()
    random_file(tree / "big.bin", SIZE)
    (tree / "small.txt").write_bytes(b"unchanged\n")
    seen = rewriting(tree / "big.bin")
    async with openssh_peer.client(sshpipe.TransferConfig(rate_limit=RATE)) as client:
        with pytest.raises(sshpipe.IncompleteTransfer) as caught:
            await client.put(str(tree), openssh_peer.remote("up"), recursive=True, progress=seen)
    assert seen.done
    (failure,) = caught.value.failures
    assert failure.exit_code == 10 and caught.value.exit_code == 10
    assert "big.bin: changed while it was uploaded" in failure.error, failure.error
    assert (openssh_peer.root / "up" / "small.txt").read_bytes() == b"unchanged\n"
    assert not (openssh_peer.root / "up" / "big.bin").exists()
    assert leftover_temps(openssh_peer.root) == []


async def test_a_tree_fails_a_small_file_changed_while_it_was_read(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small file is read whole, then sent from memory: it is checked once read.

    Its one read is made to land between a writer's two writes (the file's
    own module's ``os`` is wrapped: a read that rewrites the file first).
    """
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.txt").write_bytes(b"a" * 1000)
    (tree / "b.txt").write_bytes(b"b" * 1000)
    real = os

    def read(fd: int, count: int) -> bytes:
        if real.fstat(fd).st_ino == real.stat(tree / "a.txt").st_ino:
            with open(tree / "a.txt", "r+b") as file:
                file.write(b"A" * 500)
        return real.read(fd, count)

    wrapped = SimpleNamespace(**{name: getattr(real, name) for name in dir(real)})
    wrapped.read = read
    monkeypatch.setattr(sshpipe.local.source, "os", wrapped)
    async with openssh_peer.client() as client:
        with pytest.raises(sshpipe.IncompleteTransfer) as caught:
            await client.put(str(tree), openssh_peer.remote("up"), recursive=True)
    (failure,) = caught.value.failures
    assert failure.exit_code == 10
    assert f"{tree / 'a.txt'}: changed while it was read: its mtime changed" in failure.error
    assert (openssh_peer.root / "up" / "b.txt").read_bytes() == b"b" * 1000
    assert not (openssh_peer.root / "up" / "a.txt").exists()
    assert leftover_temps(openssh_peer.root) == []


async def test_a_put_by_worker_processes_refuses_a_source_rewritten_mid_way(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    source = tmp_path / "src.bin"
    random_file(source, 3 * MiB)
    dest = openssh_peer.root / "dest.bin"
    dest.write_bytes(OLD)
    seen = rewriting(source)
    config = sshpipe.TransferConfig(workers=2, rate_limit=2 * MiB)
    async with openssh_peer.client(config) as client:
        with pytest.raises(sshpipe.IntegrityError) as caught:
            await client.put(str(source), openssh_peer.remote("dest.bin"), progress=seen)
    assert seen.done
    assert str(caught.value).startswith(f"verify: {source}: changed while it was uploaded: ")
    assert caught.value.exit_code == 10
    assert dest.read_bytes() == OLD
    assert leftover_temps(openssh_peer.root) == []


@pytest.mark.usefixtures("state_home")
async def test_a_resumed_put_of_a_source_rewritten_mid_way_starts_afresh_next_time(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """Its partial is of no version of the source: removed, and the next --resume copies all."""
    source = tmp_path / "src.bin"
    random_file(source, SIZE)
    partial = openssh_peer.root / ".dest.bin.sshpipe.partial"
    seen = rewriting(source)
    config = sshpipe.TransferConfig(resume=True, verify="hash", rate_limit=RATE)
    async with openssh_peer.client(config) as client:
        with pytest.raises(sshpipe.IntegrityError, match="changed while it was uploaded"):
            await client.put(str(source), openssh_peer.remote("dest.bin"), progress=seen)
        assert seen.done
        assert not partial.exists() and not (openssh_peer.root / "dest.bin").exists()
        stats = await client.put(
            str(source), openssh_peer.remote("dest.bin"), config=sshpipe.TransferConfig(resume=True)
        )
    assert stats.resumed_bytes == 0
    assert (openssh_peer.root / "dest.bin").read_bytes() == source.read_bytes()
    assert not partial.exists()
