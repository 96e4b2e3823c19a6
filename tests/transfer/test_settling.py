"""Settling: a cancelled transfer leaves at once; its channel owes replies until they are in.

Against the in-memory server (replies ``DELAY`` seconds late): a cancelled
download returns without waiting for its READs' replies or its CLOSE, its
channel marked ``unsettled`` with replies owed; ``Settling`` hands it back only
once the last of them (the CLOSE's) is in, a late OPEN's answer is closed when
it comes, and a channel that never settles is aborted at the deadline or
closed by ``wait``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest

import sshpipe
from sshpipe.core import codec
from sshpipe.testing.fakes import FakeLease, FakePipe, FakeServer, Faults
from sshpipe.transfer.download import download
from sshpipe.transfer.stream import stream
from sshpipe.transport import settling
from sshpipe.transport.settling import Settling
from sshpipe.transport.sftp import SFTPSession

BLOCK = 4096
DELAY = 0.2  # each reply's: the cancel must not wait for it
CONFIG = sshpipe.TransferConfig(
    block_size=BLOCK, requests=8, local_io_in_thread=False, fsync=False, stall_timeout=5.0
)


async def _reading(server: FakeServer, direction: str, lease: FakeLease, tmp_path: Path) -> None:
    if direction == "get":
        await download(lease, "/f", str(tmp_path / "out.bin"), CONFIG)
    else:
        async with contextlib.aclosing(stream(lease, "/f", CONFIG)) as pieces:
            async for _ in pieces:
                pass


def _read(sftp: SFTPSession, handle: bytes) -> asyncio.Future[codec.Reply]:
    return sftp.request(lambda rid: codec.encode_read(rid, handle, 0, 10))


@pytest.mark.parametrize("direction", ["get", "stream"])
async def test_a_cancelled_read_leaves_at_once_and_its_channel_settles(
    tmp_path: Path, direction: str
) -> None:
    server = FakeServer({"/f": os.urandom(64 * BLOCK)}, Faults(delay=DELAY))
    lease = await FakeLease.open(server)
    sftp = lease.channels[0]
    task = asyncio.create_task(_reading(server, direction, lease, tmp_path))
    # Polling: the fake server has no event for "a READ was served".
    while not any(s.kind == "read" for s in server.served):  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    loop = asyncio.get_running_loop()
    cancelled_at = loop.time()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert loop.time() - cancelled_at < DELAY / 2  # no reply was waited for
    assert sftp.unsettled and sftp.pending > 1  # the READs' and the CLOSE's answers owed
    assert os.listdir(tmp_path) == []  # nothing local left behind

    given_back = asyncio.Event()
    pool = Settling()
    pool.add(sftp, given_back.set)
    assert len(pool) == 1
    async with asyncio.timeout(5):
        await given_back.wait()
    assert (sftp.pending, sftp.unsettled, len(pool), sftp.broken) == (0, False, 0, None)
    assert server.open_handles == 0
    # The channel works for the next transfer, whose bytes are whole.
    server.faults.delay = 0.0
    server.files["/g"] = bytearray(data := os.urandom(10 * BLOCK + 5))
    got = b"".join([piece async for piece in stream(lease, "/g", CONFIG)])
    assert got == data


async def test_a_late_open_answer_is_closed_and_waited_for_by_the_settling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = FakeServer({"/f": b"x" * 100})
    sftp = await server.channel()
    send = FakePipe.send  # every answer DELAY late from now on, the OPEN's too
    monkeypatch.setattr(FakePipe, "send", lambda pipe, *a: send(pipe, a[0], a[1] + DELAY, *a[2:]))
    # An OPEN's sender cancelled before its answer: the answer (the handle)
    # comes with the settling, and its CLOSE is owed then too.
    opening = asyncio.create_task(sftp.open("/f", codec.FXF_READ))
    await asyncio.sleep(0)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert sftp.unsettled and sftp.pending == 1
    assert server.open_handles == 1  # the server did open it
    settled = asyncio.Event()
    Settling().add(sftp, settled.set)
    async with asyncio.timeout(5):
        await settled.wait()
    assert server.open_handles == 0  # the handle the late answer named was closed
    assert sftp.pending == 0 and sftp.broken is None


async def test_a_channel_that_never_settles_is_aborted_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(settling, "SETTLE_TIMEOUT", 0.05)
    server = FakeServer({"/f": b"x" * 100}, Faults(silent_after=0))
    sftp = await server.channel()
    sftp.settle_later(_read(sftp, await sftp.open("/f", codec.FXF_READ)))  # never answered
    settled = asyncio.Event()
    Settling().add(sftp, settled.set)
    async with asyncio.timeout(5):
        await settled.wait()
    assert isinstance(sftp.broken, sshpipe.Stalled)  # retryable for any other user of it


async def test_wait_closes_what_has_not_settled_in_time_and_says_how_many() -> None:
    server = FakeServer({"/f": b"x" * 100}, Faults(silent_after=0))
    quick, stuck = await server.channel(), await server.channel()
    pool = Settling()
    handed: list[str] = []
    pool.add(quick, lambda: handed.append("quick"))  # owes nothing: settles at once
    stuck.settle_later(_read(stuck, await stuck.open("/f", codec.FXF_READ)))
    pool.add(stuck, lambda: handed.append("stuck"))
    assert await pool.wait(0.05) == 1
    assert handed == ["quick", "stuck"] and len(pool) == 0
    assert isinstance(stuck.broken, sshpipe.ClosedError) and quick.broken is None
