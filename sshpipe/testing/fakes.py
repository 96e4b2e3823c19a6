"""In-memory stand-ins for an SFTP server and a lease: the engine tier, without a socket.

``FakeServer`` keeps files in memory and answers the real ``SFTPSession``
through a ``FakePipe`` (requests parsed from the bytes the session writes,
replies encoded and fed back to its ``data_received``), so the pumps, the read
loop and the reconnect loop run exactly as over SSH. ``Faults`` makes it
awkward on purpose: replies delayed and reordered, READs answered short, a
READ or WRITE failed at an offset, the server gone silent, the channel cut.
``CheckFileOffer`` gives it the ``check-file`` extension, ProFTPD's way or
paramiko's, truthful or lying.
``FakeLease`` lends its channels the way ``transport.pool.PoolLease`` does.

Every reply is delivered from the event loop, never inside the ``write`` that
sent its request, as over a real pipe.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core import codec
from ..core.errors import ChannelRefused, ConnectError, ConnectionBroken
from ..transport.pacing import Pacer
from ..transport.sftp import SFTPSession

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_WINDOW = 2 * 1024 * 1024


@dataclass
class Faults:
    """How the fake server misbehaves (all off by default).

    Attributes:
        delay: seconds before each READ/WRITE reply.
        jitter: up to this many seconds more, at random: replies come back in
            another order than their requests.
        short: the most bytes a READ reply carries (a short read).
        fail_reads: offsets whose READ is answered with FX_FAILURE.
        fail_writes: offsets whose WRITE is answered with FX_FAILURE.
        silent_after: READs and WRITEs answered before the channel answers
            nothing more (requests after it are swallowed); once.
        cut_after: READs and WRITEs answered before the channel is cut, once.
        seed: of the jitter.
    """

    delay: float = 0.0
    jitter: float = 0.0
    short: int | None = None
    fail_reads: set[int] = field(default_factory=set)
    fail_writes: set[int] = field(default_factory=set)
    silent_after: int | None = None
    cut_after: int | None = None
    seed: int = 0


@dataclass
class CheckFileOffer:
    """The ``check-file`` extension as the fake server offers it (``core.checkfile``).

    Attributes:
        advertised: its VERSION data: "1" as ProFTPD (then ``check-file-name``
            and ``check-file-handle`` are answered as ProFTPD does), or a list
            such as paramiko's "md5,sha1".
        algorithms: what it hashes with: the first of a request's it has.
        lies: each answer's first hash has a byte flipped.
        answer_with: the algorithm its answers name, whatever was asked.
        delay: seconds before each answer (the server reading the file).
        asked: (request, algorithms, start, length, block) of each request seen.
    """

    advertised: bytes = b"1"
    algorithms: tuple[str, ...] = ("sha256", "md5")
    lies: bool = False
    answer_with: str | None = None
    delay: float = 0.0
    asked: list[tuple[str, str, int, int, int]] = field(default_factory=list)


@dataclass
class Served:
    """One READ or WRITE the server saw: (offset, length asked, bytes it answered with)."""

    kind: str
    offset: int
    length: int
    answered: int


class FakeServer:
    """Files in memory, shared by every channel opened on it (as a disk is)."""

    def __init__(
        self,
        files: dict[str, bytes] | None = None,
        faults: Faults | None = None,
        check_file: CheckFileOffer | None = None,
    ):
        self.files: dict[str, bytearray] = {k: bytearray(v) for k, v in (files or {}).items()}
        self.faults = faults or Faults()
        self.check_file = check_file
        self.served: list[Served] = []
        self.open_handles = 0
        self.reordered = 0  # replies sent before a reply to an earlier request
        self.sessions: list[SFTPSession] = []
        self._rng = random.Random(self.faults.seed)
        self._handles: dict[bytes, str] = {}
        self._next_handle = 0

    @property
    def transfers(self) -> int:
        return len(self.served)

    async def channel(
        self, *, init_rtt: float = 0.0, stall_timeout: float | None = None
    ) -> SFTPSession:
        """A started session on this server (``init_rtt``: what the controller's first
        guess sees, as a real channel's INIT/VERSION round trip; ``stall_timeout``:
        its watchdog's, as the pool sets each channel's to its transfer's)."""
        pipe = FakePipe(self)
        session = SFTPSession(
            pipe, name=f"fake#{len(self.sessions) + 1}", stall_timeout=stall_timeout
        )
        pipe.session = session
        await session.start()
        session.init_rtt = init_rtt
        session.recv_window = session.peer_window = _WINDOW
        session.peer = "fake@fake:22"
        self.sessions.append(session)
        return session

    # -- requests ------------------------------------------------------------

    def handle(self, pipe: FakePipe, ptype: int, body: bytes) -> None:
        if ptype == codec.FXP_INIT:
            offered = self.check_file
            extensions = (
                b"" if offered is None else _string(b"check-file") + _string(offered.advertised)
            )
            pipe.send(_packet(2, _U32.pack(3) + extensions), 0.0)
            return
        rid = _U32.unpack_from(body)[0]
        rest = body[4:]
        if ptype in (codec.FXP_READ, codec.FXP_WRITE):
            self._transfer(pipe, ptype, rid, rest)
        elif ptype == codec.FXP_OPEN:
            self._open(pipe, rid, rest)
        elif ptype == codec.FXP_CLOSE:
            handle = _take(rest)[0]
            if self._handles.pop(handle, None) is not None:
                self.open_handles -= 1
            pipe.send(_status(rid, codec.FX_OK), 0.0)
        elif ptype in (codec.FXP_FSTAT, codec.FXP_STAT, codec.FXP_LSTAT):
            key = _take(rest)[0]
            path = self._handles.get(key) if ptype == codec.FXP_FSTAT else key.decode()
            data = self.files.get(path or "")
            if data is None:
                pipe.send(_status(rid, codec.FX_NO_SUCH_FILE, "no such file"), 0.0)
            else:
                attrs = _U32.pack(0x01 | 0x04) + _U64.pack(len(data)) + _U32.pack(0o100644)
                pipe.send(_packet(105, _U32.pack(rid) + attrs), 0.0)
        elif ptype == codec.FXP_REMOVE:
            found = self.files.pop(_take(rest)[0].decode(), None)
            pipe.send(
                _status(rid, codec.FX_OK if found is not None else codec.FX_NO_SUCH_FILE), 0.0
            )
        elif ptype == codec.FXP_RENAME:
            old, rest = _take(rest)
            new = _take(rest)[0].decode()
            if old.decode() not in self.files or new in self.files:
                pipe.send(_status(rid, codec.FX_FAILURE, "cannot rename"), 0.0)
            else:
                self.files[new] = self.files.pop(old.decode())
                pipe.send(_status(rid, codec.FX_OK), 0.0)
        elif ptype == codec.FXP_EXTENDED and self.check_file is not None:
            self._check_file(pipe, rid, rest, self.check_file)
        else:
            pipe.send(_status(rid, codec.FX_OP_UNSUPPORTED, "unsupported"), 0.0)

    def _check_file(self, pipe: FakePipe, rid: int, rest: bytes, offer: CheckFileOffer) -> None:
        """check-file as ProFTPD answers it (by name or handle), or paramiko (``check-file``)."""
        name, rest = _take(rest)
        request = name.decode()
        by_list = offer.advertised != b"1"
        if request not in (
            ("check-file",) if by_list else ("check-file-name", "check-file-handle")
        ):
            pipe.send(_status(rid, codec.FX_OP_UNSUPPORTED, "unsupported"), 0.0)
            return
        target, rest = _take(rest)
        listed, rest = _take(rest)
        start, length = struct.unpack_from(">QQ", rest)
        block = _U32.unpack_from(rest, 16)[0]
        offer.asked.append((request, listed.decode(), start, length, block))
        path = target.decode() if request == "check-file-name" else self._handles.get(target)
        data = self.files.get(path or "")
        usable = [name for name in listed.decode().split(",") if name in offer.algorithms]
        if data is None or not usable or 0 < block < 256:
            pipe.send(_status(rid, codec.FX_FAILURE, "cannot hash that"), offer.delay)
            return
        algorithm = usable[0]
        end = start + length if length else len(data)
        step = block or max(1, end - start)
        hashes = b"".join(
            hashlib.new(algorithm, bytes(data[at : min(at + step, end)])).digest()
            for at in range(start, end, step)
        )
        if offer.lies and hashes:
            hashes = bytes([hashes[0] ^ 0xFF]) + hashes[1:]
        said = _string((offer.answer_with or algorithm).encode())
        head = _string(b"check-file") if request == "check-file" else b""  # paramiko's
        pipe.send(_packet(201, _U32.pack(rid) + head + said + hashes), offer.delay)

    def _open(self, pipe: FakePipe, rid: int, rest: bytes) -> None:
        raw, rest = _take(rest)
        path = raw.decode()
        pflags = _U32.unpack_from(rest)[0]
        if path not in self.files:
            if not pflags & codec.FXF_CREAT:
                pipe.send(_status(rid, codec.FX_NO_SUCH_FILE, "no such file"), 0.0)
                return
            self.files[path] = bytearray()
        elif pflags & codec.FXF_EXCL:
            pipe.send(_status(rid, codec.FX_FAILURE, "exists"), 0.0)
            return
        if pflags & codec.FXF_TRUNC:
            self.files[path] = bytearray()
        handle = self._next_handle.to_bytes(4, "big")
        self._next_handle += 1
        self._handles[handle] = path
        self.open_handles += 1
        pipe.send(_packet(102, _U32.pack(rid) + _string(handle)), 0.0)

    def _transfer(self, pipe: FakePipe, ptype: int, rid: int, rest: bytes) -> None:
        faults = self.faults
        if pipe.silent:
            return  # swallowed: never answered
        if faults.silent_after is not None and self.transfers >= faults.silent_after:
            pipe.silent = True  # this channel only: a new one answers again
            faults.silent_after = None
            return
        if faults.cut_after is not None and self.transfers >= faults.cut_after:
            faults.cut_after = None
            pipe.cut()
            return
        handle, rest = _take(rest)
        offset = _U64.unpack_from(rest)[0]
        path = self._handles.get(handle)
        data = self.files.get(path) if path is not None else None
        wait = faults.delay + self._rng.random() * faults.jitter
        if data is None:
            pipe.send(_status(rid, codec.FX_FAILURE, "bad handle"), wait, rid)
        elif ptype == codec.FXP_READ:
            length = _U32.unpack_from(rest, 8)[0]
            if offset in faults.fail_reads:
                self.served.append(Served("read", offset, length, 0))
                pipe.send(_status(rid, codec.FX_FAILURE, "injected read failure"), wait, rid)
                return
            count = min(length, faults.short or length)
            piece = bytes(data[offset : offset + count])
            self.served.append(Served("read", offset, length, len(piece)))
            if not piece:
                pipe.send(_status(rid, codec.FX_EOF, "EOF"), wait, rid)
            else:
                pipe.send(_packet(103, _U32.pack(rid) + _string(piece)), wait, rid)
        else:
            payload = _take(rest[8:])[0]
            self.served.append(Served("write", offset, len(payload), len(payload)))
            if offset in faults.fail_writes:
                pipe.send(_status(rid, codec.FX_FAILURE, "No space left on device"), wait, rid)
                return
            if len(data) < offset:
                data.extend(bytes(offset - len(data)))
            data[offset : offset + len(payload)] = payload
            pipe.send(_status(rid, codec.FX_OK), wait, rid)


class FakePipe:
    """The byte pipe between one ``SFTPSession`` and the fake server."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        self.session: SFTPSession | None = None
        self.closed = False
        self.silent = False
        self._buffer = bytearray()
        self._highest = -1  # the latest request id answered so far

    def write(self, data: bytes, payload: bytes | memoryview = b"") -> None:
        if self.closed:
            return
        self._buffer += data
        self._buffer += payload
        while len(self._buffer) >= 4:
            length = _U32.unpack_from(self._buffer)[0]
            if len(self._buffer) < 4 + length:
                return
            packet = bytes(self._buffer[4 : 4 + length])
            del self._buffer[: 4 + length]
            self.server.handle(self, packet[0], packet[1:])

    def close(self) -> None:
        self.closed = True

    def send(self, packet: bytes, wait: float, rid: int | None = None) -> None:
        """Deliver ``packet`` to the session ``wait`` seconds from now (never at once)."""
        loop = asyncio.get_running_loop()
        if wait > 0:
            loop.call_later(wait, self._deliver, packet, rid)
        else:
            loop.call_soon(self._deliver, packet, rid)

    def _deliver(self, packet: bytes, rid: int | None) -> None:
        if self.closed or self.session is None:
            return
        if rid is not None:
            if rid < self._highest:
                self.server.reordered += 1
            self._highest = max(self._highest, rid)
        self.session.data_received(packet)

    def cut(self) -> None:
        """The connection drops: the session hears of it from the loop, as from SSH."""
        self.closed = True
        session = self.session
        if session is not None:
            lost = ConnectionBroken(f"{session.name}: connection cut")
            asyncio.get_running_loop().call_soon(session.connection_lost, lost)


class FakeLease:
    """A lease on the fake server's channels (``transport.pool.Lease``).

    Args:
        max_channels: how many it may hold; ``can_grow``: whether the grower
            may ask for more. ``refuse``: ``add`` raises ChannelRefused (the
            server's MaxSessions) instead of opening any. ``recover_errors``:
            raised by the next calls of ``recover``, one each, before it works.
        ``pacer``: the rate limit its transfers draw on.
    """

    def __init__(
        self,
        server: FakeServer,
        channels: list[SFTPSession],
        *,
        max_channels: int = 1,
        can_grow: bool = False,
        refuse: bool = False,
        recover_errors: list[BaseException] | None = None,
        stall_timeout: float | None = None,
        pacer: Pacer | None = None,
    ) -> None:
        self.server = server
        self.pacer = pacer
        self.stall_timeout = stall_timeout  # every channel's, as the pool sets it
        self.channels = channels
        self.max_channels = max_channels
        self.can_grow = can_grow
        self.refuse = refuse
        self.recover_errors = list(recover_errors or [])
        self.added = 0  # channels ``add`` opened
        self.asked = 0  # calls of ``add``
        self.recovered: list[bool] = []  # each recover's ``stalled``

    @classmethod
    async def open(
        cls,
        server: FakeServer,
        channels: int = 1,
        *,
        init_rtt: float = 0.0,
        max_channels: int = 1,
        can_grow: bool = False,
        refuse: bool = False,
        stall_timeout: float | None = None,
    ) -> FakeLease:
        """A lease on ``channels`` new channels; the first saw ``init_rtt`` at set-up."""
        opened = [
            await server.channel(init_rtt=init_rtt if not n else 0.0, stall_timeout=stall_timeout)
            for n in range(channels)
        ]
        return cls(
            server,
            opened,
            max_channels=max_channels,
            can_grow=can_grow,
            refuse=refuse,
            stall_timeout=stall_timeout,
        )

    def connections_of(self, channels: list[SFTPSession]) -> int:
        return 1

    async def add(
        self, count: int, ready: Callable[[SFTPSession], None] | None = None
    ) -> list[SFTPSession]:
        self.asked += 1
        if self.refuse:
            raise ChannelRefused("fake: no more channels on this connection")
        count = min(count, self.max_channels - len(self.channels))
        added: list[SFTPSession] = []
        for _ in range(max(0, count)):
            sftp = await self.server.channel(stall_timeout=self.stall_timeout)
            self.channels.append(sftp)
            self.added += 1
            added.append(sftp)
            if ready is not None:
                ready(sftp)
        return added

    async def recover(self, *, stalled: bool) -> None:
        self.recovered.append(stalled)
        if self.recover_errors:
            raise self.recover_errors.pop(0)
        self.channels = [sftp for sftp in self.channels if sftp.broken is None]
        if not self.channels:
            self.channels = [await self.server.channel(stall_timeout=self.stall_timeout)]


def refused(message: str = "fake: refused") -> ConnectError:
    """A connection refused for now (retryable), as ``recover`` may meet."""
    return ConnectError(message)


def _string(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def _packet(ptype: int, body: bytes) -> bytes:
    return _U32.pack(len(body) + 1) + bytes((ptype,)) + body


def _status(rid: int, code: int, message: str = "") -> bytes:
    return _packet(101, _U32.pack(rid) + _U32.pack(code) + _string(message.encode()) + _string(b""))


def _take(data: bytes) -> tuple[bytes, bytes]:
    length = _U32.unpack_from(data)[0]
    return data[4 : 4 + length], data[4 + length :]
