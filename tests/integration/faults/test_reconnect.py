"""Reconnect and continue: downloads survive cut and stalled connections.

Through the link emulator in front of the real sshd: each transfer has its
connection reset at a random offset (seeded; the seed is printed and can be
set with SSHPIPE_CUT_SEED), or the link goes silent, and must end byte for
byte identical with nothing left behind, having asked again only for what
was missing. When the server cannot be reached again the download gives up
after its retry budget with a clear error.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.linkemu import LinkEmulator, LinkSpec
from tests.support.files import leftover_temps, sha256_file
from tests.support.peers import Peer

# Tests here start the link emulator themselves, not only through fixtures.
pytestmark = pytest.mark.linkemu

MiB = 1024 * 1024
SIZE = 64 * MiB
TRANSFERS = 50
SEED = int(os.environ.get("SSHPIPE_CUT_SEED", "20261130"))


@pytest.mark.slow  # 15-60 s: the as-user run leaves it to the root run
async def test_fifty_cut_connections_all_end_byte_identical(
    link: tuple[LinkEmulator, Peer], tmp_path: Path
) -> None:
    emu, peer = link
    source = peer.root / "big.bin"
    with source.open("wb") as out:
        for _ in range(SIZE // MiB):
            out.write(os.urandom(MiB))
    expected = sha256_file(source)
    rng = random.Random(SEED)
    print(f"cut offsets from seed {SEED} (SSHPIPE_CUT_SEED)")
    survived = 0
    for number in range(TRANSFERS):
        cut = rng.randrange(256 * 1024, SIZE)  # bytes the server may send before the reset
        target = tmp_path / f"copy-{number}.bin"
        async with peer.client() as sp:
            emu.cut_after(cut, direction="down")
            stats = await sp.get(peer.remote("big.bin"), str(target))
        assert sha256_file(target) == expected, f"transfer {number} (cut at {cut}) differs"
        assert stats.reconnects == 1, f"transfer {number} (cut at {cut}): {stats.reconnects}"
        survived += 1
        target.unlink()
    assert survived == TRANSFERS
    assert leftover_temps(tmp_path) == [] and os.listdir(tmp_path) == ["known_hosts_link"]


async def test_a_silent_link_counts_as_dropped_and_the_download_goes_on(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    data = os.urandom(16 * MiB)
    (openssh_peer.root / "f.bin").write_bytes(data)
    spec = LinkSpec(rtt=0.002, rate=100e6)  # 16 MiB take ~1.3 s: time to go silent mid-way
    async with LinkEmulator(openssh_peer.host, openssh_peer.port, spec) as emu:
        far = openssh_peer.behind(emu.port, tmp_path)
        config = sshpipe.TransferConfig(stall_timeout=0.5)
        async with far.client(config) as sp:
            task = asyncio.create_task(sp.get(far.remote("f.bin"), str(tmp_path / "f.bin")))
            await asyncio.sleep(0.4)
            assert not task.done()
            emu.stall(2.0)
            stats = await asyncio.wait_for(task, 60)
    assert (tmp_path / "f.bin").read_bytes() == data
    assert stats.reconnects >= 1
    assert leftover_temps(tmp_path) == []


async def test_it_gives_up_when_the_server_cannot_be_reached_again(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    (openssh_peer.root / "f.bin").write_bytes(os.urandom(16 * MiB))
    spec = LinkSpec(rtt=0.002, rate=100e6)
    emu = LinkEmulator(openssh_peer.host, openssh_peer.port, spec)
    await emu.start()
    far = openssh_peer.behind(emu.port, tmp_path)
    async with far.client(sshpipe.TransferConfig(retries=2)) as sp:
        task = asyncio.create_task(sp.get(far.remote("f.bin"), str(tmp_path / "f.bin")))
        await asyncio.sleep(0.4)
        await emu.aclose()  # the path is gone: every reconnect is refused
        with pytest.raises(sshpipe.ConnectionBroken) as caught:
            await asyncio.wait_for(task, 60)
    assert "gave up reconnecting" in str(caught.value)
    assert os.listdir(tmp_path) == ["known_hosts_link"]  # no file, no .partial


async def test_errors_retrying_cannot_fix_are_not_retried(
    link: tuple[LinkEmulator, Peer], tmp_path: Path
) -> None:
    _, peer = link
    async with peer.client() as sp:
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.get(peer.remote("missing.bin"), str(tmp_path / "x"))
        assert sp.connections == 1  # no reconnect was tried


UPLOADS = 20
UP_SIZE = 32 * MiB


@pytest.mark.slow  # 15-60 s: the as-user run leaves it to the root run
async def test_cut_uploads_reopen_their_temp_file_and_end_byte_identical(
    link: tuple[LinkEmulator, Peer], tmp_path: Path
) -> None:
    emu, peer = link
    source = tmp_path / "up.bin"
    with source.open("wb") as out:
        for _ in range(UP_SIZE // MiB):
            out.write(os.urandom(MiB))
    expected = sha256_file(source)
    rng = random.Random(SEED + 1)
    print(f"upload cut offsets from seed {SEED + 1}")
    for number in range(UPLOADS):
        cut = rng.randrange(256 * 1024, UP_SIZE)  # bytes we may send before the reset
        async with peer.client() as sp:
            emu.cut_after(cut, direction="up")
            stats = await sp.put(str(source), peer.remote(f"copy-{number}.bin"))
        copy = peer.root / f"copy-{number}.bin"
        assert sha256_file(copy) == expected, f"upload {number} (cut at {cut}) differs"
        assert stats.reconnects == 1, f"upload {number} (cut at {cut}): {stats.reconnects}"
        copy.unlink()
    assert leftover_temps(peer.root) == []
