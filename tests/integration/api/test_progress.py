"""``progress=`` on one file, a stream, a stream upload: what the callback is told, and when.

Against the real sshd and the embedded server; the reports' interval is shortened
(``sshpipe.transfer.progress.INTERVAL``) so a few MiB on loopback give many.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sshpipe
import sshpipe.transfer.progress
from sshpipe import Progress
from sshpipe.testing.faults import BLOCK, DropsConnection, DropsConnectionOnWrite, Tracker, factory
from sshpipe.transfer.progress import ProgressCallback
from tests.support.files import leftover_temps
from tests.support.peers import Peer, StartServer, write_source

MiB = 1024 * 1024
SIZE = 4 * MiB + 7


@pytest.fixture(autouse=True)
def often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sshpipe.transfer.progress, "INTERVAL", 0.001)


def recorder(kind: str) -> tuple[list[Progress], ProgressCallback]:
    seen: list[Progress] = []
    if kind == "sync":
        return seen, seen.append

    async def record(progress: Progress) -> None:
        seen.append(progress)
        await asyncio.sleep(0)

    return seen, record


def assert_reports(seen: list[Progress], size: int, path: str) -> None:
    """Monotonic, one final report at the end with everything done, the path named before."""
    assert len(seen) > 1
    assert [p.bytes_done for p in seen] == sorted(p.bytes_done for p in seen)
    assert [p.finished for p in seen] == [False] * (len(seen) - 1) + [True]
    last = seen[-1]
    assert (last.bytes_done, last.bytes_total, last.files_done, last.files_total) == (
        size,
        size,
        1,
        1,
    )
    assert last.scan_done and last.current == () and last.eta == 0.0 and last.elapsed > 0
    assert all(p.current == (path,) and p.files_done == 0 for p in seen[:-1])
    assert all(p.bytes_done <= p.bytes_total or not p.scan_done for p in seen)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_get_and_put_of_one_file_report_as_the_bytes_move(
    peer: Peer, tmp_path: Path, kind: str
) -> None:
    data = write_source(peer, SIZE)
    got, on_get = recorder(kind)
    sent, on_put = recorder(kind)
    async with peer.client() as client:
        await client.get(peer.remote("src.bin"), str(tmp_path / "got.bin"), progress=on_get)
        await client.put(str(tmp_path / "got.bin"), peer.remote("up.bin"), progress=on_put)
    assert (tmp_path / "got.bin").read_bytes() == data
    assert (peer.root / "up.bin").read_bytes() == data
    assert_reports(got, SIZE, peer.remote("src.bin"))
    assert_reports(sent, SIZE, str(tmp_path / "got.bin"))
    for seen in (got, sent):
        assert any(0 < p.bytes_done < SIZE for p in seen), "no report while the bytes moved"
        assert any(p.scan_done and p.bytes_total == SIZE for p in seen[:-1])  # size known early


async def test_a_stream_and_a_stream_upload_report_what_they_moved(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    peer = openssh_peer
    data = write_source(peer, SIZE)
    streamed, sent = [], []
    received = bytearray()
    async with peer.client() as client:
        async for piece in client.stream(peer.remote("src.bin"), progress=streamed.append):
            received += piece
            assert streamed[-1].bytes_done <= len(received)  # counted as yielded, not before

        async def pieces() -> AsyncIterator[bytes]:
            for start in range(0, len(data), 300_000):
                yield data[start : start + 300_000]

        await client.put_stream(pieces(), peer.remote("up.bin"), progress=sent.append)
    assert received == data and (peer.root / "up.bin").read_bytes() == data
    assert_reports(streamed, SIZE, peer.remote("src.bin"))
    assert_reports(sent, SIZE, peer.remote("up.bin"))
    # A stream upload's size is not known until its last byte is sent: no ETA before.
    growing = [p for p in sent if not p.scan_done]
    assert growing and all(p.eta is None and p.bytes_total == p.bytes_done for p in growing)


async def test_a_zero_byte_file_reports_its_end(asyncssh_peer: Peer, tmp_path: Path) -> None:
    peer = asyncssh_peer
    write_source(peer, 0, "empty")
    got: list[Progress] = []
    sent: list[Progress] = []
    async with peer.client() as client:
        await client.get(peer.remote("empty"), str(tmp_path / "empty"), progress=got.append)
        await client.put(str(tmp_path / "empty"), peer.remote("up"), progress=sent.append)
    assert (peer.root / "up").read_bytes() == b""
    for seen in (got, sent):
        assert seen[-1].finished and (seen[-1].files_done, seen[-1].bytes_done) == (1, 0)


async def test_a_slow_async_callback_is_skipped_not_queued(
    asyncssh_peer: Peer, tmp_path: Path
) -> None:
    peer = asyncssh_peer
    data = write_source(peer, SIZE)
    calls: list[Progress] = []
    running = 0

    async def slow(progress: Progress) -> None:
        nonlocal running
        running += 1
        assert running == 1, "two reports at once"
        calls.append(progress)
        await asyncio.sleep(0.05)
        running -= 1

    async with peer.client() as client:
        await client.get(peer.remote("src.bin"), str(tmp_path / "got.bin"), progress=slow)
    assert (tmp_path / "got.bin").read_bytes() == data
    assert calls[-1].finished and calls[-1].bytes_done == SIZE
    # One at a time, each 50 ms: never more calls than the time allowed.
    assert len(calls) <= calls[-1].elapsed / 0.05 + 2


async def test_a_callback_that_raises_fails_the_transfer(
    asyncssh_peer: Peer, tmp_path: Path
) -> None:
    peer = asyncssh_peer
    write_source(peer, SIZE)

    def fails(progress: Progress) -> None:
        if progress.bytes_done:
            raise ValueError("the user's callback broke")

    async def fails_later(progress: Progress) -> None:
        fails(progress)

    async with peer.client() as client:
        for callback in (fails, fails_later):
            with pytest.raises(ValueError, match="callback broke"):
                await client.get(peer.remote("src.bin"), str(tmp_path / "x"), progress=callback)
            with pytest.raises(ValueError, match="callback broke"):
                async for _ in client.stream(peer.remote("src.bin"), progress=callback):
                    pass
        # The client is still good for the next transfer.
        await client.get(peer.remote("src.bin"), str(tmp_path / "y"))
    assert not (tmp_path / "x").exists() and leftover_temps(tmp_path) == []


async def test_a_cancelled_transfer_leaves_no_report_task_behind(
    asyncssh_peer: Peer, tmp_path: Path
) -> None:
    peer = asyncssh_peer
    write_source(peer, SIZE)
    started = asyncio.Event()

    async def hangs(progress: Progress) -> None:
        started.set()
        await asyncio.sleep(3600)  # the transfer's cancel must end it too

    before = asyncio.all_tasks()
    async with peer.client(sshpipe.TransferConfig(block_size=BLOCK)) as client:
        task = asyncio.create_task(
            client.get(peer.remote("src.bin"), str(tmp_path / "x"), progress=hangs)
        )
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert asyncio.all_tasks() - before == set()
    assert not (tmp_path / "x").exists() and leftover_temps(tmp_path) == []


async def test_bytes_are_counted_once_through_a_reconnect(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    config = sshpipe.TransferConfig(block_size=BLOCK)
    data = os.urandom(SIZE)
    (tmp_path / "up.bin").write_bytes(data)
    got: list[Progress] = []
    sent: list[Progress] = []
    async with faulty_server(factory(DropsConnection, Tracker())) as peer:
        (peer.root / "src.bin").write_bytes(data)
        async with peer.client(config) as client:
            down = await client.get("/src.bin", str(tmp_path / "got.bin"), progress=got.append)
    async with faulty_server(factory(DropsConnectionOnWrite, Tracker())) as peer:
        async with peer.client(config) as client:
            up = await client.put(str(tmp_path / "up.bin"), "/up.bin", progress=sent.append)
        assert (peer.root / "up.bin").read_bytes() == data
    assert (tmp_path / "got.bin").read_bytes() == data
    assert down.reconnects == up.reconnects == 1
    assert_reports(got, SIZE, "/src.bin")
    assert_reports(sent, SIZE, str(tmp_path / "up.bin"))
