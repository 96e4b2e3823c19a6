"""Canaries for the asyncssh patches: each goes red if its patch stops applying.

Every check looks at what asyncssh itself does (its buffer, its transport
writes, its window counters, what it logged of the server's grant), not only
at the names ``SSHLink.patches`` reports, so a patch that is still "applied"
but no longer takes effect shows too. Runs against the real sshd.

On a checked release with the patches on, a patch skipped because asyncssh
changed shape fails ``test_every_patch_applies_on_the_installed_asyncssh``,
which names it. Where asyncssh runs stock (``SSHPIPE_ASYNCSSH_PATCHES=off``,
an unchecked release) the whole module skips (``needs_patches``); the stock
path itself is tested in test_asyncssh_stock.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import re
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import asyncssh.compression
import asyncssh.kex
import pytest
from asyncssh.constants import (
    MSG_CHANNEL_DATA,
    MSG_CHANNEL_OPEN,
    MSG_GLOBAL_REQUEST,
    MSG_SERVICE_ACCEPT,
)
from asyncssh.crypto.cipher import GCMCipher

import sshpipe
from sshpipe.core import codec
from sshpipe.core.sizing import reply_cap
from sshpipe.core.untrusted import UNASKED_BURST, UNASKED_RATE
from sshpipe.testing.embedded import embedded_server
from sshpipe.testing.sshd import SSHServerInfo
from sshpipe.transport import asyncssh_patches as patches
from sshpipe.transport.asyncssh_patches import floodcap, packets, promptack, sendbacklog
from sshpipe.transport.asyncssh_patches.configwords import COMPRESSION_AUTO
from sshpipe.transport.asyncssh_patches.inputbuffer import InputBuffer
from sshpipe.transport.asyncssh_patches.sendbacklog import BACKLOG_MARK
from sshpipe.transport.asyncssh_patches.versionline import read_version_leniently
from sshpipe.transport.asyncssh_patches.zlibbound import (
    INFLATED_MAX,
    ZLIB_BOUND,
    BoundedZlib,
    bound_inflation,
)
from sshpipe.transport.authmemory import AuthMemory
from sshpipe.transport.hostkeys import HostKeyPolicy
from sshpipe.transport.sftp import SFTPSession
from sshpipe.transport.ssh import open_link
from sshpipe.transport.sshlink import SSHLink
from tests.support.files import random_file
from tests.support.peers import Peer, from_embedded

pytestmark = pytest.mark.needs_patches

WINDOW = 1024 * 1024
# OpenSSH's CHAN_SES_WINDOW_DEFAULT: what sshd grants a session channel.
SSHD_SESSION_WINDOW = 2 * 1024 * 1024


@pytest.fixture
async def link(openssh_peer: Peer) -> AsyncIterator[SSHLink]:
    link = await open_link(openssh_peer.client().connect_config)
    try:
        yield link
    finally:
        await link.close()


async def open_sftp(link: SSHLink) -> SFTPSession:
    return await link.open_sftp(
        window=WINDOW, max_packet_size=32768, max_reply=reply_cap(32768), stall_timeout=30.0
    )


async def test_every_patch_applies_on_the_installed_asyncssh(link: SSHLink) -> None:
    """The canary that fails, naming them, for the patches asyncssh's shape turned away."""
    assert patches.version_checked(asyncssh.__version__)
    on_the_link = {
        patches.INPUT_BUFFER,
        patches.BATCHED_SEND,
        patches.WINDOW_TOP_UP,
        patches.PEER_WINDOW,
        patches.SIGNED_FIRST,
        patches.PIPELINED_AUTH,
        patches.AEAD_PACKETS,
        *([patches.PROMPT_ACK] if promptack.QUICKACK_HERE else []),
        patches.LENIENT_VERSION,
        patches.FLOOD_CAP,
    }
    skipped = sorted(on_the_link - link.patches)
    # The two that apply to the process, not to a connection.
    skipped += [name for name, applied in (
        (COMPRESSION_AUTO, patches.read_compression_auto()),
        (ZLIB_BOUND, patches.bound_zlib()),
    ) if not applied]  # fmt: skip
    assert not skipped, (
        f"asyncssh {asyncssh.__version__} (a checked release) changed shape under "
        f"these patches, skipped: {', '.join(skipped)}: re-read its source for them"
    )
    assert link.patches <= on_the_link  # a name this canary does not know: add it here


class _LogIn:
    """What the client sent to log in, and whether it waited for SERVICE_ACCEPT first."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.requests: list[tuple[bytes, bool]] = []  # (method, signed)
        self.accept_awaited: list[bool] = []
        record = self
        send = asyncssh.SSHClientConnection.send_userauth_request
        made = HostKeyPolicy.connection_made

        async def send_userauth_request(
            conn: Any, method: bytes, *args: bytes, key: Any = None, trivial: bool = True
        ) -> None:
            record.requests.append((method, key is not None))
            await send(conn, method, *args, key=key, trivial=trivial)

        def connection_made(policy: HostKeyPolicy, conn: Any) -> None:
            made(policy, conn)

            def begin_auth(username: str) -> None:
                # Stock asyncssh begins once SERVICE_ACCEPT has cleared _next_service.
                record.accept_awaited.append(conn._next_service is None)
                HostKeyPolicy.begin_auth(policy, username)

            policy.begin_auth = begin_auth  # type: ignore[method-assign]

        monkeypatch.setattr(
            asyncssh.SSHClientConnection, "send_userauth_request", send_userauth_request
        )
        monkeypatch.setattr(HostKeyPolicy, "connection_made", connection_made)


async def test_the_log_in_is_one_signed_request_behind_the_service_request(
    openssh: SSHServerInfo, openssh_peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``none`` probe, no unsigned query, no wait for SERVICE_ACCEPT: one round trip."""
    login = _LogIn(monkeypatch)
    start = openssh.log_file.stat().st_size
    link = await open_link(openssh_peer.client().connect_config)
    await link.close()
    assert login.requests == [(b"publickey", True)]
    assert login.accept_awaited == [False]
    lines = await _log_of_last_connection(openssh.log_file, start)
    assert not any("Postponed publickey" in line for line in lines), lines  # sshd saw no query
    assert sum("Accepted publickey" in line for line in lines) == 1, lines


async def test_a_refused_key_gives_way_to_the_next_one(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    login = _LogIn(monkeypatch)
    stranger = tmp_path / "stranger"
    stranger.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    config = dataclasses.replace(
        openssh_peer.client().connect_config,
        identity_files=(str(stranger), str(openssh_peer.client_key)),
    )
    link = await open_link(config)
    await link.close()
    assert login.requests == [(b"publickey", True), (b"publickey", True)]


async def test_a_server_not_known_to_read_in_order_gets_the_stock_log_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    login = _LogIn(monkeypatch)
    memory = AuthMemory()
    async with embedded_server(tmp_path, server_version="SomeOtherSSH_1.0") as server:
        link = await open_link(from_embedded(server).client().connect_config, memory)
        assert patches.PIPELINED_AUTH in link.patches  # in force, and stood aside
        await link.close()
    assert login.accept_awaited == [True]
    assert login.requests == [(b"publickey", True)]
    # The SERVICE_REQUEST's round trip is timed on the stock log-in too.
    assert memory.rtt is not None and 0 < memory.rtt < 1.0


async def test_the_service_requests_round_trip_is_timed(openssh_peer: Peer) -> None:
    """What Compression auto's early log-in is gated on (``compressroute.EARLY_LOGIN_RTT``)."""
    memory = AuthMemory()
    default = openssh_peer.client(compression=None).connect_config
    link = await open_link(default, memory)
    await link.close()
    assert memory.rtt_known.is_set()
    assert memory.rtt is not None and 0 < memory.rtt < 1.0
    assert memory.compression == "auto"  # the setting the first log-in was opened with


async def test_sshds_service_accept_and_hostkeys_request_are_acknowledged_at_once(
    openssh_peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The two set-up packets sshd's next packet would wait behind (``promptack``)."""
    acked: list[int] = []
    handle_then_ack = promptack._acked

    def recording(handler: Any) -> Any:
        wrapped = handle_then_ack(handler)

        def handle(conn: Any, pkttype: int, pktid: int, packet: Any) -> None:
            wrapped(conn, pkttype, pktid, packet)
            acked.append(pkttype)

        return handle

    monkeypatch.setattr(promptack, "_acked", recording)
    link = await open_link(openssh_peer.client().connect_config)
    try:
        await open_sftp(link)  # by then sshd has sent its hostkeys-00
    finally:
        await link.close()
    assert acked == [MSG_SERVICE_ACCEPT, MSG_GLOBAL_REQUEST]


def test_prompt_ack_stands_aside_where_handlers_or_socket_are_not_as_read() -> None:
    class Conn:
        def __init__(self) -> None:
            self._packet_handlers = {MSG_SERVICE_ACCEPT: lambda *args: None}  # no global request

        def get_extra_info(self, name: str) -> Any:
            return None  # a ProxyCommand's pipe: no socket

    conn = Conn()
    handlers = conn._packet_handlers
    assert not promptack.ack_unanswered_at_once(conn)
    assert conn._packet_handlers is handlers  # untouched
    promptack.ack_now(conn)  # nothing to hurry, nothing raised


async def test_requests_sshd_sends_unasked_pass_the_flood_cap(link: SSHLink) -> None:
    """Both handlers are ours on a real connection (sshd's hostkeys-00 went through
    them), and the connection lives: an honest server is far under the cap."""
    conn: Any = link.connection
    stock = type(conn)._packet_handlers
    for pkttype in floodcap.CAPPED:
        assert conn._packet_handlers[pkttype] is not stock[pkttype]
    await open_sftp(link)  # by then sshd has sent its hostkeys-00
    assert not link.closed


class _Unasked:
    """A connection's handlers, counting what they answer."""

    def __init__(self) -> None:
        self.answered = 0
        self._packet_handlers = {pkttype: _Unasked.answer for pkttype in floodcap.CAPPED}

    def answer(self, pkttype: int, pktid: int, packet: Any) -> None:
        self.answered += 1


def test_a_flood_of_unasked_requests_is_dropped_past_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr(floodcap.time, "monotonic", lambda: now[0])
    conn = _Unasked()
    assert floodcap.cap_unasked(conn)
    handlers = conn._packet_handlers
    for _ in range(UNASKED_BURST):
        handlers[MSG_GLOBAL_REQUEST](conn, MSG_GLOBAL_REQUEST, 0, None)
    now[0] += 1.0  # a second later: UNASKED_RATE more may come
    for _ in range(int(UNASKED_RATE)):
        handlers[MSG_CHANNEL_OPEN](conn, MSG_CHANNEL_OPEN, 0, None)
    with pytest.raises(floodcap.Flooded, match="dropped as a flood"):
        handlers[MSG_CHANNEL_OPEN](conn, MSG_CHANNEL_OPEN, 0, None)
    assert conn.answered == UNASKED_BURST + UNASKED_RATE  # the one past the cap: not answered
    assert issubclass(floodcap.Flooded, asyncssh.ProtocolError)  # asyncssh drops the connection


def test_the_flood_cap_stands_aside_where_handlers_are_not_as_read() -> None:
    class Conn:
        def __init__(self) -> None:
            self._packet_handlers = {MSG_GLOBAL_REQUEST: lambda *args: None}  # no CHANNEL_OPEN

    conn = Conn()
    handlers = conn._packet_handlers
    assert not floodcap.cap_unasked(conn)
    assert conn._packet_handlers is handlers  # untouched


@pytest.mark.timing
async def test_the_first_channel_does_not_wait_for_a_delayed_ack(openssh_peer: Peer) -> None:
    """Without ``prompt_ack``, sshd's confirmation of the first channel (or its
    USERAUTH_SUCCESS) waited for our delayed ACK: 42-46 ms on loopback in 8 of 8
    log-ins, against 2-9 ms (the log-in's own part 7-13 ms). The least of five
    log-ins is held to 35 ms: a 40 ms wait in each cannot pass, and a slow
    log-in or two on a loaded machine do not fail it."""
    waits = []
    for _ in range(5):
        link = await open_link(openssh_peer.client().connect_config)
        try:
            sftp = await open_sftp(link)
            phases = dict(sftp.setup)  # the link's phases, then the channel's
        finally:
            await link.close()
        waits.append(phases["auth"] + phases["channel"])
    assert min(waits) < 0.035, waits


async def test_the_receive_buffer_stays_ours_while_data_flows(
    link: SSHLink, openssh_peer: Peer
) -> None:
    sftp = await open_sftp(link)
    await sftp.stat(str(openssh_peer.root))
    # asyncssh assigns its buffer afresh after every packet (``buf = buf[n:]``):
    # still ours after packets went through means every one was consumed by it.
    assert type(link._conn._inpbuf) is InputBuffer  # type: ignore[attr-defined]
    sftp.close()


async def _read_through(link: SSHLink, path: Path, block: int) -> tuple[bytes, list[type]]:
    """The file read in ``block``-sized READs all in flight; the types the pipe was fed."""
    sftp = await open_sftp(link)
    pipe = link._conn._channels[max(link._conn._channels)]._session  # type: ignore[attr-defined]
    fed: list[type] = []
    feed = sftp.data_received

    def counted(data: bytes) -> None:
        fed.append(type(data))
        feed(data)

    sftp.data_received = counted  # type: ignore[method-assign]
    assert pipe.sftp is sftp
    handle = await sftp.open(str(path), codec.FXF_READ)
    size = path.stat().st_size
    replies: dict[int, codec.Reply | BaseException] = {}
    done = asyncio.Event()
    for offset in range(0, size, block):

        def got(reply: codec.Reply | BaseException, offset: int = offset) -> None:
            replies[offset] = reply
            if len(replies) * block >= size:
                done.set()

        sftp.send_read(handle, offset, block, got)
    await asyncio.wait_for(done.wait(), 30)
    parts = [replies[offset] for offset in sorted(replies)]
    assert all(isinstance(part, codec.Data) for part in parts)
    sftp.close()
    return b"".join(part.to_bytes() for part in parts if isinstance(part, codec.Data)), fed


@pytest.mark.parametrize("cipher", ["aes128-gcm@openssh.com", "chacha20-poly1305@openssh.com"])
async def test_gcm_channel_data_reaches_the_session_as_views_and_no_ignore_is_sent(
    openssh_peer: Peer, tmp_path: Path, cipher: str
) -> None:
    config = dataclasses.replace(openssh_peer.client().connect_config, ciphers=(cipher,))
    link = await open_link(config)
    try:
        conn: Any = link._conn  # type: ignore[attr-defined]
        stock_packets: list[int] = []
        recv_packet = conn._recv_packet

        def counted_recv_packet() -> bool:
            stock_packets.append(1)
            return bool(recv_packet())

        conn._recv_packet = counted_recv_packet  # asyncssh's handler switch picks this up
        source = openssh_peer.root / f"aead-{tmp_path.name}.bin"
        payload = os.urandom(1024 * 1024 + 123)
        source.write_bytes(payload)
        sent_before = conn._send_seq
        data, fed = await _read_through(link, source, 32768)
        assert data == payload
        if cipher.startswith("aes"):
            # Every DATA reply came as views, none through asyncssh's own path
            # but the control packets (channel open, INIT, OPEN...): a few.
            assert memoryview in fed and bytes not in fed[4:]
            assert len(stock_packets) < 10
            # One packet per request (and window adjust), none preceded by an IGNORE.
            requests = 34 + 3  # 33 READs and INIT, OPEN, CLOSE; the open itself
            assert conn._send_seq - sent_before < requests + 16
        else:  # another cipher: asyncssh's own code, bytes and IGNOREs
            assert memoryview not in fed
            assert len(stock_packets) >= 33
            assert conn._send_seq - sent_before >= 2 * 34
        source.unlink()
    finally:
        await link.close()


async def test_writes_past_the_peer_window_reach_the_file_whole_and_in_order(
    link: SSHLink, openssh_peer: Peer, tmp_path: Path
) -> None:
    # Blocks not a multiple of the packet size, all at once: the 2 MiB window
    # sshd grants runs out inside a write, whose rest asyncssh sends later.
    sftp = await open_sftp(link)
    block = 261149
    payload = os.urandom(5 * SSHD_SESSION_WINDOW + 777)
    target = openssh_peer.root / f"window-{tmp_path.name}.bin"
    handle = await sftp.open(str(target), codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_TRUNC)
    chan = link._conn._channels[max(link._conn._channels)]  # type: ignore[attr-defined]
    assert getattr(chan._flush_send_buf, "__qualname__", "") == "ViewWriter.flush"
    replies: list[codec.Reply | BaseException] = []
    done = asyncio.Event()
    count = -(-len(payload) // block)

    def got(reply: codec.Reply | BaseException) -> None:
        replies.append(reply)
        if len(replies) == count:
            done.set()

    conn: Any = link._conn  # type: ignore[attr-defined]
    data_sizes: list[int] = []
    send_packet = conn.send_packet

    def counted_send_packet(pkttype: int, *args: Any, handler: Any = None) -> None:
        if pkttype == MSG_CHANNEL_DATA:
            data_sizes.append(int.from_bytes(args[1], "big"))
        send_packet(pkttype, *args, handler=handler)

    conn.send_packet = counted_send_packet
    for offset in range(0, len(payload), block):
        sftp.send_write(handle, offset, payload[offset : offset + block], got)
    # Past the window, what waits is views of the blocks: no copy in asyncssh.
    assert chan._send_buf and all(type(buf) is memoryview for buf, _ in chan._send_buf)
    await asyncio.wait_for(done.wait(), 30)
    # Packets cut across header and payload: none for a header alone.
    assert sum(data_sizes) == len(payload) + count * 29  # WRITE headers: 29 bytes here
    # (A window's last few bytes may make a small packet, now and then.)
    assert sum(size <= 29 for size in data_sizes) < 5, data_sizes
    assert all(isinstance(r, codec.Status) and r.code == codec.FX_OK for r in replies)
    await sftp.close_handle(handle, str(target))
    assert target.read_bytes() == payload
    target.unlink()
    sftp.close()


async def test_channel_data_waits_while_a_megabyte_waits_for_the_kernel(
    link: SSHLink, openssh_peer: Peer, tmp_path: Path
) -> None:
    """asyncssh ignores its transport's pause_writing: four channels' WRITEs, 8 MiB
    of sshd's windows, were all encrypted in one loop turn and queued in user
    space. Held back, no batch (plus what the transport still holds) passes the
    mark by more than a packet and the requests under way, and every byte still
    lands, in order."""
    channels = [await open_sftp(link) for _ in range(4)]
    transport = link._conn._transport  # type: ignore[attr-defined]
    queued: list[int] = []  # bytes waiting for the kernel as each batch is handed over
    writelines = transport.writelines

    def counted_writelines(chunks: list[bytes]) -> None:
        queued.append(sum(map(len, chunks)) + transport.get_write_buffer_size())
        writelines(chunks)

    transport.writelines = counted_writelines
    block, per_channel = 255 * 1024, 24 * 255 * 1024  # sshd takes messages up to 256 KiB
    payloads = [os.urandom(per_channel) for _ in channels]
    targets = [openssh_peer.root / f"backlog-{tmp_path.name}-{i}.bin" for i in range(4)]
    flags = codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_TRUNC
    handles = [await c.open(str(t), flags) for c, t in zip(channels, targets, strict=True)]
    replies: list[codec.Reply | BaseException] = []
    done = asyncio.Event()
    count = len(channels) * per_channel // block

    def got(reply: codec.Reply | BaseException) -> None:
        replies.append(reply)
        if len(replies) == count:
            done.set()

    try:
        for offset in range(0, per_channel, block):
            for sftp, handle, payload in zip(channels, handles, payloads, strict=True):
                sftp.send_write(handle, offset, payload[offset : offset + block], got)
        await asyncio.wait_for(done.wait(), 60)
    finally:
        del transport.writelines
    assert all(isinstance(r, codec.Status) and r.code == codec.FX_OK for r in replies), replies[:3]
    # A packet may start just under the mark (32 KiB of data and its framing),
    # and each channel finishes the request it has under way (ProFTPD needs them whole).
    under_way = len(channels) * (block + 1024)
    assert max(queued) <= BACKLOG_MARK + 33 * 1024 + under_way, max(queued)
    for sftp, handle, target, payload in zip(channels, handles, targets, payloads, strict=True):
        await sftp.close_handle(handle, str(target))
        assert target.read_bytes() == payload
        target.unlink()
        sftp.close()


async def test_a_writer_flushed_after_its_channel_closed_sends_nothing(link: SSHLink) -> None:
    """A writer held back by the backlog is flushed again as the backlog drains,
    which may be after its channel closed (a tree's channel dropped mid-run).
    asyncssh has by then dropped the channel's unsent data and its session, and
    its own flush of a channel whose writing was paused failed an assertion
    inside the transport's resume_writing: a traceback on the command's stderr."""
    conn: Any = link._conn  # type: ignore[attr-defined]
    chan, _ = await conn.create_session(asyncssh.SSHClientSession, subsystem="sftp")
    writer = packets.accept_views(chan)
    assert writer is not None
    chan.close()
    await chan.wait_closed()
    # Closed by the server while its writing was paused (a window ran out with
    # data waiting, in a busy put): asyncssh leaves the channel paused so.
    chan._send_paused = True
    writer.flush()  # as the backlog drains: nothing to send, nothing raised


@pytest.mark.proftpd
async def test_proftpd_gets_each_request_whole_while_channels_are_held_back(
    proftpd_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ProFTPD's mod_sftp reassembles a request split across packets in one
    buffer for all its channels: a channel held back mid-request while another
    channel's data went made it write shifted bytes into files it acknowledged,
    then crash (2-5 tree puts of 12 MiB in 20). With a mark of 64 KiB the
    channels are held back all the time, and every request still goes whole."""
    monkeypatch.setattr(sendbacklog, "BACKLOG_MARK", 64 * 1024)
    sources = [tmp_path / f"{n}.bin" for n in range(4)]
    data = [random_file(source, 6 << 20) for source in sources]
    config = sshpipe.TransferConfig(channels=4, channels_per_connection=4, retries=0)
    async with proftpd_peer.client(config) as sp:
        await asyncio.gather(
            *(sp.put(str(source), proftpd_peer.remote(source.name)) for source in sources)
        )
    for source, expected in zip(sources, data, strict=True):
        assert (proftpd_peer.root / source.name).read_bytes() == expected, source.name


async def test_one_loop_turn_of_requests_is_one_transport_write(
    link: SSHLink, openssh_peer: Peer
) -> None:
    sftp = await open_sftp(link)
    transport = link._conn._transport  # type: ignore[attr-defined]
    writes: list[int] = []  # write calls of asyncssh's, not writelines' own
    batches: list[int] = []
    write, writelines = transport.write, transport.writelines

    def counted_write(data: bytes) -> None:
        if not inside:
            writes.append(len(data))
        write(data)

    def counted_writelines(chunks: list[bytes]) -> None:
        nonlocal inside
        batches.append(len(chunks))
        inside = True  # 3.11's writelines is one write of the joined chunks
        try:
            writelines(chunks)
        finally:
            inside = False

    inside = False

    transport.write, transport.writelines = counted_write, counted_writelines
    try:
        futures = [sftp.stat_request(str(openssh_peer.root)) for _ in range(32)]
        await asyncio.gather(*futures)
    finally:
        del transport.write, transport.writelines
    assert writes == []  # asyncssh alone writes one packet per call
    assert batches[0] >= 32
    sftp.close()


async def test_the_receive_window_is_topped_up_each_eighth(
    link: SSHLink, openssh_peer: Peer
) -> None:
    path = openssh_peer.root / "three-eighths"
    path.write_bytes(bytes(WINDOW * 3 // 8))
    sftp = await open_sftp(link)
    handle = await sftp.open(str(path), codec.FXF_READ)
    block = 32 * 1024
    replies = await asyncio.gather(
        *(
            sftp.request(lambda rid, o=offset: codec.encode_read(rid, handle, o, block))
            for offset in range(0, WINDOW * 3 // 8, block)
        )
    )
    assert (
        sum(reply.length for reply in replies if isinstance(reply, codec.Data)) == WINDOW * 3 // 8
    )
    left = sftp._pipe._chan._recv_window  # type: ignore[attr-defined]
    # asyncssh alone grants again below half: 3/8 of the window used leaves 5/8.
    assert left >= WINDOW - WINDOW // 8
    await sftp.close_handle(handle, str(path))
    sftp.close()


async def test_the_peer_window_is_what_sshd_granted(
    link: SSHLink, caplog: pytest.LogCaptureFixture
) -> None:
    asyncssh.set_debug_level(2)
    try:
        with caplog.at_level(logging.DEBUG, logger="asyncssh"):
            sftp = await open_sftp(link)
    finally:
        asyncssh.set_debug_level(1)
    # sshd opens a session channel with no window and grants it as the
    # subsystem starts: asyncssh's own log of the grants, as it read them.
    granted = [
        int(m.group(1))
        for record in caplog.records
        if (m := re.search(r"(?:Initial send window|new window) (\d+)", record.getMessage()))
    ]
    assert granted[:2] == [0, SSHD_SESSION_WINDOW], granted
    assert sftp.peer_window == SSHD_SESSION_WINDOW  # read before INIT used any of it
    sftp.close()


async def test_closing_a_client_sends_disconnect_to_sshd(
    openssh: SSHServerInfo, openssh_peer: Peer
) -> None:
    """sshd logs "Received disconnect" for a client that said goodbye, not a reset."""
    start = openssh.log_file.stat().st_size
    (openssh_peer.root / "here").write_bytes(b"")
    async with openssh_peer.client() as client:
        assert await client.glob(str(openssh_peer.root / "*")) == [str(openssh_peer.root / "here")]
    lines = await _log_of_last_connection(openssh.log_file, start)
    assert any("Received disconnect" in line for line in lines), lines
    assert not any("Connection reset" in line or "Connection closed" in line for line in lines)


async def _log_of_last_connection(log: Path, start: int) -> list[str]:
    """sshd's lines about the connection opened after ``start``, once it logged its end."""
    deadline = time.monotonic() + 10.0
    while True:
        with log.open(errors="replace") as file:
            file.seek(start)
            text = file.read()
        opened = re.findall(r"Connection from \S+ port (\d+)", text)
        assert opened, text
        port = opened[-1]
        lines = [line for line in text.splitlines() if f"port {port}" in line]
        if any(re.search(r"Received disconnect|Connection (reset|closed)", x) for x in lines):
            return lines
        assert time.monotonic() < deadline, lines
        await asyncio.sleep(0.05)


class _FakeConnection:
    """The attributes the connection patches touch, shaped as on a checked release."""

    def __init__(self, inpbuf: object = b"") -> None:
        self._inpbuf = inpbuf
        self._transport = _FakeTransport()

    def _send(self, data: bytes) -> None:
        self._transport.write(data)

    def resume_writing(self) -> None: ...


class _FakeTransport:
    def write(self, data: bytes) -> None: ...

    def writelines(self, data: list[bytes]) -> None: ...

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


async def test_an_unchecked_release_gets_no_patch(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(patches, "_STOCK_SAID", set())  # what other tests had said
    for version in ("2.21.1", "2.24.2", "3.0.0", "2.25.0rc1", ""):
        conn = _FakeConnection()
        send = conn._send
        with caplog.at_level(logging.DEBUG, logger="sshpipe.ssh"):
            applied = patches.tune_connection(conn, version)  # type: ignore[arg-type]
            again = patches.tune_connection(_FakeConnection(), version)  # type: ignore[arg-type]
        assert applied == again == frozenset(), version
        assert conn._inpbuf == b"" and conn._send == send  # untouched: stock asyncssh
        said = f"asyncssh {version} is outside the checked releases"
        assert caplog.text.count(said) == 1, caplog.text  # once, not per connection
        caplog.clear()


async def test_a_patch_whose_attribute_changed_shape_is_skipped_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conn = _FakeConnection(inpbuf=bytearray())  # not the bytes the patch replaces
    with caplog.at_level(logging.DEBUG, logger="sshpipe.ssh"):
        applied = patches.tune_connection(conn, "2.24.1")  # type: ignore[arg-type]
    assert patches.INPUT_BUFFER not in applied and patches.BATCHED_SEND in applied
    assert isinstance(conn._inpbuf, bytearray)
    assert "input_buffer does not fit" in caplog.text


def test_a_channel_without_the_expected_counters_keeps_stock_windows() -> None:
    class Channel:
        _send_window = None  # hidden or renamed: not read

        def send_packet(self, *args: object) -> None:
            raise AssertionError("no top-up without the counter")

    tuning = patches.ChannelTuning(Channel(), WINDOW, patches.CHANNEL_PATCHES)  # type: ignore[arg-type]
    assert tuning.applied == frozenset()
    tuning.after_data()
    assert tuning.peer_window == 0


def test_a_channel_of_another_shape_gets_no_view_writer() -> None:
    class Slotted:
        __slots__ = ("write",)  # no room for our mark: stock receive and write

    class Partial:
        def write(self, data: bytes) -> None: ...  # none of asyncssh's send counters

    assert packets.accept_views(Slotted()) is None
    partial = Partial()
    assert packets.accept_views(partial) is None
    assert "write" not in vars(partial)  # its own write, untouched


def test_the_nonce_steps_as_asyncssh_steps_it() -> None:
    """Canary: the packets' nonce is stepped inline; asyncssh's own code must agree."""
    for counter in (0, 1, 0xFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFE, 0xFFFFFFFFFFFFFFFF):
        iv = b"\x01\x02\x03\x04" + counter.to_bytes(8, "big")
        cipher = GCMCipher("aes128-gcm", bytes(16), iv)
        cipher._update_iv()
        assert packets.next_iv(iv) == cipher._iv


def test_packet_padding_is_fresh_random_bytes_never_handed_out_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    draws: list[int] = []

    def counting_urandom(size: int) -> bytes:
        draws.append(size)
        return bytes(range(256)) * (size // 256)  # every pool the same: reuse would show

    monkeypatch.setattr(packets.os, "urandom", counting_urandom)
    sender = packets.AeadPackets.__new__(packets.AeadPackets)
    sender._pad, sender._pad_at = b"", 0
    pool = bytes(range(256)) * (packets._PAD_POOL // 256)
    sizes = [4 + i % 16 for i in range(2000)]  # what GCM's 16-byte blocks ask for
    by_pool: list[list[bytes]] = []
    for size in sizes:
        pad = sender._padding(size)
        assert len(pad) == size
        if len(draws) > len(by_pool):  # this piece opened a new pool
            by_pool.append([])
        by_pool[-1].append(pad)
    # Each pool is cut into consecutive pieces, none handed out twice, and a
    # new one is drawn only when the next piece would not fit the old.
    for pieces in by_pool:
        used = b"".join(pieces)
        assert pool.startswith(used)
    for pieces, following in itertools.pairwise(by_pool):
        assert sum(map(len, pieces)) + len(following[0]) > packets._PAD_POOL
    assert draws == [packets._PAD_POOL] * len(by_pool)
    assert len(draws) < len(sizes) / 100


async def test_the_kex_and_the_log_in_method_are_read_from_a_real_connection(
    openssh_peer: Peer, caplog: pytest.LogCaptureFixture
) -> None:
    """-v's line: the kex asyncssh chose and the method that succeeded, not "unknown"."""
    with caplog.at_level(logging.INFO, logger="sshpipe.ssh"):
        link = await open_link(openssh_peer.client().connect_config)
        await link.close()
    line = next(r.getMessage() for r in caplog.records if "; kex " in r.getMessage())
    kex = re.search(r"; kex ([^;]+);", line)
    offered = [alg.decode() for alg in asyncssh.kex.get_kex_algs()]
    assert kex is not None and kex.group(1) in offered, line
    assert "; auth publickey" in line and "unknown" not in line, line


async def test_the_version_line_is_read_by_ours_as_asyncssh_read_it(link: SSHLink) -> None:
    """sshd's version as asyncssh shows it and as the key exchange hashed it (the log-in
    succeeded, so both sides hashed the same bytes)."""
    assert patches.LENIENT_VERSION in link.patches
    shown = link.connection.get_extra_info("server_version")
    assert re.fullmatch(r"SSH-2\.0-OpenSSH_\S+( .*)?", shown), shown
    assert link.connection._server_version == shown.encode("ascii")  # type: ignore[attr-defined]


def test_the_version_reader_stands_aside_where_asyncssh_is_not_as_read() -> None:
    class Connection:
        _inpbuf = b""
        _banner_lines = 0
        _server_version = b""
        _kexinit_sent = False
        logger = asyncssh.logging.logger  # asyncssh's SSHLogger, which has debug1

        def __init__(self) -> None:
            self._recv_handler = self._recv_version

        def _recv_version(self) -> bool:
            return False

        def _recv_pkthdr(self) -> bool:
            return False

        def _force_close(self, exc: Exception) -> None: ...

        def _send_kexinit(self) -> None: ...

        def set_extra_info(self, **info: object) -> None: ...

    moved_on = Connection()
    moved_on._recv_handler = moved_on._recv_pkthdr  # the version was read already
    assert not read_version_leniently(moved_on, lambda line: None)  # type: ignore[arg-type]
    assert moved_on._recv_handler == moved_on._recv_pkthdr
    other = Connection()
    other._inpbuf = bytearray()  # type: ignore[assignment]  # another buffer
    assert not read_version_leniently(other, lambda line: None)  # type: ignore[arg-type]
    fits = Connection()
    heard: list[bytes] = []
    assert read_version_leniently(fits, heard.append)  # type: ignore[arg-type]
    fits._inpbuf = b"busy\r\nSSH-2.0-Caf\xe9\r\n"
    assert fits._recv_handler() and heard == [b"busy"]
    assert fits._recv_handler() and fits._server_version == b"SSH-2.0-Caf\xe9"
    assert fits._recv_handler == fits._recv_pkthdr and fits._kexinit_sent


def test_the_negotiation_is_not_read_off_an_unchecked_release() -> None:
    class Connection:
        def __init__(self) -> None:
            self._auth_methods: object = [b"publickey"]

        def _choose_alg(self, *args: object) -> bytes:
            return b"curve25519-sha256"

    conn = Connection()
    stock = conn._choose_alg
    assert patches.watch_key_exchange(conn, "3.0.0") == {}  # type: ignore[arg-type]
    assert conn._choose_alg == stock
    assert patches.auth_method(conn, "3.0.0") is None  # type: ignore[arg-type]
    chosen = patches.watch_key_exchange(conn, "2.24.1")  # type: ignore[arg-type]
    assert conn._choose_alg(patches._KEY_EXCHANGE, [], []) == b"curve25519-sha256"
    assert chosen == {"kex": "curve25519-sha256"}
    assert patches.auth_method(conn, "2.24.1") == "publickey"  # type: ignore[arg-type]
    conn._auth_methods = "publickey"  # changed shape: not read
    assert patches.auth_method(conn, "2.24.1") is None  # type: ignore[arg-type]


def _parse_config(path: Path) -> asyncssh.SSHClientConnectionOptions:
    return asyncssh.SSHClientConnectionOptions(
        host="example.test", config=[str(path)], known_hosts=None, client_keys=None
    )


def test_asyncssh_reads_compression_auto_and_still_refuses_other_words(tmp_path: Path) -> None:
    assert patches.read_compression_auto()
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    Compression auto\n")
    _parse_config(config)  # stock asyncssh: "Invalid Compression boolean value: auto"
    config.write_text("Host *\n    Compression maybe\n")
    with pytest.raises(asyncssh.config.ConfigParseError, match="Compression boolean"):
        _parse_config(config)


def test_an_unchecked_release_or_another_handler_keeps_the_stock_reader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from asyncssh.config import SSHClientConfig, SSHConfig

    from sshpipe.transport.asyncssh_patches.configwords import accept_compression_auto

    stock = ("Compression", SSHConfig._set_bool)
    handlers = dict(SSHClientConfig._handlers, compression=stock)
    monkeypatch.setattr(SSHClientConfig, "_handlers", handlers)
    assert not accept_compression_auto(False)  # an unchecked release
    assert handlers["compression"] == stock
    handlers["compression"] = ("Compression", SSHConfig._set_string)  # changed shape
    assert not accept_compression_auto(True)
    assert handlers["compression"][1] is SSHConfig._set_string


def _sync_flushed(compressor: Any, payload: bytes) -> bytes:
    """One packet's payload as an SSH peer compresses it (RFC 4253 §6.2)."""
    data: bytes = compressor.compress(payload) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return data


def test_a_packet_inflating_past_what_a_packet_may_hold_is_refused() -> None:
    assert patches.bound_zlib()
    assert type(asyncssh.compression.get_decompressor(b"zlib@openssh.com")) is BoundedZlib
    assert type(asyncssh.compression.get_decompressor(b"zlib")) is BoundedZlib
    # Packets a server sends, one stream: each inflates whole, in order.
    sender, inflate = zlib.compressobj(), BoundedZlib()
    packets = [os.urandom(1000), b"x" * 300_000, bytes(INFLATED_MAX), b"tail"]
    assert [inflate.decompress(_sync_flushed(sender, p)) for p in packets] == packets
    # 64 MiB of zeros is ~64 KB compressed: stock asyncssh inflated all of it.
    bomb = _sync_flushed(zlib.compressobj(), bytes(64 << 20))
    assert len(bomb) < 128 * 1024
    tracemalloc.start()
    try:
        assert BoundedZlib().decompress(bomb) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * INFLATED_MAX, peak
    assert BoundedZlib().decompress(b"not zlib at all") is None


def test_an_unchecked_release_or_another_registry_keeps_the_stock_decompressor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stock = asyncssh.compression._ZLibDecompress  # type: ignore[attr-defined]
    registry = {b"none": object, b"zlib@openssh.com": stock, b"zlib": stock}
    monkeypatch.setattr(asyncssh.compression, "_cmp_decompressors", registry)
    assert not bound_inflation(False)  # an unchecked release
    assert registry[b"zlib"] is stock
    registry[b"zlib"] = object  # changed shape
    assert not bound_inflation(True)
    assert registry[b"zlib@openssh.com"] is stock
