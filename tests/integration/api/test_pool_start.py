"""A transfer's channels opened all at once at its start (``ChannelPool.lease(at_start=)``).

Against sshd (stock ``MaxSessions`` is what makes a second connection
necessary): the first channel is handed out at once, the others open
alongside without being asked, ``add`` takes them first, and what nobody
took goes back to the pool idle.
"""

from __future__ import annotations

import pytest

import sshpipe
from sshpipe.transfer.channelspec import channel_spec
from sshpipe.transfer.lanes import channels_at_start
from tests.support.peers import Peer
from tests.support.waits import eventually

MiB = 1024 * 1024
CONFIG = sshpipe.TransferConfig()
SPEC = channel_spec(CONFIG)  # what the pool reads of it


async def test_the_channels_wanted_at_the_start_open_alongside_the_first(
    openssh_peer: Peer,
) -> None:
    rtts: list[float] = []

    def at_start(rtt: float) -> int:
        rtts.append(rtt)
        return 4

    async with openssh_peer.client() as client:
        async with client._pool.lease(SPEC, at_start=at_start) as lease:
            assert len(lease.channels) == 1
            await eventually(lambda: len(lease.spares) == 3)  # nobody asked for them
            added = await lease.add(3)
            assert len(added) == 3 and lease.spares == []
            assert len(lease.channels) == 4
        assert 0 < rtts[0] < 1.0  # the log-in's round trip, on loopback
        assert "idle_channels=4" in client._pool.state


async def test_more_than_a_connection_carries_opens_a_second_at_the_start(
    openssh_peer: Peer,
) -> None:
    per_connection = CONFIG.channels_per_connection
    async with openssh_peer.client() as client:
        async with client._pool.lease(SPEC, at_start=lambda _: per_connection + 3) as lease:
            await eventually(lambda: len(lease.spares) == per_connection + 2)
            assert client.connections == 2
        assert f"idle_channels={per_connection + 3}" in client._pool.state


async def test_a_failed_transfer_raises_its_own_error_and_keeps_no_channel(
    openssh_peer: Peer,
) -> None:
    async with openssh_peer.client() as client:
        with pytest.raises(KeyError):  # itself, not an ExceptionGroup
            async with client._pool.lease(SPEC, at_start=lambda _: 3):
                raise KeyError("the transfer's own")
        assert "busy_channels=0" in client._pool.state


@pytest.mark.parametrize(
    ("rtt", "size", "write", "expected"),
    [
        pytest.param(0.0003, None, False, 1, id="loopback-get"),
        pytest.param(0.0003, 1 << 30, True, 1, id="loopback-put"),
        pytest.param(0.1, None, False, 1, id="100ms-get: 12.5 MB fits a 15 MiB window"),
        pytest.param(0.3, None, False, 3, id="300ms-get"),
        pytest.param(0.1, 128 * MiB, True, 5, id="100ms-put: 2.5 MiB per channel"),
        pytest.param(0.3, 64 * MiB, True, 15, id="300ms-put: two connections"),
        pytest.param(0.3, 1 * MiB, True, 1, id="300ms-put-small-file"),
        pytest.param(0.0, None, True, 1, id="no-rtt-known"),
    ],
)
def test_channels_at_start(rtt: float, size: int | None, write: bool, expected: int) -> None:
    assert channels_at_start(CONFIG, size=size, write=write)(rtt) == expected
