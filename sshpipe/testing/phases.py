"""A server that attacks one phase of a connection's life: it never answers, or floods.

Each attack aims at a step the client waits on that is not a plain SFTP
request, or at the client's event loop itself. The server is asyncssh's
(chrooted at the served root, links served as stored), behind a ``Tap``
(``sshpipe.testing.tap``) that bends the one step; everything else is
answered as an honest server would.

====================  ==============================================================
``PhaseAttack.kind``  what the server does
====================  ==============================================================
``init-silent``       the SFTP INIT is never answered
``version-trickle``   the VERSION is sent one byte every ``trickle`` seconds
``later-opens``       each connection opens its first ``answered`` channels; a later
                      CHANNEL_OPEN is never answered
``subsystem-silent``  the channel opens; its ``subsystem`` request is never answered
``close-silent``      the CLOSE of a file is never answered (its data all was)
``flood``             at the first READ, stops reading the socket and sends
                      GLOBAL_REQUESTs (want reply) and CHANNEL_OPENs, as fast as the
                      client takes them or ``flood_rate`` a second, until the
                      connection ends
``long-status``       an OPEN of a path holding ``status`` is refused with a message
                      of ``status_bytes`` bytes, terminal escapes included
====================  ==============================================================

Before SSH is up, ``slow_banner(kind, every)`` is a TCP server that never gets
to a key exchange: it sends its version line a byte every ``every`` seconds
(``"version"``), or endless lines before it, one every ``every`` seconds
(``"lines"``: RFC 4253 §4.2 lets a server send lines before its version).

``attacking(workdir, attack)`` runs the server (``embedded_server`` with
``phase_server(attack, root)`` as its ``server_factory``) and stops what the
attack still does when the block ends. The attack counts what it did, so a
test can show the attack really happened.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import asyncssh
from asyncssh.constants import MSG_CHANNEL_OPEN, MSG_GLOBAL_REQUEST
from asyncssh.packet import Boolean, String, UInt32

from .embedded import EmbeddedServer, embedded_server
from .hostile import FaithfulLinks, Recorder
from .tap import FXP_CLOSE, FXP_INIT, FXP_OPEN, FXP_READ, FXP_VERSION, Packet, Tap, TappedSession

__all__ = ["ESCAPES", "Kind", "PhaseAttack", "attacking", "phase_server"]

Kind = Literal[
    "init-silent",
    "version-trickle",
    "later-opens",
    "subsystem-silent",
    "close-silent",
    "flood",
    "long-status",
]
# What a long STATUS message is made of: text, and escapes that must reach no terminal.
ESCAPES = "denied \x1b[2J\x1b]0;owned\x07\r\n"
FX_FAILURE = 4
# Flood packets sent between two looks at the client: a batch the loop turns over
# in well under a millisecond, and a write buffer that stays a few MiB at most.
FLOOD_BATCH = 256
FLOOD_BUFFER = 4 * 1024 * 1024


@dataclass
class PhaseAttack:
    """The attack, its settings, and what the server did (read by the tests).

    Attributes:
        kind: which phase is attacked (the module's table).
        trickle: seconds between two bytes of a trickled VERSION.
        flood_rate: requests a second of a ``flood`` (None: as fast as it goes).
        answered: channel opens each connection answers (``later-opens``).
        status_bytes: length of the long STATUS message.
        connections: connections that logged in.
        held: channel opens, subsystem requests, INITs and CLOSEs left unanswered.
        flooded: GLOBAL_REQUESTs and CHANNEL_OPENs sent (``flood``).
    """

    kind: Kind
    trickle: float = 1.0
    flood_rate: float | None = None
    answered: int = 1
    status_bytes: int = 1 << 20
    connections: int = 0
    held: int = 0
    flooded: int = 0
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, repr=False)

    def status_text(self) -> str:
        copies = -(-self.status_bytes // len(ESCAPES))
        return (ESCAPES * copies)[: self.status_bytes]


def phase_server(attack: PhaseAttack, root: Path) -> Any:
    """A ``server_factory`` for ``embedded_server``: serves ``root``, attacks as ``attack`` says."""
    return lambda: _PhaseConnection(attack, root)


@contextlib.asynccontextmanager
async def attacking(workdir: Path, attack: PhaseAttack) -> AsyncIterator[EmbeddedServer]:
    """The server serving ``workdir/root`` and attacking, for the ``async with`` block."""
    root = workdir / "root"
    root.mkdir(parents=True, exist_ok=True)
    try:
        async with embedded_server(
            workdir, root=root, server_factory=phase_server(attack, root)
        ) as server:
            yield server
    finally:
        tasks = list(attack._tasks)  # a trickle or a flood the client left behind
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _Served(FaithfulLinks):
    def __init__(self, chan: Any, root: Path) -> None:
        super().__init__(chan, root, Recorder())


class _PhaseConnection(asyncssh.SSHServer):
    """One connection: counts its channel opens, holds those past ``answered``."""

    def __init__(self, attack: PhaseAttack, root: Path) -> None:
        self.attack = attack
        self.root = root
        self.opens = 0
        self.conn: asyncssh.SSHServerConnection | None = None
        self.flooding = False
        self._never: list[asyncio.Future[None]] = []

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.attack.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        for never in self._never:
            never.cancel()

    def flood(self) -> None:
        """Start the flood, once per connection."""
        if self.conn is not None and not self.flooding:
            self.flooding = True
            _start(self.attack, _flood(self.conn, self.attack))

    def session_requested(self) -> Any:
        self.opens += 1
        if self.attack.kind == "later-opens" and self.opens > self.attack.answered:
            self.attack.held += 1
            # asyncssh answers the open once this is done: it never is.
            never: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._never.append(never)
            return never
        return _PhaseSession(self, lambda chan: _Served(chan, self.root))


class _PhaseSession(TappedSession):
    """An SFTP session channel behind the attack's tap."""

    def __init__(self, connection: _PhaseConnection, sftp: Any) -> None:
        super().__init__(sftp, _PhaseTap(connection))
        self.connection = connection

    def subsystem_requested(self, subsystem: str) -> Any:
        if self.connection.attack.kind == "subsystem-silent":
            self.connection.attack.held += 1
            return None  # asyncssh sends no answer for a request whose handler says None
        return super().subsystem_requested(subsystem)


class _PhaseTap(Tap):
    def __init__(self, connection: _PhaseConnection) -> None:
        self.connection = connection
        self.attack = connection.attack

    def request(self, session: TappedSession, packet: Packet) -> bool:
        kind = self.attack.kind
        if (kind == "init-silent" and packet.type == FXP_INIT) or (
            kind == "close-silent" and packet.type == FXP_CLOSE
        ):
            self.attack.held += 1
            return False
        if kind == "long-status" and packet.type == FXP_OPEN and b"status" in packet.first_string():
            assert packet.id is not None
            session.answer(packet.id, FX_FAILURE, self.attack.status_text())
            return False
        if kind == "flood" and packet.type == FXP_READ:
            self.connection.flood()
            return False
        return True

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        if self.attack.kind == "version-trickle" and packet.type == FXP_VERSION:
            _start(self.attack, _trickle(session, packet.framed(), self.attack.trickle))
            return None
        return packet


def _start(attack: PhaseAttack, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` as a task of the attack (stopped by ``attacking`` at its end)."""
    task = asyncio.get_running_loop().create_task(work)
    attack._tasks.add(task)
    task.add_done_callback(attack._tasks.discard)


async def _trickle(session: TappedSession, data: bytes, every: float) -> None:
    """Send ``data`` one byte every ``every`` seconds, while the channel lasts."""
    for at in range(len(data)):
        if session.channel.is_closing():
            return
        session.send_raw(data[at : at + 1])
        await asyncio.sleep(every)


async def _flood(conn: asyncssh.SSHServerConnection, attack: PhaseAttack) -> None:
    """Stop reading the client, and send it requests it must answer, as fast as it takes them.

    A test server's liberty: asyncssh has no public way to stop reading a
    connection or to send a request nobody waits the answer of, so its
    transport and ``send_packet`` are used as they are.
    """
    transport: Any = getattr(conn, "_transport", None)
    if transport is None:
        return
    transport.pause_reading()  # the client's replies, and its SFTP requests, pile up
    channel = 1 << 20
    rate = attack.flood_rate
    batch = FLOOD_BATCH if rate is None else 1
    with contextlib.suppress(asyncssh.Error, OSError, AttributeError):
        while not transport.is_closing():
            for _ in range(batch):
                conn.send_packet(MSG_GLOBAL_REQUEST, String(b"flood@sshpipe.test"), Boolean(True))
                conn.send_packet(
                    MSG_CHANNEL_OPEN,
                    String(b"flood@sshpipe.test"),
                    UInt32(channel),
                    UInt32(1 << 20),
                    UInt32(32768),
                )
                channel += 1
            attack.flooded += 2 * batch
            if rate is not None:
                await asyncio.sleep(2 / rate)  # two requests a round
            else:
                await asyncio.sleep(0.01 if transport.get_write_buffer_size() > FLOOD_BUFFER else 0)


@contextlib.asynccontextmanager
async def slow_banner(kind: Literal["version", "lines"], every: float = 1.0) -> AsyncIterator[int]:
    """A TCP server on a free loopback port (yielded) that sends its banner slowly."""
    stop = asyncio.Event()
    talking: set[asyncio.Task[Any]] = set()

    async def pause() -> bool:
        """Wait ``every`` seconds; False once the server is stopping."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(every):
                await stop.wait()
        return not stop.is_set()

    async def talk(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        talking.add(task)
        with contextlib.suppress(OSError), contextlib.closing(writer):
            if kind == "version":
                for byte in b"SSH-2.0-Trickle_1.0\r\n":
                    writer.write(bytes((byte,)))
                    await writer.drain()
                    if not await pause():
                        return
            while kind == "lines" and await pause():
                writer.write(b"Welcome, please wait for the version line.\r\n")
                await writer.drain()
            await stop.wait()  # the whole version sent: nothing after it

    server = await asyncio.start_server(talk, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        stop.set()
        await asyncio.gather(*talking, return_exceptions=True)
        await server.wait_closed()
