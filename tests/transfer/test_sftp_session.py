"""SFTPSession against a hostile byte stream: replies nobody asked for, malformed ones.

A fake pipe stands in for the SSH channel (these are unit tests of the session
layer); what the server says is fed to ``data_received`` byte for byte.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

import sshpipe
from sshpipe.core import codec
from sshpipe.transport.replies import ReplyClock
from sshpipe.transport.sftp import SFTPSession


class Pipe:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    def write(self, data: bytes, payload: bytes | memoryview = b"") -> None:
        self.sent.append(data + payload)

    def close(self) -> None:
        self.closed = True


def status(request_id: int, code: int = codec.FX_OK) -> bytes:
    body = struct.pack(">BII", codec.FXP_STATUS, request_id, code) + b"\0\0\0\0" * 2
    return struct.pack(">I", len(body)) + body


def data_reply(request_id: int, payload: bytes) -> bytes:
    body = struct.pack(">BII", codec.FXP_DATA, request_id, len(payload)) + payload
    return struct.pack(">I", len(body)) + body


async def _session() -> tuple[SFTPSession, Pipe]:
    pipe = Pipe()
    return SFTPSession(pipe, name="test"), pipe


async def test_a_reply_to_a_request_never_sent_breaks_the_session() -> None:
    sftp, pipe = await _session()
    pending = sftp.request(lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, b"h"))
    sftp.data_received(status(4242))  # we sent id 0 only
    with pytest.raises(sshpipe.ProtocolError, match="unknown request id 4242"):
        await pending
    assert pipe.closed and isinstance(sftp.broken, sshpipe.ProtocolError)
    assert not sshpipe.ProtocolError.retryable  # a hostile server is not reconnected to


async def test_a_reply_answered_twice_breaks_the_session() -> None:
    sftp, pipe = await _session()
    first = sftp.request(lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, b"h"))
    second = sftp.request(lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, b"h"))
    sftp.data_received(status(0) + status(0))
    assert (await first).code == codec.FX_OK  # type: ignore[union-attr]
    with pytest.raises(sshpipe.ProtocolError):
        await second
    assert pipe.closed


def _data_claiming(claimed: int, payload: bytes) -> bytes:
    """A DATA reply whose inner length disagrees with its packet's."""
    body = struct.pack(">BII", codec.FXP_DATA, 0, claimed) + payload
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">I", 2**31) + b"\x65",  # a length far beyond any packet
        struct.pack(">IB", 9, 250) + b"\0" * 8,  # a message type SFTP v3 does not have
        _data_claiming(100, b"x"),  # says 100 bytes, carries 1
    ],
)
async def test_malformed_bytes_fail_every_pending_request(garbage: bytes) -> None:
    sftp, pipe = await _session()
    pending = [
        sftp.request(lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, b"h"))
        for _ in range(3)
    ]
    sftp.data_received(garbage)
    for future in pending:
        with pytest.raises(sshpipe.ProtocolError, match="malformed"):
            await asyncio.wait_for(future, 1)
    assert pipe.closed


def _stat(rid: int) -> bytes:
    return codec.encode_path_request(codec.FXP_STAT, rid, b"/")


async def test_a_session_we_close_fails_its_requests_as_closed_not_broken() -> None:
    sftp, pipe = await _session()
    pending = sftp.request(_stat)
    sftp.close()
    with pytest.raises(sshpipe.ClosedError) as raised:
        await pending
    assert not isinstance(raised.value, sshpipe.ConnectionBroken)
    assert not raised.value.retryable  # nothing to reconnect for: we closed it
    assert pipe.closed
    with pytest.raises(sshpipe.ClosedError):
        sftp.request(_stat)  # and it stays closed


async def test_a_session_given_up_on_fails_its_requests_with_the_cause() -> None:
    sftp, _ = await _session()
    pending = sftp.request(_stat)
    sftp.abort(sshpipe.Stalled("no reply"))
    with pytest.raises(sshpipe.Stalled) as raised:
        await pending
    assert raised.value.retryable
    sftp.close()  # after the cause: the cause stays
    assert isinstance(sftp.broken, sshpipe.Stalled)


async def test_the_watchdog_fails_a_silent_session_as_stalled() -> None:
    pipe = Pipe()
    sftp = SFTPSession(pipe, name="test", stall_timeout=0.05)
    with pytest.raises(sshpipe.Stalled) as raised:
        async with asyncio.timeout(5):
            await sftp.request(_stat)
    assert raised.value.retryable and pipe.closed


async def _trickle(sftp: SFTPSession, reply: bytes, *, every: float, until: float) -> None:
    """Feed ``reply`` to ``sftp`` one byte every ``every`` seconds, for ``until`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + until
    for byte in reply[:-1]:
        if loop.time() >= end or sftp.broken is not None:
            return
        sftp.data_received(bytes([byte]))
        await asyncio.sleep(every)


async def test_a_reply_trickled_a_byte_at_a_time_is_a_stall() -> None:
    """Bytes keep coming but no reply ever completes: the watchdog still fires."""
    sftp = SFTPSession(Pipe(), name="test", stall_timeout=0.2)
    pending = sftp.request(_stat)
    await _trickle(sftp, status(0) * 50, every=0.01, until=2.0)
    with pytest.raises(sshpipe.Stalled):
        async with asyncio.timeout(1):
            await pending


async def test_a_channel_waiting_behind_its_siblings_is_not_a_stall() -> None:
    """Its reply arrives slowly while another channel of the connection completes
    replies (a thin link shared by big windows): that is no stall."""
    clock = ReplyClock(asyncio.get_running_loop().time())
    slow = SFTPSession(Pipe(), name="slow", stall_timeout=0.2, replies=clock)
    busy = SFTPSession(Pipe(), name="busy", stall_timeout=0.2, replies=clock)
    pending = slow.request(_stat)

    async def answer_busy() -> None:
        for request_id in range(40):
            reply = busy.request(_stat)
            busy.data_received(status(request_id))
            await reply
            await asyncio.sleep(0.02)

    reply = data_reply(0, b"x" * 30)
    async with asyncio.TaskGroup() as group:
        group.create_task(answer_busy())
        group.create_task(_trickle(slow, reply, every=0.02, until=5.0))
    slow.data_received(reply[-1:])
    assert isinstance(await pending, codec.Data)  # 0.8 s for one reply, never stalled


def version_reply() -> bytes:
    body = struct.pack(">BI", codec.FXP_VERSION, codec.SFTP_VERSION)
    return struct.pack(">I", len(body)) + body


async def test_an_init_never_answered_fails_the_start_as_stalled() -> None:
    """INIT is no request with an id, yet it is owed: the start has a deadline."""
    pipe = Pipe()
    sftp = SFTPSession(pipe, name="test", stall_timeout=0.1)
    with pytest.raises(sshpipe.Stalled, match=r"no answer to SFTP INIT in 0\.1 s") as raised:
        async with asyncio.timeout(5):
            await sftp.start()
    assert raised.value.retryable and pipe.closed and isinstance(sftp.broken, sshpipe.Stalled)


async def test_a_version_trickled_beside_busy_siblings_still_ends_the_start() -> None:
    """A byte a tick while the connection's other channels complete replies: the
    watchdog's silence would never see it, the start's deadline does."""
    clock = ReplyClock(asyncio.get_running_loop().time())
    sftp = SFTPSession(Pipe(), name="test", stall_timeout=0.3, replies=clock)
    busy = SFTPSession(Pipe(), name="busy", stall_timeout=0.3, replies=clock)

    async def answer_busy() -> None:
        for request_id in range(40):
            reply = busy.request(_stat)
            busy.data_received(status(request_id))
            await reply
            await asyncio.sleep(0.02)

    started = asyncio.get_running_loop().time()
    beside = [
        asyncio.ensure_future(answer_busy()),
        asyncio.ensure_future(_trickle(sftp, version_reply(), every=0.1, until=2.0)),
    ]
    try:
        with pytest.raises(sshpipe.Stalled):
            await sftp.start()
    finally:
        for task in beside:
            task.cancel()
        await asyncio.gather(*beside, return_exceptions=True)
    # At its deadline (0.3 s), not once the trickled VERSION would be whole (0.9 s).
    assert asyncio.get_running_loop().time() - started < 0.8


async def test_the_start_keeps_the_deadline_it_is_given() -> None:
    """The link's deadline covers the channel's open too: the start gets what is left."""
    sftp = SFTPSession(Pipe(), name="test", stall_timeout=30.0)
    loop = asyncio.get_running_loop()
    with pytest.raises(sshpipe.Stalled):
        async with asyncio.timeout(5):
            await sftp.start(deadline=loop.time() + 0.1)
    answered = SFTPSession(Pipe(), name="test", stall_timeout=0.05)
    starting = asyncio.ensure_future(answered.start())
    await asyncio.sleep(0)
    answered.data_received(version_reply())
    await starting  # in time: started
    assert answered.broken is None and answered.init_rtt < 0.05


async def test_a_stall_tells_the_link_at_once() -> None:
    """The watchdog's stall drops the connection there and then (``on_stalled``), not
    after the reconnect's backoff: a server that keeps the loop busy costs no more."""
    sftp = SFTPSession(Pipe(), name="test", stall_timeout=0.05)
    told: list[BaseException | None] = []
    sftp.on_stalled = lambda: told.append(sftp.broken)
    with pytest.raises(sshpipe.Stalled):
        async with asyncio.timeout(5):
            await sftp.request(_stat)
    assert len(told) == 1 and isinstance(told[0], sshpipe.Stalled)
    closing = SFTPSession(Pipe(), name="test", stall_timeout=0.05)
    closing.on_stalled = lambda: told.append(None)
    closing.close()  # closed on purpose, or broken otherwise: no stall to tell
    closing.connection_lost(None)
    assert len(told) == 1
