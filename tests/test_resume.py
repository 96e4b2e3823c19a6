"""--resume: a download killed with SIGKILL continues from its partial file and journal.

The copy is slowed by the link emulator so it can be killed mid-way; then it
is resumed, with one of its journaled chunks damaged on disk (fetched again),
or with the source changed since (refused). The plan that skips what is kept
is checked as a table.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sshpipe._readplan import Range, ReadPlan
from sshpipe.linkemu import LinkEmulator, LinkSpec
from tests.conftest import Peer
from tests.test_cli import assert_one_line_error, run_cli
from tests.test_tree import run_cli_async

MiB = 1024 * 1024
SIZE = 24 * MiB


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


@pytest.fixture
async def slow_link(openssh_peer: Peer, tmp_path: Path) -> AsyncIterator[tuple[Peer, Path]]:
    """sshd behind a 40 Mbit/s link: 24 MiB take ~5 s, time to kill the copy mid-way."""
    async with LinkEmulator(
        openssh_peer.host, openssh_peer.port, LinkSpec(rtt=0.004, rate=40e6)
    ) as emu:
        known = tmp_path / "known_hosts_link"
        text = openssh_peer.known_hosts.read_text()
        known.write_text(text.replace(f"]:{openssh_peer.port} ", f"]:{emu.port} "))
        yield dataclasses.replace(openssh_peer, port=emu.port, known_hosts=known), known


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
    slow_link: tuple[Peer, Path], tmp_path: Path
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
    slow_link: tuple[Peer, Path], tmp_path: Path
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
    assert target.with_name(".out.bin.sshpipe.partial").exists()  # kept: the user decides


def test_resume_is_refused_for_uploads_for_now(openssh_peer: Peer, tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"a")
    result = run_cli(
        "put", "--resume", *openssh_peer.cli_options(), str(tmp_path / "a"), openssh_peer.spec("a")
    )
    assert_one_line_error(result, 2, "resume")
