"""``Client.open``: random-access remote files against real servers.

Every byte is checked against the local source. The request counts come from
``RemoteFile.stats`` and, on the embedded server, from what the server itself
served (``Tracker``), so read-ahead and seeks are seen from both ends.
"""

from __future__ import annotations

import asyncio
import os
import random
import tracemalloc

import pytest

import sshpipe
from sshpipe.testing.faults import (
    BLOCK,
    OverlongReads,
    ShortReads,
    Slow,
    Tracker,
    TrackingServer,
    factory,
)
from tests.support.files import random_file
from tests.support.peers import ALL_SERVER_PARAMS, Peer, StartServer, write_source
from tests.support.waits import eventually

KiB, MiB = 1024, 1024 * 1024
SMALL_BLOCKS = sshpipe.TransferConfig(block_size=BLOCK)


@pytest.fixture(params=ALL_SERVER_PARAMS)
def server(request: pytest.FixtureRequest) -> Peer:
    peer: Peer = request.getfixturevalue(f"{request.param}_peer")
    return peer


async def test_every_way_of_reading_gives_the_files_bytes(server: Peer) -> None:
    """read, seek, pread and read_ranges, at sizes around the block, on every server."""
    size = 5 * BLOCK + 1
    data = random_file(server.root / "src.bin", size)
    ranges = [(BLOCK - 1, 2), (0, 1), (3 * BLOCK, BLOCK + 1), (10, 5), (size - 3, 10)]
    async with server.client(SMALL_BLOCKS) as sp, sp.open(server.remote("src.bin")) as f:
        assert f.size == size and f.name == server.remote("src.bin") and f.mode == "rb"
        pieces = []
        while piece := await f.read(BLOCK - 1):
            pieces.append(piece)
        assert b"".join(pieces) == data and f.tell() == size
        assert f.seek(-BLOCK - 2, 2) == size - BLOCK - 2
        assert await f.read(BLOCK + 10) == data[-BLOCK - 2 :]
        f.seek(BLOCK)
        assert await f.read(3) == data[BLOCK : BLOCK + 3]
        assert f.seek(2, 1) == BLOCK + 5
        assert await f.pread(2 * BLOCK, BLOCK + 1) == data[2 * BLOCK : 3 * BLOCK + 1]
        assert f.tell() == BLOCK + 5  # pread does not move the position
        assert await f.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]


async def test_concurrent_preads_and_ranges_past_the_end(peer: Peer) -> None:
    size = 3 * MiB + 7
    data = random_file(peer.root / "src.bin", size)
    rng = random.Random(5)
    wanted = [(rng.randrange(size + 100), rng.randrange(300 * KiB)) for _ in range(60)]
    async with peer.client() as sp, sp.open(peer.remote("src.bin")) as f:
        got = await asyncio.gather(*(f.pread(o, n) for o, n in wanted))
        assert got == [data[o : o + n] for o, n in wanted]
        ranges = [(size - 5, 100), (0, 10), (size + 10, 10), (5, 20), (MiB, 2 * MiB)]
        assert await f.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
        assert await f.pread(size, 10) == b"" and await f.read_ranges([]) == []
        with pytest.raises(sshpipe.UsageError):
            await f.read_ranges([(-1, 5)])


async def test_a_ranged_read_moves_only_its_range(faulty_server: StartServer) -> None:
    tracker = Tracker()
    async with faulty_server(factory(TrackingServer, tracker)) as peer:
        data = write_source(peer, 40 * BLOCK)
        async with peer.client(SMALL_BLOCKS) as sp, sp.open("/src.bin") as f:
            ranges = [(7 * BLOCK + 5, 100), (30 * BLOCK, 2 * BLOCK), (7 * BLOCK, 50)]
            assert await f.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
            # Overlapping ranges read once; the big one in blocks, all sent at once.
            assert f.stats.bytes_received == 105 + 2 * BLOCK
            assert tracker.reads == f.stats.requests == 3


async def test_short_reads_are_asked_again_and_reassembled(
    faulty_server: StartServer,
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(ShortReads, tracker)) as peer:
        data = write_source(peer, 6 * BLOCK + 3)
        async with peer.client(SMALL_BLOCKS) as sp, sp.open("/src.bin") as f:
            assert await f.pread(100, 3 * BLOCK) == data[100 : 100 + 3 * BLOCK]
            ranges = [(5 * BLOCK, 2 * BLOCK), (0, 9000), (4000, 10)]
            assert await f.read_ranges(ranges) == [data[o : o + n] for o, n in ranges]
            assert await f.read() == data
            assert f.stats.short_reads_reissued > 20
            assert tracker.reads == f.stats.requests


async def test_sequential_small_reads_come_from_the_read_ahead(
    faulty_server: StartServer,
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(TrackingServer, tracker)) as peer:
        data = write_source(peer, 64 * BLOCK)
        async with peer.client(SMALL_BLOCKS) as sp, sp.open("/src.bin") as f:
            pieces = [await f.read(1000) for _ in range(len(data) // 1000 + 2)]
            assert b"".join(pieces) == data
            # 2100 reads, one READ per block (and the EOF's), not one per read.
            assert tracker.reads == f.stats.requests <= 64 + 2
            assert f.stats.bytes_received == len(data)
            assert BLOCK < f.stats.peak_read_ahead <= 8 * MiB  # grown, within the default


async def test_seeking_reads_keep_the_read_ahead_small(faulty_server: StartServer) -> None:
    tracker = Tracker()
    async with faulty_server(factory(TrackingServer, tracker)) as peer:
        data = write_source(peer, 64 * BLOCK)
        rng = random.Random(3)
        async with peer.client(SMALL_BLOCKS) as sp, sp.open("/src.bin") as f:
            for _ in range(50):
                offset = rng.randrange(len(data))
                f.seek(offset)
                assert await f.read(500) == data[offset : offset + 500]
            stats = f.stats
        # Nothing is read ahead of a seek: each read moves its own bytes.
        assert stats.seeks >= 49 and stats.peak_read_ahead <= BLOCK
        assert stats.bytes_received <= 50 * 500 + BLOCK


async def test_write_modes_round_trip_with_backpressure(peer: Peer) -> None:
    data = os.urandom(6 * MiB + 5)
    config = sshpipe.TransferConfig(block_size=64 * KiB, max_bytes_in_flight=512 * KiB)
    path = peer.remote("out.bin")
    async with peer.client(config) as sp:
        async with sp.open(path, "wb") as w:
            assert await w.write(data[:10]) == 10
            await w.write(data[10 : 4 * MiB])  # one big write, sent a block at a time
            for at in range(4 * MiB, len(data), 99_999):
                await w.write(memoryview(data)[at : at + 99_999])
            assert w.tell() == len(data) == w.size
        assert (peer.root / "out.bin").read_bytes() == data
        assert w.stats.bytes_written == len(data)
        # The budget held: a block more than it at most (the one always allowed).
        assert w.stats.peak_bytes_in_flight <= 512 * KiB + 64 * KiB
        async with sp.open(path, "ab") as a:
            assert a.tell() == len(data)
            await a.write(b"tail")
        assert (peer.root / "out.bin").read_bytes() == data + b"tail"
        with pytest.raises(sshpipe.RemoteExists):
            await sp.open(path, "xb")
        async with sp.open(peer.remote("new.bin"), "xb") as x:
            await x.write(b"fresh")
            with pytest.raises(sshpipe.UsageError):
                await x.read(1)
            with pytest.raises(sshpipe.UsageError):
                x.seek(0)
        assert (peer.root / "new.bin").read_bytes() == b"fresh"
        async with sp.open(path, "wb") as w:
            pass  # truncated
        assert (peer.root / "out.bin").read_bytes() == b""


async def test_closing_twice_using_after_and_a_closed_client(peer: Peer) -> None:
    data = random_file(peer.root / "src.bin", 100_000)
    sp = peer.client()
    async with sp:
        f = await sp.open(peer.remote("src.bin"))
        assert await f.read(10) == data[:10]
        await f.aclose()
        await f.aclose()
        assert f.closed
        with pytest.raises(sshpipe.ClosedError):
            await f.read(1)
        with pytest.raises(sshpipe.ClosedError):
            f.tell()
        with pytest.raises(sshpipe.RemoteNotFound):
            await sp.open(peer.remote("missing"))
        with pytest.raises(sshpipe.RemoteIsADirectory):
            await sp.open(peer.remote(""))
        with pytest.raises(sshpipe.UsageError):
            sp.open(peer.remote("src.bin"), "r+")
        with pytest.raises(sshpipe.UsageError):
            sp.open(peer.remote("src.bin"), read_ahead=-1)
        left = await sp.open(peer.remote("src.bin"))
    with pytest.raises(sshpipe.ClosedError):
        await left.pread(0, 10)
    await left.aclose()  # after its client closed: nothing to do, no error


async def test_cancelled_reads_and_opens_leave_no_handle_open(
    faulty_server: StartServer,
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(Slow, tracker)) as peer:
        data = write_source(peer, 80 * BLOCK)
        async with peer.client(SMALL_BLOCKS) as sp:
            async with sp.open("/src.bin") as f:
                task = asyncio.ensure_future(f.pread(0, len(data)))
                await eventually(lambda: tracker.reads > 3)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                assert await f.read(BLOCK) == data[:BLOCK]  # the file still works
            opening = asyncio.ensure_future(sp.open("/src.bin").__aenter__())
            await asyncio.sleep(0)
            opening.cancel()
            with pytest.raises(asyncio.CancelledError):
                await opening
            await eventually(lambda: tracker.open_handles == 0)


async def test_an_overlong_reply_is_a_protocol_error(faulty_server: StartServer) -> None:
    async with faulty_server(factory(OverlongReads, Tracker())) as peer:
        write_source(peer, 8 * BLOCK)
        async with peer.client(SMALL_BLOCKS) as sp, sp.open("/src.bin") as f:
            with pytest.raises(sshpipe.ProtocolError):
                await f.pread(0, 8 * BLOCK)


async def test_a_big_sequential_read_stays_within_its_read_ahead(asyncssh_peer: Peer) -> None:
    peer, size, read_ahead = asyncssh_peer, 10 * MiB, 1 * MiB
    data = random_file(peer.root / "big.bin", size)
    async with peer.client() as sp, sp.open(peer.remote("big.bin"), read_ahead=read_ahead) as f:
        await f.read(1)  # the engine loaded, the channel open: not counted
        tracemalloc.start()
        try:
            at = 1
            while piece := await f.read(64 * KiB):
                assert piece == data[at : at + len(piece)]
                at += len(piece)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert at == size and f.stats.peak_read_ahead == read_ahead
    # The read-ahead, a block and the read itself, with the server's side
    # (in this process) as much again: nowhere near the file's 10 MiB.
    assert peak < 4 * read_ahead + 2 * MiB, peak
