"""The write pump against the in-memory server (no sockets).

SFTP v3 WRITEs are all or nothing, so there is no short write to re-ask; what
the pump must get right is the acknowledgements: in any order, a failure named
by its offset, and after a cut exactly the unacknowledged writes left to send.
"""

from __future__ import annotations

import os

import pytest

import sshpipe
from sshpipe.core import codec
from sshpipe.core.errors import ConnectionBroken, RemoteError
from sshpipe.testing.fakes import FakeLease, FakeServer, Faults
from sshpipe.transfer.lanes import open_lanes, sizing_for
from sshpipe.transfer.pumpsetup import pumping
from sshpipe.transfer.writepump import WritePump

BLOCK = 4096
CONFIG = sshpipe.TransferConfig(block_size=BLOCK, requests=8, stall_timeout=5.0)
FLAGS = codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_TRUNC


async def _write(lease: FakeLease, data: bytes, acked: list[int] | None = None) -> WritePump:
    """Send ``data`` to /out a block at a time through one pump; its pump after the drain.

    ``acked``: told the offset of each WRITE the server acknowledged.
    """
    sizing = await sizing_for(CONFIG, lease.channels[0], write=True)
    pump: WritePump | None = None
    try:
        async with pumping(lease, CONFIG, sizing, size=len(data)) as setup:
            handles = await open_lanes(setup.channels, "/out", FLAGS, codec.Attrs(), write=True)
            pump = setup.start(WritePump(setup.parts(handles)))
            if acked is not None:
                pump.on_acked = lambda offset, _: acked.append(offset)
            for offset in range(0, len(data), BLOCK):
                while pump.room() == 0 and pump.error is None:
                    await pump.wait()
                if pump.error is not None:
                    break
                pump.send(offset, data[offset : offset + BLOCK])
            await pump.drain()
    except BaseException as exc:
        exc.pump = pump  # type: ignore[attr-defined]
        raise
    return pump


async def test_acknowledgements_in_any_order_land_every_block() -> None:
    data = os.urandom(40 * BLOCK + 11)
    server = FakeServer(faults=Faults(jitter=0.003, seed=5))
    lease = await FakeLease.open(server)
    pump = await _write(lease, data)
    assert bytes(server.files["/out"]) == data
    assert server.reordered > 5
    assert pump.unacked == {} and pump.sent_bytes == len(data)
    assert server.open_handles == 0


async def test_a_refused_write_names_its_offset_and_closes_the_handle() -> None:
    server = FakeServer(faults=Faults(fail_writes={9 * BLOCK}))
    lease = await FakeLease.open(server)
    with pytest.raises(RemoteError, match="No space left on device") as caught:
        await _write(lease, os.urandom(30 * BLOCK))
    assert caught.value.offset == 9 * BLOCK
    pump = caught.value.pump  # type: ignore[attr-defined]
    assert 9 * BLOCK in pump.unacked  # never acknowledged: it would be sent again
    assert server.open_handles == 0


async def test_a_cut_leaves_exactly_the_unacknowledged_writes_to_send_again() -> None:
    data = os.urandom(30 * BLOCK)
    # Replies 0.2 s late: the writes sent with the one that is cut (a burst)
    # have landed and are still unanswered. At 1 ms, a loaded CI worker was
    # slow enough between sends that every landed write was answered first.
    server = FakeServer(faults=Faults(cut_after=12, delay=0.2))
    lease = await FakeLease.open(server)
    acked: list[int] = []
    with pytest.raises(ConnectionBroken) as caught:
        await _write(lease, data, acked)
    pump = caught.value.pump  # type: ignore[attr-defined]
    sent = {offset for offset in range(0, len(data), BLOCK) if offset < pump.sent_bytes}
    assert set(pump.unacked) == sent - set(acked)  # acknowledged ones are not owed
    landed = {s.offset for s in server.served if s.kind == "write"}
    assert set(pump.unacked) & landed  # written, but the ack was lost with the channel


@pytest.mark.parametrize("parked_first", [True, False])
async def test_a_lane_given_no_request_gets_none_and_no_channel_passes_its_cap(
    parked_first: bool,
) -> None:
    # Compression auto parks a file's lane on the other route with cap 0; the
    # 129th request of 128 went to such a lane (empty lanes "always take one").
    data = os.urandom(60 * BLOCK)
    server = FakeServer(faults=Faults(delay=0.002))
    lease = await FakeLease.open(server, channels=2, max_channels=2)
    sizing = await sizing_for(CONFIG, lease.channels[0], write=True)
    peak: dict[int, int] = {}
    async with pumping(lease, CONFIG, sizing, size=len(data)) as setup:
        handles = await open_lanes(lease.channels, "/out", FLAGS, codec.Attrs(), write=True)
        index = 0 if parked_first else 1
        handles.lanes[index].cap = 0
        pump = setup.start(WritePump(setup.parts(handles)))
        for offset in range(0, len(data), BLOCK):
            while pump.room() == 0 and pump.error is None:
                await pump.wait()
            pump.send(offset, data[offset : offset + BLOCK])
            for n, lane in enumerate(handles.lanes):
                peak[n] = max(peak.get(n, 0), lane.requests)
        await pump.drain()
    assert bytes(server.files["/out"]) == data
    assert peak[index] == 0
    assert max(peak.values()) <= CONFIG.requests
    assert pump.budget.peak_requests <= CONFIG.requests  # one lane carried it all
