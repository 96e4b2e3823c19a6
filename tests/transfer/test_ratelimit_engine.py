"""The rate limit in the pumps, against the in-memory server: requests paced from the first,
one bucket for every request of a lease (reconnects included), nothing left after a cancel."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

import sshpipe
from sshpipe.core.ratelimit import TokenBucket
from sshpipe.testing.fakes import FakeLease, FakeServer, Faults
from sshpipe.transfer.download import download
from sshpipe.transfer.stream import stream
from sshpipe.transfer.upload import upload
from sshpipe.transport.pacing import Pacer
from sshpipe.transport.sftp import SFTPSession

RATE = 2_000_000  # bytes/s: 50 ms of it (the burst) is 100 KB
CONFIG = sshpipe.TransferConfig(
    block_size=256 * 1024,
    requests=64,
    local_io_in_thread=False,
    fsync=False,
    stall_timeout=5.0,
    rate_limit=RATE,
)


def _sent_by(server: FakeServer, kind: str) -> int:
    return sum(s.length for s in server.served if s.kind == kind)


class LendingBucket(TokenBucket):
    """Records what it held when its first request spent from it."""

    lent: float | None = None

    def _refill(self, now: float) -> None:
        super()._refill(now)
        if self.spent == 0:
            self.lent = self.tokens


async def test_a_download_and_an_upload_are_paced_from_their_first_request(
    tmp_path: Path,
) -> None:
    data = os.urandom(600_000)
    server = FakeServer({"/f": data})
    pacer = Pacer(RATE)
    bucket = pacer.bucket  # the same one, but telling what it lent
    pacer.bucket = LendingBucket(RATE, bucket.burst, now=bucket.stamp, start=bucket.start)
    lease = await FakeLease.open(server)
    lease.pacer = pacer
    started = time.monotonic()
    stats = await download(lease, "/f", str(tmp_path / "got"), CONFIG)
    down = time.monotonic() - started
    assert (tmp_path / "got").read_bytes() == data
    assert stats.block_size == 49152  # 25 ms of the rate, not the 256 KiB asked for
    # The bucket lent its burst and the set-up before the first READ, no more: what
    # it held then, read off it (the set-up's length is the machine's, not ours).
    lent = pacer.bucket.lent
    assert lent is not None and lent <= pacer.bucket.start
    assert down >= (len(data) - lent) / RATE
    assert stats.peak_bytes_in_flight <= lent + stats.block_size
    started = time.monotonic()
    await upload(lease, str(tmp_path / "got"), "/back", CONFIG)
    up = time.monotonic() - started
    assert bytes(server.files["/back"]) == data
    # One bucket for both: the upload found it empty, with nothing to lend.
    assert up >= (len(data) - pacer.bucket.burst) / RATE
    assert pacer.bucket.spent >= 2 * len(data)


async def test_a_cancelled_paced_stream_leaves_nothing_on_the_loop() -> None:
    data = os.urandom(2_000_000)  # a second at the limit: cancelled well before
    server = FakeServer({"/f": data})
    lease = await FakeLease.open(server)
    lease.pacer = Pacer(RATE)
    got = bytearray()

    async def read() -> None:
        async for piece in stream(lease, "/f", CONFIG):
            got.extend(piece)

    task = asyncio.create_task(read())
    await asyncio.sleep(0.2)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert 0 < len(got) < len(data)
    assert got == data[: len(got)]
    # The pump's wake-up for its next tokens was cancelled with it, not left to fire.
    loop = asyncio.get_running_loop()
    assert isinstance(loop, asyncio.BaseEventLoop)  # whose timers are in ``_scheduled``
    pending = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    assert not any("_tokens_came" in repr(h) for h in pending), pending
    asked = _sent_by(server, "read")
    await asyncio.sleep(0.1)
    assert _sent_by(server, "read") == asked  # and nothing more was asked


async def test_a_reconnect_pays_once_for_each_read_it_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens are taken as a READ leaves, once: the ranges a cut lost are paid again (they
    cross the link again), nothing else; the bucket outlives the pump of each attempt."""
    data = os.urandom(400_000)
    server = FakeServer({"/f": data}, Faults(cut_after=3, jitter=0.001))
    lease = await FakeLease.open(server)
    lease.pacer = pacer = Pacer(RATE)
    sent: list[int] = []
    original = SFTPSession.send_read

    def counted(self: SFTPSession, handle: bytes, offset: int, length: int, *rest: Any) -> None:
        sent.append(length)
        original(self, handle, offset, length, *rest)

    monkeypatch.setattr(SFTPSession, "send_read", counted)
    await download(lease, "/f", str(tmp_path / "got"), CONFIG)
    assert (tmp_path / "got").read_bytes() == data
    assert lease.recovered == [False]  # one reconnect
    assert sum(sent) > len(data)  # what the cut lost was asked again...
    assert pacer.bucket.spent == sum(sent)  # ...and paid for exactly once per READ sent
