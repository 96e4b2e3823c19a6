"""200 transfers at once on one client stay within its byte budget, in RSS.

``max_bytes_in_flight`` is the client's, shared by all its transfers: 200
concurrent puts or gets against sshd peak at the budget plus a fixed overhead
(the transfers' own objects, the channels and connections), where puts had
grown the process by 183 MiB on a 16 MiB budget (each read its blocks before
they were charged, kept its last one after, and its ciphertext queued as far
as the server's windows went) and gets by 94 (each kept its last batch after
it was written). A tree of 200 such files stays within it too: its small
files had each kept their bytes past their credits, until their batch was
checked and synced (with --verify, +219 MiB for a put, +115 for a get). The
budget is small here to keep the test quick; the rule is the same at the
default 64 MiB (``benchmarks/bench_api.py concurrent``).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

import sshpipe
from tests.support.files import sha256_file
from tests.support.memory import api_peak_growth
from tests.support.peers import Peer

MiB = 1024 * 1024
TRANSFERS = 200
BUDGET = 16 * MiB
# What 200 transfers cost beyond the bytes they hold: measured 25-30 MiB with
# a 1 MiB budget (their tasks, pumps, channels and four connections), and the
# allocator's slack around the payload.
OVERHEAD = 50 * MiB


def _files(directory: Path, size: int) -> list[str]:
    """``TRANSFERS`` files of random bytes in ``directory``; their SHA-256s."""
    directory.mkdir()
    digests = []
    for i in range(TRANSFERS):
        data = os.urandom(size)
        (directory / f"f{i}.bin").write_bytes(data)
        digests.append(hashlib.sha256(data).hexdigest())
    return digests


def _sides(peer: Peer, tmp_path: Path, direction: str) -> tuple[Path, Path]:
    """(source, destination) directories of a put or a get."""
    here, there = tmp_path / "local", peer.root / f"many-{tmp_path.name}"
    return (here, there) if direction == "put" else (there, here)


@pytest.mark.parametrize("direction", ["put", "get"])
@pytest.mark.parametrize("size", [MiB, pytest.param(4 * MiB, marks=pytest.mark.slow)])
def test_200_concurrent_transfers_stay_within_the_clients_byte_budget(
    openssh_peer: Peer, tmp_path: Path, direction: str, size: int
) -> None:
    source, dest = _sides(openssh_peer, tmp_path, direction)
    digests = _files(source, size)
    dest.mkdir()
    pairs = [(str(source / f"f{i}.bin"), str(dest / f"f{i}.bin")) for i in range(TRANSFERS)]
    growth = api_peak_growth(openssh_peer, direction, pairs, BUDGET)
    print(f"{TRANSFERS} {direction}s of {size // MiB} MiB: peak RSS +{growth:.1f} MiB")
    assert growth <= (BUDGET + OVERHEAD) / MiB
    assert [sha256_file(dest / f"f{i}.bin") for i in range(TRANSFERS)] == digests


@pytest.mark.parametrize("direction", ["put", "get"])
def test_a_tree_of_200_files_stays_within_its_byte_budget(
    openssh_peer: Peer, tmp_path: Path, direction: str
) -> None:
    source, dest = _sides(openssh_peer, tmp_path, direction)
    digests = _files(source, MiB)  # small files: a tree's pipeline, not one by one
    pairs = [(str(source), str(dest))]
    # Checked: each file waits for its batch's sha256sum after its credits are back.
    growth = api_peak_growth(openssh_peer, direction, pairs, BUDGET, recursive=True, verify="hash")
    print(f"a tree {direction} of {TRANSFERS} x 1 MiB: peak RSS +{growth:.1f} MiB")
    assert growth <= (BUDGET + OVERHEAD) / MiB
    assert [sha256_file(dest / f"f{i}.bin") for i in range(TRANSFERS)] == digests


async def test_every_kind_of_transfer_waits_its_turn_on_a_tiny_budget_and_all_finish(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """Gets, puts, streams and open files at once on a budget of two blocks: most
    find it full with nothing charged, wait in line, are granted a block in turn
    (each kind wakes on its own grant) and finish, byte for byte."""
    peer = openssh_peer
    block = 32 * 1024
    config = sshpipe.TransferConfig(block_size=block, max_bytes_in_flight=2 * block)
    sources = {i: os.urandom(300_000 + i) for i in range(8)}
    for i, data in sources.items():
        (peer.root / f"s{i}.bin").write_bytes(data)
        (tmp_path / f"l{i}.bin").write_bytes(data)
    async with peer.client(config) as client:

        async def read_whole(i: int) -> bytes:
            async with client.open(peer.remote(f"s{i}.bin")) as file:
                return await file.read()

        async def stream(i: int) -> bytes:
            return b"".join([piece async for piece in client.stream(peer.remote(f"s{i}.bin"))])

        async with asyncio.timeout(120), asyncio.TaskGroup() as group:
            gets = [
                group.create_task(client.get(peer.remote(f"s{i}.bin"), str(tmp_path / f"g{i}")))
                for i in range(0, 3)
            ]
            puts = [
                group.create_task(client.put(str(tmp_path / f"l{i}.bin"), peer.remote(f"p{i}")))
                for i in range(3, 6)
            ]
            reads = [group.create_task(read_whole(i)) for i in (6, 7)]
            streamed = group.create_task(stream(0))
    assert len(gets) == len(puts) == 3
    for i in range(0, 3):
        assert (tmp_path / f"g{i}").read_bytes() == sources[i]
    for i in range(3, 6):
        assert (peer.root / f"p{i}").read_bytes() == sources[i]
    assert [task.result() for task in reads] == [sources[6], sources[7]]
    assert streamed.result() == sources[0]
