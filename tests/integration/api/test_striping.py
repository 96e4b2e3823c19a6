"""The flow controller and striping, end to end, through the link emulator.

Real peers behind an emulated WAN: the controller must open more channels
(downloads: when one channel's window is too small for the RTT) and more
connections (uploads: past sshd's MaxSessions), spread one file over them,
reassemble it byte for byte, and say in its stats why it ran as it did.
Times here prove behaviour (channels, connections, RTT seen), never speed:
speed is measured by benchmarks/bench_wan.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.linkemu import LinkSpec
from sshpipe.testing.sshd import SSHServerInfo, openssh_server
from tests.support.files import leftover_temps, random_file
from tests.support.peers import EmulatedLink, Peer, from_openssh

RTT = 0.06  # long enough that one channel's window visibly caps a transfer
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def sshd_two_sessions(
    sshd_executable: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SSHServerInfo]:
    """A real sshd that allows only 2 channels per connection (stock is 10)."""
    with openssh_server(tmp_path_factory.mktemp("sshd2"), max_sessions=2) as info:
        yield info


@pytest.fixture
def small_sshd_peer(sshd_two_sessions: SSHServerInfo, tmp_path: Path) -> Peer:
    root = sshd_two_sessions.root / tmp_path.name
    root.mkdir()
    return from_openssh(sshd_two_sessions, root)


@pytest.fixture
async def far_peer(peer: Peer, emulated_link: EmulatedLink) -> AsyncIterator[Peer]:
    """``peer`` (sshd, then asyncssh) seen across a 60 ms link."""
    async with emulated_link(peer, LinkSpec(rtt=RTT)) as (_, far):
        yield far


@pytest.fixture
async def far_small_sshd(small_sshd_peer: Peer, emulated_link: EmulatedLink) -> AsyncIterator[Peer]:
    async with emulated_link(small_sshd_peer, LinkSpec(rtt=RTT)) as (_, far):
        yield far


async def test_download_opens_channels_when_one_window_is_too_small(
    far_peer: Peer, tmp_path: Path
) -> None:
    # 1 MiB windows at 60 ms hold ~17 MB/s each: the controller's first guess
    # (60 ms x 1 Gbit/s = 7.5 MB) needs several.
    data = random_file(far_peer.root / "src.bin", 24 * MiB + 5)
    config = sshpipe.TransferConfig(window=MiB)
    async with far_peer.client(config) as client:
        stats = await client.get(far_peer.remote("src.bin"), str(tmp_path / "got.bin"))
    assert (tmp_path / "got.bin").read_bytes() == data
    assert stats.channels >= 4, stats
    assert stats.receive_window == MiB
    assert stats.flow_phase in ("startup", "steady")
    assert leftover_temps(tmp_path, far_peer.root) == []


async def test_upload_stripes_over_channels(far_peer: Peer, tmp_path: Path) -> None:
    data = random_file(tmp_path / "src.bin", 24 * MiB + 3)
    async with far_peer.client() as client:
        stats = await client.put(str(tmp_path / "src.bin"), far_peer.remote("up.bin"))
    assert (far_peer.root / "up.bin").read_bytes() == data
    # 7.5 MB wanted in flight over 2 MiB server windows: more than one channel.
    assert stats.channels >= 3, stats
    assert stats.peer_window > 0
    assert leftover_temps(tmp_path, far_peer.root) == []


async def test_stats_report_the_link(far_peer: Peer, tmp_path: Path) -> None:
    random_file(far_peer.root / "src.bin", 4 * MiB)
    async with far_peer.client() as client:
        stats = await client.get(far_peer.remote("src.bin"), str(tmp_path / "got.bin"))
    # One idle round trip at set-up, and no request faster than the link.
    assert RTT * 0.9 <= stats.rtt_initial <= RTT * 2, stats
    assert RTT * 0.9 <= stats.rtt_min <= stats.rtt_initial, stats
    assert stats.rtt_smoothed >= stats.rtt_min
    assert stats.peak_target_in_flight > 0
    assert stats.peak_delivery_rate > 0
    assert stats.connections == 1


async def test_memory_budget_bounds_what_is_in_flight(far_peer: Peer, tmp_path: Path) -> None:
    data = random_file(far_peer.root / "src.bin", 16 * MiB)
    config = sshpipe.TransferConfig(max_bytes_in_flight=2 * MiB, min_bytes_in_flight=MiB)
    async with far_peer.client(config) as client:
        got = await client.get(far_peer.remote("src.bin"), str(tmp_path / "got.bin"))
        put = await client.put(str(tmp_path / "got.bin"), far_peer.remote("up.bin"))
    assert (tmp_path / "got.bin").read_bytes() == data
    assert (far_peer.root / "up.bin").read_bytes() == data
    for stats in (got, put):
        assert stats.peak_target_in_flight <= 2 * MiB
        # One block may exceed the budget when the pipe is empty (see FlightBudget).
        assert stats.peak_bytes_in_flight <= 2 * MiB + stats.block_size, stats


async def test_fixed_channels_do_not_grow(far_peer: Peer, tmp_path: Path) -> None:
    data = random_file(tmp_path / "src.bin", 8 * MiB)
    config = sshpipe.TransferConfig(channels=1)
    async with far_peer.client(config) as client:
        stats = await client.put(str(tmp_path / "src.bin"), far_peer.remote("up.bin"))
    assert (far_peer.root / "up.bin").read_bytes() == data
    assert (stats.channels, stats.connections, stats.flow_phase) == (1, 1, "fixed")


async def test_upload_opens_connections_past_max_sessions(
    far_small_sshd: Peer, tmp_path: Path
) -> None:
    # sshd refuses a third channel per connection; we assume 10 until it does,
    # then learn its limit and open more connections with the same settings.
    # Large enough to outlast a second connection's ten round trips.
    data = random_file(tmp_path / "src.bin", 64 * MiB + 1)
    async with far_small_sshd.client() as client:
        stats = await client.put(str(tmp_path / "src.bin"), far_small_sshd.remote("up.bin"))
        assert client.connections >= 2
        # A second transfer reuses the pooled channels and connections.
        before = client.connections
        again = await client.put(str(tmp_path / "src.bin"), far_small_sshd.remote("again.bin"))
        # It takes the pool's idle channels first; new connections only for what
        # its start wanted beyond them, opened at once (they may come too late for
        # a 64 MiB file to use them: never more than it asked for).
        assert client.connections - before <= again.connections, (before, again)
        assert client.connections <= sshpipe.TransferConfig().max_connections
    assert (far_small_sshd.root / "up.bin").read_bytes() == data
    assert (far_small_sshd.root / "again.bin").read_bytes() == data
    # The first transfer may end before the new connection's channel has its
    # handle open (a loaded machine is slow to open it, a quiet one quick to
    # finish): it used more than one channel; the second, on the pool's warm
    # channels, uses both connections.
    assert stats.channels >= 2, stats
    assert again.channels >= 3 and again.connections >= 2, again
    assert leftover_temps(tmp_path, far_small_sshd.root) == []


async def test_connections_can_be_capped(far_small_sshd: Peer, tmp_path: Path) -> None:
    data = random_file(tmp_path / "src.bin", 8 * MiB)
    config = sshpipe.TransferConfig(max_connections=1)
    async with far_small_sshd.client(config) as client:
        stats = await client.put(str(tmp_path / "src.bin"), far_small_sshd.remote("up.bin"))
        assert client.connections == 1
    assert (far_small_sshd.root / "up.bin").read_bytes() == data
    assert (stats.connections, stats.channels) == (1, 2)


@pytest.mark.parametrize("direction", ["get", "put"])
@pytest.mark.parametrize("after", [0.0, 0.15, 0.4])
async def test_cancel_while_channels_are_opening(
    far_small_sshd: Peer, tmp_path: Path, direction: str, after: float
) -> None:
    """Cancelled at any point of the growth: no task left, no temp file, clean close."""
    random_file(far_small_sshd.root / "src.bin", 32 * MiB)
    random_file(tmp_path / "src.bin", 32 * MiB)
    before = asyncio.all_tasks()
    async with far_small_sshd.client() as client:
        if direction == "get":
            job = client.get(far_small_sshd.remote("src.bin"), str(tmp_path / "got.bin"))
        else:
            job = client.put(str(tmp_path / "src.bin"), far_small_sshd.remote("up.bin"))
        task = asyncio.create_task(job)
        await asyncio.sleep(after)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    await asyncio.sleep(0)
    assert asyncio.all_tasks() - before - {asyncio.current_task()} == set()
    assert not (tmp_path / "got.bin").exists()
    assert not (far_small_sshd.root / "up.bin").exists()
    assert leftover_temps(tmp_path, far_small_sshd.root) == []


async def test_more_transfers_than_channels_wait_for_one(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """Ten transfers at once on a client allowed two channels in all: none fails, all wait."""
    data = random_file(openssh_peer.root / "src.bin", 3 * MiB + 7)
    config = sshpipe.TransferConfig(max_connections=1, channels_per_connection=2)
    async with openssh_peer.client(config) as client:
        results = await asyncio.gather(
            *(
                client.get(openssh_peer.remote("src.bin"), str(tmp_path / f"got{i}.bin"))
                for i in range(10)
            )
        )
        assert client.connections == 1
        # A transfer with other settings evicts idle channels rather than wait forever.
        other = sshpipe.TransferConfig(window=MiB, max_connections=1, channels_per_connection=2)
        await client.get(openssh_peer.remote("src.bin"), str(tmp_path / "other.bin"), config=other)
    for i in range(10):
        assert (tmp_path / f"got{i}.bin").read_bytes() == data
    assert (tmp_path / "other.bin").read_bytes() == data
    assert all(stats.channels <= 2 for stats in results)
