"""The read pump and the one read loop, against the in-memory server (no sockets).

Short reads are asked again at exactly ``offset + received``, replies in any
order are put back in order, EOF ends the file where the server says, errors
name their offset and leave no handle open, a silent server is a stall.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import sshpipe
from sshpipe.core import codec
from sshpipe.core.errors import RemoteError, Stalled
from sshpipe.core.readplan import ReadPlan
from sshpipe.testing.fakes import FakeLease, FakeServer, Faults
from sshpipe.transfer.download import download
from sshpipe.transfer.lanes import open_lanes, sizing_for
from sshpipe.transfer.pumpsetup import pumping
from sshpipe.transfer.readpump import ReadPump
from sshpipe.transfer.stream import stream

BLOCK = 4096
CONFIG = sshpipe.TransferConfig(
    block_size=BLOCK, requests=8, local_io_in_thread=False, fsync=False, stall_timeout=5.0
)


async def _streamed(lease: FakeLease, path: str, config: sshpipe.TransferConfig = CONFIG) -> bytes:
    async with asyncio.timeout(5):
        return b"".join([piece async for piece in stream(lease, path, config)])


def _reads_tile_the_file(server: FakeServer, size: int) -> bool:
    """Every byte was answered by exactly one READ: each re-ask began where the data ended."""
    answered = sorted(
        (s.offset, s.answered) for s in server.served if s.kind == "read" and s.answered
    )
    cursor = 0
    for offset, count in answered:
        if offset != cursor:
            return False
        cursor += count
    return cursor == size


async def test_short_reads_are_asked_again_for_exactly_the_rest() -> None:
    data = os.urandom(25 * BLOCK + 123)
    server = FakeServer({"/f": data}, Faults(short=1000))
    lease = await FakeLease.open(server)
    assert await _streamed(lease, "/f") == data
    assert _reads_tile_the_file(server, len(data))
    assert server.open_handles == 0


async def test_a_download_of_short_reads_writes_the_file(tmp_path: Path) -> None:
    data = os.urandom(10 * BLOCK + 7)
    server = FakeServer({"/f": data}, Faults(short=999))
    lease = await FakeLease.open(server)
    stats = await download(lease, "/f", str(tmp_path / "out"), CONFIG)
    assert (tmp_path / "out").read_bytes() == data
    assert stats.short_reads_reissued > 10
    assert _reads_tile_the_file(server, len(data))


async def test_replies_in_any_order_come_out_in_order() -> None:
    data = os.urandom(40 * BLOCK + 5)
    server = FakeServer({"/f": data}, Faults(jitter=0.003, seed=3))
    lease = await FakeLease.open(server)
    assert await _streamed(lease, "/f") == data
    assert server.reordered > 5  # the fault really happened


@pytest.mark.parametrize("size", [0, 1, BLOCK, 3 * BLOCK + 5])
async def test_eof_ends_the_file_where_the_server_says(size: int) -> None:
    data = os.urandom(size)
    server = FakeServer({"/f": data})
    lease = await FakeLease.open(server)
    assert await _streamed(lease, "/f") == data


async def test_a_failed_read_names_its_offset_and_closes_the_handle() -> None:
    server = FakeServer({"/f": os.urandom(20 * BLOCK)}, Faults(fail_reads={7 * BLOCK}))
    lease = await FakeLease.open(server)
    with pytest.raises(RemoteError) as caught:
        await _streamed(lease, "/f")
    assert (caught.value.offset, caught.value.reason) == (7 * BLOCK, "injected read failure")
    assert server.open_handles == 0


async def test_a_missing_file_is_not_retried() -> None:
    server = FakeServer({})
    lease = await FakeLease.open(server)
    with pytest.raises(sshpipe.RemoteNotFound):
        await _streamed(lease, "/nothing")
    assert lease.recovered == []


async def test_a_silent_server_is_a_stall_within_the_timeout() -> None:
    server = FakeServer({"/f": os.urandom(50 * BLOCK)}, Faults(silent_after=10))
    lease = await FakeLease.open(server, stall_timeout=0.2)
    config = sshpipe.TransferConfig(block_size=BLOCK, requests=8, stall_timeout=0.2, retries=0)
    started = asyncio.get_running_loop().time()
    with pytest.raises(Stalled):
        await _streamed(lease, "/f", config)
    assert asyncio.get_running_loop().time() - started < 2


async def test_a_stream_goes_on_after_a_stall_at_the_first_byte_not_yielded() -> None:
    data = os.urandom(50 * BLOCK)
    server = FakeServer({"/f": data}, Faults(silent_after=10, jitter=0.001))
    lease = await FakeLease.open(server, stall_timeout=0.2)
    config = sshpipe.TransferConfig(block_size=BLOCK, requests=8, stall_timeout=0.2)
    assert await _streamed(lease, "/f", config) == data
    assert lease.recovered == [True]  # one reconnect, after a stall


async def test_a_stream_goes_on_after_a_cut_without_yielding_twice() -> None:
    data = os.urandom(50 * BLOCK + 9)
    server = FakeServer({"/f": data}, Faults(cut_after=20, jitter=0.001))
    lease = await FakeLease.open(server)
    assert await _streamed(lease, "/f") == data
    assert lease.recovered == [False]


async def test_a_lane_given_no_request_gets_no_read() -> None:
    # Compression auto's parked lane (cap 0) on the other route: with the live
    # lane at its request cap, the empty parked one took the 129th READ of 128.
    data = os.urandom(80 * BLOCK)
    server = FakeServer(files={"/f": data}, faults=Faults(delay=0.002))
    lease = await FakeLease.open(server, channels=2, max_channels=2)
    sizing = await sizing_for(CONFIG, lease.channels[0], write=False)
    got = bytearray()
    async with pumping(lease, CONFIG, sizing) as setup:
        handles = await open_lanes(lease.channels, "/f", codec.FXF_READ, codec.Attrs(), write=False)
        parked = handles.lanes[1]
        parked.cap = 0
        plan = ReadPlan(block_size=sizing.block, size_hint=len(data))
        pump = setup.start(ReadPump(setup.parts(handles), plan))
        async for pieces in pump.arrivals():
            assert parked.requests == 0 and pump.budget.requests <= CONFIG.requests
            for offset, chunks, length in sorted(pieces, key=lambda piece: piece[0]):
                assert offset == len(got)  # the fake answers in order (no jitter)
                got += b"".join(bytes(chunk) for chunk in chunks)
                pump.free(length)
    assert bytes(got) == data
    assert pump.budget.peak_requests <= CONFIG.requests  # one lane carried it all
