"""A cancelled transfer returns within a round trip; ``aclose()`` fails running ones as closed.

Through the link emulator (40 ms, 20 Mbit/s) in front of the real sshd. On
such a link the server queues megabytes of READ replies ahead of a CLOSE's
(the receive window allows it) and a put's REMOVE queues behind its WRITEs:
waiting for either took 1.4-2.2 s after the deadline. Now the CLOSEs (and
the REMOVE) are sent and not waited for; the channels settle in the pool. In
the end: no handle open on the server, no temp file on either side, no task,
and the client carries the next transfer whole.

The bounds are generous (a loaded CI box): measured, the exception comes
2-10 ms after the deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.linkemu import LinkEmulator, LinkSpec
from tests.support.files import leftover_temps, random_file
from tests.support.handles import PeakOpenFiles
from tests.support.peers import EmulatedLink, Peer

MiB = 1024 * 1024
RTT = 0.04
BOUND = RTT + 0.4  # the target is RTT + 0.1; this leaves room for a loaded machine
DEADLINE = 0.5
# 2 MiB in flight at most (on however many channels): what a cancel that
# waited would wait for (0.8 s of it at 20 Mbit/s) is still past the bound,
# and the settling after it stays short.
CONFIG = sshpipe.TransferConfig(
    window=2 * MiB, max_bytes_in_flight=2 * MiB, min_bytes_in_flight=MiB
)


@pytest.fixture
async def thin(
    openssh_peer: Peer, emulated_link: EmulatedLink
) -> AsyncIterator[tuple[LinkEmulator, Peer]]:
    async with emulated_link(openssh_peer, LinkSpec(rtt=RTT, rate=20e6)) as (emu, far):
        yield emu, far


def _open_on_server(peer: Peer) -> int:
    meter = PeakOpenFiles(peer.root)
    meter.sample()
    return meter.peak


async def _transfer(client: sshpipe.Client, far: Peer, direction: str, tmp_path: Path) -> None:
    if direction == "get":
        await client.get(far.remote("big.bin"), str(tmp_path / "got.bin"))
    elif direction == "put":
        await client.put(str(tmp_path / "up.bin"), far.remote("up.bin"))
    else:
        async with contextlib.aclosing(client.stream(far.remote("big.bin"))) as pieces:
            async for _ in pieces:
                pass


@pytest.mark.parametrize("direction", ["get", "put", "stream"])
async def test_a_timed_out_transfer_returns_within_a_round_trip_and_leaves_nothing(
    thin: tuple[LinkEmulator, Peer],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    direction: str,
) -> None:
    emu, far = thin
    random_file(far.root / "big.bin", 16 * MiB)
    random_file(tmp_path / "up.bin", 16 * MiB)
    small = random_file(far.root / "small.bin", 300_000)
    loop = asyncio.get_running_loop()
    async with far.client(CONFIG) as client:
        baseline = asyncio.all_tasks()
        carried = emu.stats.bytes_down + emu.stats.bytes_up
        started = loop.time()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(DEADLINE):
                await _transfer(client, far, direction, tmp_path)
        late = loop.time() - started - DEADLINE
        print(f"{direction}: raised {late * 1000:.0f} ms after the deadline")
        assert emu.stats.bytes_down + emu.stats.bytes_up - carried > MiB // 4  # mid-file
        assert late < BOUND
        assert asyncio.all_tasks() - baseline == set()
        assert leftover_temps(tmp_path) == [] and not (tmp_path / "got.bin").exists()
        # Its channels settle in the pool (nothing had to be closed for it) ...
        assert await client._pool._settling.wait(10.0) == 0
        assert _open_on_server(far) == 0
        assert leftover_temps(far.root) == [] and not (far.root / "up.bin").exists()
        # ... and carry the next transfer, every byte of it.
        got = b"".join([piece async for piece in client.stream(far.remote("small.bin"))])
        assert got == small
    assert client.left_temps == ()
    gc.collect()  # a future whose error nobody read says so when it is collected
    said = [r.getMessage() for r in caplog.records if r.name == "asyncio"]
    assert not [m for m in said if "never retrieved" in m or "was destroyed" in m], said


@pytest.mark.parametrize(
    ("direction", "mid_file"),
    [("get", False), ("stream", False), ("get", True), ("stream", True), ("put", True)],
)
async def test_closing_the_client_fails_running_transfers_as_closed(
    thin: tuple[LinkEmulator, Peer],
    tmp_path: Path,
    state_home: Path,
    direction: str,
    mid_file: bool,
) -> None:
    """Not ChannelRefused (a channel being opened as the connection closed) nor
    ConnectionBroken (retried, on a client that is closed), and at once; while its
    channels open (``mid_file`` False) or once its bytes flow."""
    emu, far = thin
    random_file(far.root / "big.bin", 16 * MiB)
    random_file(tmp_path / "up.bin", 16 * MiB)
    client = far.client(CONFIG)
    await client.open()
    carried = emu.stats.bytes_down + emu.stats.bytes_up
    task = asyncio.create_task(_transfer(client, far, direction, tmp_path))
    async with asyncio.timeout(10):
        # Polling: the emulator has no event for "so many bytes carried".
        while mid_file and emu.stats.bytes_down + emu.stats.bytes_up - carried < MiB // 4:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    closing = loop.time()
    await client.aclose()
    with pytest.raises(sshpipe.ClosedError) as raised:
        await task
    assert loop.time() - closing < BOUND
    assert not isinstance(raised.value, sshpipe.ConnectionBroken)
    assert leftover_temps(tmp_path) == [] and not (tmp_path / "got.bin").exists()
    # What the closed channel kept it from removing is recorded for the next upload.
    assert sorted(client.left_temps) == sorted(leftover_temps(far.root))
