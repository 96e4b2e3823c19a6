"""The grower adds lanes while the flow controller wants more, and only stops growing
when the server refuses a channel (no sockets: the in-memory server)."""

from __future__ import annotations

import os
from pathlib import Path

import sshpipe
from sshpipe.testing.fakes import FakeLease, FakeServer, Faults
from sshpipe.transfer.download import download

BLOCK = 4096
# 8 requests of 4 KiB: a channel carries 32 KiB, and a 10 ms first RTT makes
# the controller's first guess far more than one channel holds.
CONFIG = sshpipe.TransferConfig(
    block_size=BLOCK, requests=8, local_io_in_thread=False, fsync=False, stall_timeout=5.0
)
DATA = os.urandom(200 * BLOCK)


async def test_lanes_are_added_while_the_controller_wants_more(tmp_path: Path) -> None:
    server = FakeServer({"/f": DATA}, Faults(delay=0.001))
    lease = await FakeLease.open(server, init_rtt=0.01, max_channels=4, can_grow=True)
    stats = await download(lease, "/f", str(tmp_path / "out"), CONFIG)
    assert (tmp_path / "out").read_bytes() == DATA
    assert lease.added == 3 and stats.channels == 4
    assert server.open_handles == 0  # every lane's handle closed


async def test_a_fixed_lease_is_never_asked_for_more(tmp_path: Path) -> None:
    server = FakeServer({"/f": DATA})
    lease = await FakeLease.open(server, init_rtt=0.01, max_channels=4, can_grow=False)
    stats = await download(lease, "/f", str(tmp_path / "out"), CONFIG)
    assert (tmp_path / "out").read_bytes() == DATA
    assert lease.asked == 0 and stats.channels == 1


async def test_a_refused_channel_stops_the_growth_not_the_transfer(tmp_path: Path) -> None:
    server = FakeServer({"/f": DATA}, Faults(delay=0.001))
    lease = await FakeLease.open(server, init_rtt=0.01, max_channels=4, can_grow=True, refuse=True)
    stats = await download(lease, "/f", str(tmp_path / "out"), CONFIG)
    assert (tmp_path / "out").read_bytes() == DATA
    assert stats.channels == 1
    assert lease.asked == 1  # refused once: never asked again
