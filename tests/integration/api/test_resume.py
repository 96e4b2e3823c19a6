"""--resume: a copy killed with SIGKILL continues from its partial file and journal.

The copy (get or put) is slowed by the link emulator so it can be killed
mid-way; then it is resumed, with one of its journaled chunks damaged in the
partial file (copied again), or with the source changed since (refused). The
pure pieces (the plan that skips what is kept, the gaps, which journal entries
still count, the read-back check) are checked as tables.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sshpipe
from sshpipe.core.readback import ReadBackCheck, latest_disjoint
from sshpipe.core.readplan import Range, ReadPlan, missing
from sshpipe.durability.journal import Journal, holder_of
from sshpipe.durability.putresume import remote_resume_name, state_dir
from sshpipe.local.dirfd import DirRoot
from sshpipe.testing.linkemu import LinkEmulator
from tests.support.cli import assert_one_line_error, run_cli, run_cli_async
from tests.support.peers import Peer

MiB = 1024 * 1024
SIZE = 24 * MiB
# Upload journals go to a throwaway state directory (CLI subprocesses inherit it).
pytestmark = pytest.mark.usefixtures("state_home")


def test_a_resumed_plan_asks_only_for_the_gaps_then_probes() -> None:
    plan = ReadPlan.resuming(
        block_size=100, size=1000, have=[Range(0, 250), Range(400, 100), Range(900, 100)]
    )
    asked = []
    while (rng := plan.next_range()) is not None:
        asked.append((rng.offset, rng.length))
    assert asked == [
        (250, 100),
        (350, 50),
        (500, 100),
        (600, 100),
        (700, 100),
        (800, 100),
        (1000, 100),
    ]
    assert plan.received == 450


@pytest.mark.parametrize(
    ("size", "have", "gaps"),
    [
        (100, [], [(0, 100)]),
        (100, [(0, 100)], []),
        (100, [(10, 20), (50, 10)], [(0, 10), (30, 20), (60, 40)]),
        (100, [(50, 10), (10, 20)], [(0, 10), (30, 20), (60, 40)]),  # unsorted
        (100, [(0, 30), (20, 30)], [(50, 50)]),  # overlapping
        (100, [(90, 50)], [(0, 90)]),  # past the end
        (100, [(200, 10)], [(0, 100)]),  # wholly past the end
        (0, [(0, 10)], []),
    ],
)
def test_missing_is_every_byte_no_range_covers(
    size: int, have: list[tuple[int, int]], gaps: list[tuple[int, int]]
) -> None:
    assert missing(size, [Range(*rng) for rng in have]) == [Range(*gap) for gap in gaps]


@pytest.mark.parametrize(
    ("entries", "size", "kept"),
    [
        ([(0, 10, "a"), (10, 10, "b")], 100, [(0, 10, "a"), (10, 10, "b")]),
        ([(10, 10, "b"), (0, 10, "a")], 100, [(0, 10, "a"), (10, 10, "b")]),  # sorted
        ([(0, 10, "old"), (0, 10, "new")], 100, [(0, 10, "new")]),  # sent again: latest wins
        ([(0, 20, "old"), (10, 20, "new")], 100, [(10, 20, "new")]),  # another block size
        ([(10, 20, "old"), (0, 15, "new")], 100, [(0, 15, "new")]),
        ([(0, 10, "a"), (95, 10, "b")], 100, [(0, 10, "a")]),  # past the partial's end
        ([(0, 0, "empty"), (5, 5, "a")], 100, [(5, 5, "a")]),
    ],
)
def test_latest_disjoint_keeps_what_the_last_writes_describe(
    entries: list[tuple[int, int, str]], size: int, kept: list[tuple[int, int, str]]
) -> None:
    assert latest_disjoint(entries, size) == kept


def test_read_back_check_keeps_matching_ranges_from_pieces_cut_anywhere() -> None:
    data = os.urandom(1000)
    entries = [
        (o, n, hashlib.sha256(data[o : o + n]).hexdigest())
        for o, n in [(0, 300), (300, 200), (600, 400)]
    ]
    on_server = bytearray(data)
    on_server[350] ^= 0xFF  # the second range was damaged since
    check = ReadBackCheck(entries)
    # Read back out of order, in pieces that straddle ranges and skip the gap 500-600.
    for offset, end in [(550, 1000), (250, 450), (0, 250), (450, 500)]:
        check.add(offset, bytes(on_server[offset:end]))
    assert check.kept == [Range(0, 300), Range(600, 400)]
    assert check.bad == 1


def test_read_back_check_keeps_nothing_never_read_back_whole() -> None:
    data = b"x" * 100
    check = ReadBackCheck([(0, 100, hashlib.sha256(data).hexdigest())])
    check.add(0, data[:60])  # the partial ended there
    assert check.kept == []


async def _cli(*args: str) -> tuple[int, str, str]:
    done = await run_cli_async(*args)
    return done.returncode, done.stdout, done.stderr


async def _killed_mid_way(peer: Peer, target: Path) -> None:
    """Start `get --resume`, SIGKILL it once part of the file is on disk."""
    env = {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sshpipe",
        "get",
        "--resume",
        "-q",
        *peer.cli_options(),
        peer.spec("src.bin"),
        str(target),
        env=env,
    )
    partial = target.with_name(f".{target.name}.sshpipe.partial")
    for _ in range(400):
        await asyncio.sleep(0.025)
        if partial.exists() and partial.stat().st_size > 4 * MiB:
            break
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the copy ended before it could be killed"


async def test_sigkill_then_resume_refetches_a_damaged_chunk_and_ends_identical(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path
) -> None:
    peer, _ = slow_link
    data = os.urandom(SIZE)
    (peer.root / "src.bin").write_bytes(data)
    target = tmp_path / "out.bin"
    await _killed_mid_way(peer, target)
    partial = target.with_name(".out.bin.sshpipe.partial")
    journal = target.with_name(".out.bin.sshpipe.journal")
    assert partial.exists() and journal.exists() and not target.exists()
    # Damage one chunk the journal vouches for: it must be fetched again.
    entries = [json.loads(line) for line in journal.read_text().splitlines()[1:] if line]
    assert entries, "the journal recorded nothing"
    victim = entries[len(entries) // 2]
    with partial.open("r+b") as file:
        file.seek(victim["o"])
        file.write(bytes(b ^ 0xFF for b in file.read(16)))
    code, out, err = await _cli(
        "get", "--resume", "--json", *peer.cli_options(), peer.spec("src.bin"), str(target)
    )
    assert code == 0, err
    stats = json.loads(out)
    kept = sum(e["n"] for e in entries)
    assert 0 < stats["resumed_bytes"] <= kept - victim["n"]  # the damaged chunk was not kept
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert not partial.exists() and not journal.exists()


async def test_resume_refuses_a_source_that_changed(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path
) -> None:
    peer, _ = slow_link
    (peer.root / "src.bin").write_bytes(os.urandom(SIZE))
    target = tmp_path / "out.bin"
    await _killed_mid_way(peer, target)
    with (peer.root / "src.bin").open("ab") as grown:
        grown.write(b"more")
    code, _, err = await _cli(
        "get", "--resume", *peer.cli_options(), peer.spec("src.bin"), str(target)
    )
    assert code == 10 and "changed since the partial copy" in err and "Traceback" not in err
    partial = target.with_name(".out.bin.sshpipe.partial")
    assert partial.exists()  # kept: the user decides
    # As the message says: once the partial is removed, --resume starts afresh.
    partial.unlink()
    code, _, err = await _cli(
        "get", "--resume", *peer.cli_options(), peer.spec("src.bin"), str(target)
    )
    assert code == 0, err
    assert target.read_bytes() == (peer.root / "src.bin").read_bytes()
    assert not partial.exists() and not target.with_name(".out.bin.sshpipe.journal").exists()


def test_remote_partial_name_and_state_dir(state_home: Path) -> None:
    assert remote_resume_name("/srv/a/big.iso") == "/srv/a/.big.iso.sshpipe.partial"
    assert remote_resume_name("big.iso") == ".big.iso.sshpipe.partial"
    assert state_dir() == state_home
    assert state_home.stat().st_mode & 0o777 == 0o700


# -- put --resume against OpenSSH --------------------------------------------


async def _put_killed_mid_way(peer: Peer, source: Path, name: str) -> None:
    """Start `put --resume`, SIGKILL it once part of the file is on the server."""
    env = {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sshpipe",
        "put",
        "--resume",
        "-q",
        *peer.cli_options(),
        str(source),
        peer.spec(name),
        env=env,
    )
    partial = peer.root / f".{name}.sshpipe.partial"
    for _ in range(400):
        await asyncio.sleep(0.025)
        if partial.exists() and partial.stat().st_size > 4 * MiB:
            break
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the copy ended before it could be killed"


def _journal_entries(state_home: Path) -> list[dict[str, int | str]]:
    (journal,) = state_home.iterdir()
    lines = journal.read_text().splitlines()
    assert json.loads(lines[0])["size"] == SIZE
    return [json.loads(line) for line in lines[1:] if line.endswith("}")]


async def test_put_sigkill_then_resume_resends_a_damaged_chunk_and_ends_identical(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path, state_home: Path
) -> None:
    peer, _ = slow_link
    data = os.urandom(SIZE)
    source = tmp_path / "src.bin"
    source.write_bytes(data)
    await _put_killed_mid_way(peer, source, "out.bin")
    partial = peer.root / ".out.bin.sshpipe.partial"
    assert partial.exists() and not (peer.root / "out.bin").exists()
    entries = _journal_entries(state_home)
    assert entries, "the journal recorded nothing"
    # Damage one chunk the journal vouches for: the read-back must catch it.
    victim = entries[len(entries) // 2]
    with partial.open("r+b") as file:
        file.seek(int(victim["o"]))
        file.write(bytes(b ^ 0xFF for b in file.read(16)))
    code, out, err = await _cli(
        "put", "--resume", "--json", *peer.cli_options(), str(source), peer.spec("out.bin")
    )
    assert code == 0, err
    assert hashlib.sha256((peer.root / "out.bin").read_bytes()).digest() == (
        hashlib.sha256(data).digest()
    )
    stats = json.loads(out)
    journaled = sum(int(e["n"]) for e in entries)
    assert 0 < stats["resumed_bytes"] <= journaled - int(victim["n"])  # the victim was re-sent
    assert stats["bytes"] == SIZE
    assert not partial.exists() and list(state_home.iterdir()) == []


async def test_put_resume_refuses_a_source_that_changed_until_the_partial_is_removed(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path, state_home: Path
) -> None:
    peer, _ = slow_link
    source = tmp_path / "src.bin"
    source.write_bytes(os.urandom(SIZE))
    await _put_killed_mid_way(peer, source, "out.bin")
    partial = peer.root / ".out.bin.sshpipe.partial"
    os.utime(source, ns=(0, source.stat().st_mtime_ns + 10**9))  # same size, newer mtime
    args = ("put", "--resume", *peer.cli_options(), str(source), peer.spec("out.bin"))
    code, _, err = await _cli(*args)
    assert code == 10 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert str(source) in err and "changed since the partial copy" in err
    assert partial.exists() and not (peer.root / "out.bin").exists()  # kept: the user decides
    partial.unlink()  # as the message says: then the stale journal no longer counts
    code, _, err = await _cli(*args)
    assert code == 0, err
    assert (peer.root / "out.bin").read_bytes() == source.read_bytes()
    assert list(state_home.iterdir()) == []


async def test_a_resumed_put_cut_while_sending_the_gaps_reconnects_and_ends_identical(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path, state_home: Path
) -> None:
    peer, emu = slow_link
    data = os.urandom(SIZE)
    source = tmp_path / "src.bin"
    source.write_bytes(data)
    await _put_killed_mid_way(peer, source, "out.bin")
    journaled = sum(int(e["n"]) for e in _journal_entries(state_home))
    async with peer.client(sshpipe.TransferConfig(resume=True)) as client:
        emu.cut_after(2 * MiB, direction="up")  # the read-back sends little: this cuts a gap
        stats = await client.put(str(source), peer.remote("out.bin"))
    assert (peer.root / "out.bin").read_bytes() == data
    assert stats.reconnects == 1 and 0 < stats.resumed_bytes <= journaled
    assert not (peer.root / ".out.bin.sshpipe.partial").exists()
    assert list(state_home.iterdir()) == []


async def test_a_cancelled_put_resume_leaves_a_partial_the_next_one_continues(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path, state_home: Path
) -> None:
    peer, _ = slow_link
    data = os.urandom(SIZE)
    source = tmp_path / "src.bin"
    source.write_bytes(data)
    partial = peer.root / ".out.bin.sshpipe.partial"
    async with peer.client(sshpipe.TransferConfig(resume=True)) as client:
        task = asyncio.create_task(client.put(str(source), peer.remote("out.bin")))
        for _ in range(400):
            await asyncio.sleep(0.025)
            if partial.exists() and partial.stat().st_size > 4 * MiB:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert partial.exists() and _journal_entries(state_home)
        seen: list[sshpipe.Progress] = []
        stats = await client.put(str(source), peer.remote("out.bin"), progress=seen.append)
    assert (peer.root / "out.bin").read_bytes() == data
    assert stats.resumed_bytes > 0
    # The kept bytes count as done, once: the last report is the file's size, no more.
    assert seen[-1].finished and seen[-1].bytes_done == seen[-1].bytes_total == SIZE
    assert [p.bytes_done for p in seen] == sorted(p.bytes_done for p in seen)
    assert not partial.exists() and list(state_home.iterdir()) == []


async def test_put_resume_without_a_journal_copies_everything(
    openssh_peer: Peer, tmp_path: Path, state_home: Path
) -> None:
    data = os.urandom(3 * MiB + 5)
    source = tmp_path / "src.bin"
    source.write_bytes(data)
    # A stale partial without a journal (say the state directory was wiped): not trusted.
    (openssh_peer.root / ".dest.bin.sshpipe.partial").write_bytes(b"stale" * 1000000)
    config = sshpipe.TransferConfig(resume=True)
    async with openssh_peer.client(config) as client:
        stats = await client.put(str(source), openssh_peer.remote("dest.bin"))
    assert stats.resumed_bytes == 0 and stats.bytes == len(data)
    assert (openssh_peer.root / "dest.bin").read_bytes() == data
    assert not (openssh_peer.root / ".dest.bin.sshpipe.partial").exists()
    assert list(state_home.iterdir()) == []


@pytest.mark.parametrize(
    ("extra", "word"),
    [(("--inplace",), "inplace"), (("--", "SECOND"), "several files")],
)
def test_put_resume_refuses_what_get_resume_refuses(
    openssh_peer: Peer, tmp_path: Path, extra: tuple[str, ...], word: str
) -> None:
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    flags = [e for e in extra if e != "--" and e != "SECOND"]
    sources = [str(tmp_path / "a"), *([str(tmp_path / "b")] if "SECOND" in extra else [])]
    target = openssh_peer.spec("") if "SECOND" in extra else openssh_peer.spec("a")
    result = run_cli("put", "--resume", *flags, *openssh_peer.cli_options(), *sources, target)
    assert_one_line_error(result, 2, word)


async def test_put_stream_refuses_resume(openssh_peer: Peer) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"x"

    async with openssh_peer.client() as client:
        with pytest.raises(sshpipe.UsageError, match="stream"):
            await client.put_stream(
                chunks(), openssh_peer.remote("s"), config=sshpipe.TransferConfig(resume=True)
            )


# -- one copy at a time; a changed source said as it changed ------------------------


def test_the_holder_of_a_journal_lock_is_read_from_proc_locks() -> None:
    device = os.makedev(0xFE, 0)
    locks = (
        "1: POSIX  ADVISORY  WRITE 11 fe:00:42 0 EOF\n"  # another kind of lock: not ours
        "2: FLOCK  ADVISORY  WRITE 22 fe:01:42 0 EOF\n"  # another device
        "3: FLOCK  ADVISORY  WRITE 33 fe:00:42 0 EOF\n"
        "3: -> FLOCK  ADVISORY  WRITE 44 fe:00:42 0 EOF\n"  # one waiting for it
    )
    assert holder_of(locks, device, 42) == 33
    assert holder_of(locks, device, 43) is None
    assert holder_of("", device, 42) is None


def test_a_journal_is_held_by_one_copy_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = DirRoot(str(tmp_path))
    try:
        path = root.top.file(".out.sshpipe.journal")
        first, second = Journal(path), Journal(path)
        first.claim("out")
        with pytest.raises(sshpipe.LocalError) as caught:
            second.claim("out")
        assert str(caught.value) == (
            "local: out: another copy in this process is resuming this copy: "
            "wait for it to end, or stop it"
        )
        assert caught.value.exit_code == 3 and caught.value.errno == errno.EWOULDBLOCK
        first.close()  # claimed, never started, empty: nothing for the next run
        assert not (tmp_path / ".out.sshpipe.journal").exists()
        second.claim("out")
        second.start({"remote": "x"}, append=False)
        second.close()  # started: kept for the next --resume
        assert (tmp_path / ".out.sshpipe.journal").exists()
        # A file system without locks (some NFS mounts) resumes as it did.
        monkeypatch.setattr(fcntl, "flock", _no_locks)
        third = Journal(path)
        third.claim("out")
        third.close()
    finally:
        root.close()


def _no_locks(fd: int, operation: int) -> None:
    raise OSError(errno.ENOLCK, "No locks available")


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_a_second_resume_of_the_same_copy_is_refused_while_the_first_goes_on(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path, direction: str
) -> None:
    """Two used to share the partial and journal, each truncating the other's: the second
    failed with "No such file or directory", the first's work undone. Now the second is
    refused before it touches either, naming the first; the first ends identical."""
    peer, _ = slow_link
    data = os.urandom(SIZE)
    if direction == "get":
        (peer.root / "src.bin").write_bytes(data)
        result = tmp_path / "out.bin"
        args = [peer.spec("src.bin"), str(result)]
        partial = tmp_path / ".out.bin.sshpipe.partial"
    else:
        (tmp_path / "src.bin").write_bytes(data)
        result = peer.root / "out.bin"
        args = [str(tmp_path / "src.bin"), peer.spec("out.bin")]
        partial = peer.root / ".out.bin.sshpipe.partial"
    command = [direction, "--resume", "-q", *peer.cli_options(), *args]
    env = {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"}
    first = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sshpipe", *command, env=env, stderr=asyncio.subprocess.PIPE
    )
    for _ in range(400):
        await asyncio.sleep(0.025)
        if partial.exists() and partial.stat().st_size > MiB:
            break
    second = await run_cli_async(*command)
    assert first.returncode is None, "the first copy ended before the second was refused"
    assert_one_line_error(
        second, 3, f"another sshpipe (pid {first.pid}) is resuming this copy", "wait for it"
    )
    _, err = await first.communicate()
    assert first.returncode == 0, err
    assert hashlib.sha256(result.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert not partial.exists()
    assert not (tmp_path / ".out.bin.sshpipe.journal").exists()


async def test_put_resume_says_what_changed_in_a_source_of_the_same_size_and_mtime(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path, state_home: Path
) -> None:
    peer, _ = slow_link
    source = tmp_path / "src.bin"
    source.write_bytes(os.urandom(SIZE))
    await _put_killed_mid_way(peer, source, "out.bin")
    was = source.stat()
    args = ("put", "--resume", *peer.cli_options(), str(source), peer.spec("out.bin"))
    # Rewritten in place, its size and mtime put back: its ctime alone says so.
    with source.open("r+b") as file:
        file.write(os.urandom(1000))
    os.utime(source, ns=(was.st_atime_ns, was.st_mtime_ns))
    assert_one_line_error(
        await run_cli_async(*args), 10, "changed since the partial copy", "its ctime changed"
    )
    # Another file of the same size and mtime put in its place.
    other = tmp_path / "other.bin"
    other.write_bytes(os.urandom(SIZE))
    os.utime(other, ns=(was.st_atime_ns, was.st_mtime_ns))
    os.replace(other, source)
    assert_one_line_error(await run_cli_async(*args), 10, "it is another file (its inode changed)")
    assert (peer.root / ".out.bin.sshpipe.partial").exists()  # kept: the user decides


async def test_get_resume_of_another_file_of_the_same_size_and_mtime_says_so(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path
) -> None:
    """It said "changed since ... (it was S bytes, mtime T; now S, T)": nothing had."""
    peer, _ = slow_link
    (peer.root / "src.bin").write_bytes(os.urandom(SIZE))
    target = tmp_path / "out.bin"
    await _killed_mid_way(peer, target)
    twin = peer.root / "twin.bin"
    twin.write_bytes(os.urandom(SIZE))
    was = (peer.root / "src.bin").stat()
    os.utime(twin, ns=(was.st_atime_ns, was.st_mtime_ns))
    done = await run_cli_async(
        "get", "--resume", *peer.cli_options(), peer.spec("twin.bin"), str(target)
    )
    assert_one_line_error(done, 10, f"is of {peer.remote('src.bin')}, not of this file")


# -- resume with verify --------------------------------------------------------------


async def test_get_resume_verify_catches_a_source_changed_behind_size_and_mtime(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path
) -> None:
    """Resume trusts size and mtime; --verify hashes the whole result against the server's
    file, so bytes changed under an unchanged size and mtime are caught (exit 10)."""
    peer, _ = slow_link
    source = peer.root / "src.bin"
    source.write_bytes(os.urandom(SIZE))
    target = tmp_path / "out.bin"
    await _killed_mid_way(peer, target)
    before = source.stat()
    with source.open("r+b") as file:  # rewritten in place: the kept ranges are now stale
        file.write(os.urandom(SIZE))
    os.utime(source, ns=(before.st_atime_ns, before.st_mtime_ns))
    code, _, err = await _cli(
        "get", "--resume", "--verify", *peer.cli_options(), peer.spec("src.bin"), str(target)
    )
    assert code == 10 and "sha256" in err and "Traceback" not in err, err
    assert not target.exists()


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_resume_with_verify_ends_identical_and_says_it_checked(
    slow_link: tuple[Peer, LinkEmulator], tmp_path: Path, direction: str
) -> None:
    peer, _ = slow_link
    data = os.urandom(SIZE)
    if direction == "get":
        (peer.root / "src.bin").write_bytes(data)
        result = tmp_path / "out.bin"
        await _killed_mid_way(peer, result)
        args = [peer.spec("src.bin"), str(result)]
    else:
        source = tmp_path / "src.bin"
        source.write_bytes(data)
        result = peer.root / "out.bin"
        await _put_killed_mid_way(peer, source, "out.bin")
        args = [str(source), peer.spec("out.bin")]
    code, out, err = await _cli(
        direction, "--resume", "--verify", "--json", *peer.cli_options(), *args
    )
    assert code == 0, err
    stats = json.loads(out)
    assert stats["verified"] == "hash-remote" and stats["resumed_bytes"] > 0
    assert hashlib.sha256(result.read_bytes()).digest() == hashlib.sha256(data).digest()
