"""The emulator's asyncio side: a TCP proxy whose two directions follow ``LinkModel``.

Why it is cheap enough to carry 1 Gbit/s on a shared 2-core box:

* Protocols and transports, not streams: a read is one callback, with no
  future, no task wake-up and no buffer reassembly.
* A chunk is the ``bytes`` object ``data_received`` handed us, kept as is in
  the delay line (a deque of ``(deliver_at, data)``) until written: no copies
  and no per-byte work.
* One timer per direction, armed for the head of the delay line (or for when
  the queue has drained enough to read again). Delivery times never decrease
  along the FIFO line, so the head's time is the only one that matters; a timer
  per chunk would push thousands of handles a second through the loop's heap.
* Flow control is the transports' own: ``pause_reading()`` on the source while
  the model says the queue is full, and a destination that calls our
  ``pause_writing()`` gets nothing more until ``resume_writing()`` (the data
  waits in the delay line, whose in-flight cap then pauses the source).

A connection: the client connects, the proxy connects to the target (the
client is not read until then, and is reset if that fails); an EOF travels like
an empty chunk and reaches the other side as ``write_eof()``; when both
directions have ended, or either side fails, both transports close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import socket
import struct
import time
from collections import deque
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Literal, cast

from ._model import LinkModel, LinkSpec, LinkStats

__all__ = ["Direction", "LinkEmulator"]

logger = logging.getLogger("sshpipe.linkemu")

Direction = Literal["up", "down"]

#: uvloop's clock and timers tick in milliseconds (and asyncio's own loop runs
#: anything within its clock resolution as due): what falls due within one tick
#: is delivered now, instead of re-arming a timer that rounds to zero and spins.
_TICK = 0.001

#: SO_LINGER on, timeout 0: close() then sends RST instead of FIN, so a cut
#: connection looks broken to both ends, not cleanly finished.
_LINGER_RESET = struct.pack("ii", 1, 0)

#: How long a cut waits for its last bytes to reach a receiver that does not
#: read before resetting anyway (see ``LinkEmulator._reset_when_flushed``).
_CUT_FLUSH_SECONDS = 1.0

try:  # Linux: SIOCOUTQ (= TIOCOUTQ) is the bytes a socket has not had acknowledged yet
    import fcntl
    import termios

    _SIOCOUTQ: int | None = termios.TIOCOUTQ
except (ImportError, AttributeError):  # elsewhere only the transport's own buffer is seen
    _SIOCOUTQ = None


def _check_direction(direction: str) -> Direction:
    if direction not in ("up", "down"):
        raise ValueError(f"direction must be 'up' or 'down', not {direction!r}")
    return cast(Direction, direction)


def _set_nodelay(transport: asyncio.BaseTransport) -> None:
    """No Nagle: a small write is a ping whose timing the emulator promises."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _unsent(transport: asyncio.Transport) -> int:
    """Bytes written to ``transport`` that its peer has not received yet (0 once it is closed)."""
    if transport.is_closing():
        return 0
    pending: int = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if _SIOCOUTQ is not None and sock is not None:
        try:
            raw = fcntl.ioctl(sock.fileno(), _SIOCOUTQ, b"\0\0\0\0")
        except OSError:
            return pending
        pending += struct.unpack("i", raw)[0]
    return pending


def _reset(transport: asyncio.Transport) -> None:
    """Abort with RST (see ``_LINGER_RESET``)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and not transport.is_closing():
        # OSError: already shut down by the peer, and a plain abort is all there is.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
    transport.abort()


class _Cut:
    """An armed ``cut_after``: bytes still allowed through in one direction."""

    __slots__ = ("direction", "remaining")

    def __init__(self, direction: Direction, remaining: int) -> None:
        self.direction = direction
        self.remaining = remaining


class _Pipe:
    """One direction of one connection: its model, its delay line and its one timer."""

    __slots__ = (
        "_conn",
        "_dest_paused",
        "_ended",
        "_line",
        "_loop",
        "_reading",
        "_timer",
        "_timer_at",
        "dest",
        "finished",
        "model",
        "name",
        "source",
    )

    def __init__(
        self,
        conn: _Connection,
        name: Direction,
        model: LinkModel,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._conn = conn
        self.name = name
        self.model = model
        self._loop = loop
        self.source: asyncio.Transport | None = None
        self.dest: asyncio.Transport | None = None
        self._line: deque[tuple[float, bytes]] = deque()  # b"" is the end of stream
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._reading = False
        self._ended = False  # nothing more will be admitted (EOF, or close_direction)
        self._dest_paused = False
        self.finished = False  # the end of stream was handed to dest

    def __repr__(self) -> str:
        return (
            f"<_Pipe {self.name} queued={len(self._line)} reading={self._reading} "
            f"dest_paused={self._dest_paused} ended={self._ended} finished={self.finished}>"
        )

    # -- events from the transports ------------------------------------------------

    def attach_source(self, transport: asyncio.Transport) -> None:
        """``transport`` is now the source; it is read unless the model says otherwise."""
        self.source = transport
        if self._ended:  # close_direction came first: never read it
            transport.pause_reading()
            return
        now = self._loop.time()
        if self.model.reading_allowed(now, reading=False):
            transport.resume_reading()
            self._reading = True
        else:
            transport.pause_reading()
        self._arm(now)

    def attach_dest(self, transport: asyncio.Transport) -> None:
        self.dest = transport
        self._arm(self._loop.time())

    def push(self, data: bytes) -> None:
        if self._ended or self._conn.closing:
            return  # after close_direction its receiver has seen EOF; or we are tearing down
        now = self._loop.time()
        self._line.append((self.model.admit(now, len(data)), data))
        self._update_reading(now)
        self._arm(now)

    def push_eof(self) -> None:
        if self._ended or self._conn.closing:
            return
        self._ended = True
        now = self._loop.time()
        self._line.append((self.model.admit(now, 0), b""))
        self._arm(now)

    def pause_dest(self) -> None:
        self._dest_paused = True

    def resume_dest(self) -> None:
        self._dest_paused = False
        now = self._loop.time()
        self._deliver(now + _TICK)
        if not self._conn.closing:
            self._update_reading(now)
            self._arm(now)

    # -- faults ---------------------------------------------------------------------

    def end_now(self) -> None:
        """Half-close: EOF to the receiver right after what is queued; stop reading."""
        if self._ended:
            return  # an EOF is queued already
        self._ended = True
        if self.source is not None:
            self.source.pause_reading()
            self._reading = False
        now = self._loop.time()
        self._line.append((self._line[-1][0] if self._line else now, b""))
        self._arm(now)

    def stall(self, now: float, seconds: float) -> None:
        self.model.stall(now, seconds)
        self._arm(now)

    # -- the timer ------------------------------------------------------------------

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = math.inf
        self._line.clear()

    def _arm(self, now: float) -> None:
        """Keep the one timer at the next moment something can happen."""
        if self._conn.closing:
            return
        deadline = math.inf
        if self._line and self.dest is not None and not self._dest_paused:
            deadline = max(self._line[0][0], self.model.stalled_until)
        if not self._reading and not self._ended and self.source is not None:
            resume = self.model.resume_time(now)
            if resume is not None and resume < deadline:
                deadline = resume
        if deadline >= self._timer_at:
            return  # an earlier wake-up is set: it re-arms when it fires
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = deadline
        self._timer = self._loop.call_at(deadline, self._on_timer)

    def _on_timer(self) -> None:
        # Trust the deadline we armed: uvloop rounds timers to the millisecond
        # and may run us a fraction of one early.
        horizon = max(self._loop.time(), self._timer_at) + _TICK
        self._timer = None
        self._timer_at = math.inf
        self._deliver(horizon)
        if not self._conn.closing:
            self._update_reading(horizon)
            self._arm(horizon)

    # -- delivery -------------------------------------------------------------------

    def _update_reading(self, now: float) -> None:
        source = self.source
        if source is None or self._ended:
            return
        allowed = self.model.reading_allowed(now, reading=self._reading)
        if allowed != self._reading:
            self._reading = allowed
            if allowed:
                source.resume_reading()
            else:
                source.pause_reading()

    def _deliver(self, horizon: float) -> None:
        """Write every chunk due by ``horizon``, unless stalled or the receiver is full."""
        dest = self.dest
        if dest is None or self._dest_paused or self.model.stalled_until > horizon:
            return
        if dest.is_closing():
            return  # broken under us; its connection_lost() is on the way and tears down
        line = self._line
        link = self._conn.link
        while line and line[0][0] <= horizon:
            data = line.popleft()[1]
            if not data:
                self._finish(dest)
                return
            cut = link.armed_cut
            if cut is not None and cut.direction == self.name:
                if len(data) > cut.remaining:
                    if cut.remaining:
                        dest.write(data[: cut.remaining])  # the one copy, once per cut
                        link.count(self.name, cut.remaining)
                    link.fire_cut(dest)
                    return
                cut.remaining -= len(data)
            dest.write(data)
            self.model.delivered(len(data))
            link.count(self.name, len(data))
            if self._dest_paused:  # write() called our pause_writing()
                return

    def _finish(self, dest: asyncio.Transport) -> None:
        self.finished = True
        if dest.can_write_eof():
            dest.write_eof()
        self._conn.pipe_finished()


class _Side(asyncio.Protocol):
    """The protocol of one socket of a proxied connection, client's or target's."""

    __slots__ = ("_conn", "_incoming", "_is_target", "_outgoing")

    def __init__(self, conn: _Connection, *, is_target: bool) -> None:
        self._conn = conn
        self._is_target = is_target
        self._incoming = conn.down if is_target else conn.up  # fed by what this side sends
        self._outgoing = conn.up if is_target else conn.down  # writes to this side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)
        if self._is_target:
            self._conn.target_made(tcp)
        else:
            self._conn.client_made(tcp)

    def data_received(self, data: bytes) -> None:
        self._incoming.push(data)

    def eof_received(self) -> bool:
        self._incoming.push_eof()
        return True  # keep the transport open: the other direction may go on (half-close)

    def pause_writing(self) -> None:
        self._outgoing.pause_dest()

    def resume_writing(self) -> None:
        self._outgoing.resume_dest()

    def connection_lost(self, exc: Exception | None) -> None:
        self._conn.side_lost(exc)


class _Connection:
    """A client connection and its connection to the target."""

    __slots__ = (
        "_connecting",
        "_open",
        "client",
        "closing",
        "down",
        "link",
        "target",
        "up",
    )

    def __init__(self, link: LinkEmulator, loop: asyncio.AbstractEventLoop) -> None:
        self.link = link
        now = loop.time()
        self.up = _Pipe(self, "up", link.new_model(now), loop)
        self.down = _Pipe(self, "down", link.new_model(now), loop)
        self.client: asyncio.Transport | None = None
        self.target: asyncio.Transport | None = None
        self.closing = False
        self._open = 0  # transports made and not yet lost
        self._connecting = False

    def __repr__(self) -> str:
        return f"<_Connection closing={self.closing} up={self.up!r} down={self.down!r}>"

    def pipe(self, direction: Direction) -> _Pipe:
        return self.up if direction == "up" else self.down

    def client_made(self, transport: asyncio.Transport) -> None:
        self._open += 1
        self.client = transport
        _set_nodelay(transport)
        transport.pause_reading()  # nowhere to forward to until the target answers
        self.up.source = transport
        self.down.attach_dest(transport)
        self._connecting = True
        self.link.spawn(self._connect())

    async def _connect(self) -> None:
        link = self.link
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(
                lambda: _Side(self, is_target=True), link.target_host, link.target_port
            )
        except OSError as exc:
            logger.info("link emulator: cannot connect to the target: %s", exc)
            self.abort(reset=True)  # as the target refused us, the client sees a reset
        except Exception:
            self.abort(reset=True)  # a bug: do not leave the client hanging; _task_done logs it
            raise
        finally:
            self._connecting = False
            self._maybe_gone()

    def target_made(self, transport: asyncio.Transport) -> None:
        self._open += 1
        self.target = transport
        if self.closing:  # the client went away while we were connecting
            transport.abort()
            return
        _set_nodelay(transport)
        self.up.attach_dest(transport)
        self.down.attach_source(transport)
        if self.client is not None:
            self.up.attach_source(self.client)

    def pipe_finished(self) -> None:
        if self.up.finished and self.down.finished:
            self.close()

    def close(self) -> None:
        """Both directions ended: flush what the transports hold, then close them."""
        if self.closing:
            return
        self.closing = True
        self.up.cancel()
        self.down.cancel()
        for transport in (self.client, self.target):
            if transport is not None:
                transport.close()
        self._maybe_gone()

    def freeze(self) -> None:
        """Stop moving data either way, keeping the sockets open (a cut is about to reset them)."""
        self.closing = True
        self.up.cancel()
        self.down.cancel()
        for transport in (self.client, self.target):
            if transport is not None and not transport.is_closing():
                transport.pause_reading()

    def abort(self, *, reset: bool) -> None:
        """Drop everything now; with ``reset`` both ends get RST, not FIN."""
        self.closing = True
        self.up.cancel()
        self.down.cancel()
        for transport in (self.client, self.target):
            if transport is not None:
                if reset:
                    _reset(transport)
                else:
                    transport.abort()
        self._maybe_gone()  # nothing to wait for if no transport was ever made

    def side_lost(self, exc: Exception | None) -> None:
        self._open -= 1
        if not self.closing:
            # A broken side breaks the other (RST), as a path that fails would.
            self.abort(reset=exc is not None)
        self._maybe_gone()

    def _maybe_gone(self) -> None:
        if self.closing and self._open == 0 and not self._connecting:
            self.link.forget(self)


class LinkEmulator:
    """A TCP proxy on loopback that makes the path to ``target`` look like a WAN link.

    Each direction of every proxied connection gets its own serializer of
    ``spec.rate``, its own ``spec.queue`` and a delay of ``spec.rtt / 2``
    (see ``sshpipe.linkemu``). Faults act on the connections open when called.

    Example::

        async with LinkEmulator("127.0.0.1", 22, LinkSpec(rtt=0.1, rate=1e9)) as link:
            connect_to("127.0.0.1", link.port)

    Args:
        target_host: where every accepted connection is forwarded.
        target_port: the target's port.
        spec: the link.
        listen_host: address to listen on.
        listen_port: port to listen on; 0 picks a free one (see ``port``).
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        spec: LinkSpec,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
    ) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.spec = spec
        self.listen_host = listen_host
        self.port = listen_port  # the bound port once started
        self.armed_cut: _Cut | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle: asyncio.Event | None = None
        self._closed = False
        self._bytes_up = 0
        self._bytes_down = 0
        self._accepted = 0
        self._peak_buffered = 0
        self._stalled_until = -math.inf
        self._started_wall = 0.0
        self._started_cpu = 0.0
        self._stopped: tuple[float, float] | None = None  # (wall, cpu) at aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "listening" if self._server else "new"
        return (
            f"<LinkEmulator {state} {self.listen_host}:{self.port} -> "
            f"{self.target_host}:{self.target_port} rtt={self.spec.rtt} rate={self.spec.rate} "
            f"queue={self.spec.queue_bytes} active={len(self._conns)}>"
        )

    async def __aenter__(self) -> LinkEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Listen; ``port`` is the bound port afterwards.

        Raises:
            OSError: the address cannot be bound.
            RuntimeError: started twice, or after ``aclose()``.
        """
        if self._server is not None or self._closed:
            raise RuntimeError("a LinkEmulator starts once")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._idle = asyncio.Event()
        self._idle.set()
        self._server = await loop.create_server(self._accept, self.listen_host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self._started_wall = time.monotonic()
        self._started_cpu = time.process_time()
        logger.debug("%r", self)

    async def aclose(self) -> None:
        """Stop listening and abort every proxied connection; safe to call twice."""
        if not self._closed:
            self._closed = True
            self._stopped = (time.monotonic(), time.process_time())
            if self._server is not None:
                self._server.close()
            for conn in list(self._conns):
                conn.abort(reset=False)
            for task in self._tasks:
                task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks))
        if self._server is not None:
            await self._server.wait_closed()
        if self._idle is not None:
            await self._idle.wait()  # every transport has reported connection_lost

    # -- faults -----------------------------------------------------------------------

    def cut_after(self, nbytes: int, *, direction: str = "down") -> None:
        """Reset every connection once ``nbytes`` more have been delivered in ``direction``.

        One-shot. Bytes delivered in ``direction`` ("down" = target to client,
        "up" = client to target) are counted over all connections from now on;
        the chunk that would pass ``nbytes`` is cut to fit. Then every
        connection open at that moment stops moving data, and once the
        receiver's socket has taken those last bytes (at most 1 s later, in
        case it never reads) both sides of each are aborted with RST: a
        receiver that keeps reading gets exactly ``nbytes``, then
        ``ConnectionResetError``. Later connections are unaffected. Calling it
        again re-arms it with a new count.

        Raises:
            ValueError: a negative count or an unknown direction.
        """
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"nbytes must be a whole number >= 0, not {nbytes!r}")
        self.armed_cut = _Cut(_check_direction(direction), nbytes)

    def stall(self, seconds: float) -> None:
        """Deliver nothing, either way, for ``seconds`` from now; then carry on.

        The serializers stop too, so what is sent meanwhile fills the queues
        and pushes back on the senders as a full queue does. What was held
        back is delivered when the stall ends. Connections accepted during the
        stall are stalled until its end.

        Raises:
            ValueError: negative or non-finite ``seconds``.
            RuntimeError: the emulator is not started.
        """
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"seconds must be finite and >= 0, not {seconds!r}")
        now = self._running_loop().time()
        self._stalled_until = max(self._stalled_until, now + seconds)
        for conn in list(self._conns):
            conn.up.stall(now, seconds)
            conn.down.stall(now, seconds)

    def close_direction(self, direction: str) -> None:
        """Half-close ``direction`` on every current connection.

        What is already queued in that direction is delivered, then its
        receiver gets EOF (``write_eof()``); the sender is no longer read.
        The other direction keeps working.

        Raises:
            ValueError: an unknown direction.
        """
        name = _check_direction(direction)
        for conn in list(self._conns):
            conn.pipe(name).end_now()

    @property
    def stats(self) -> LinkStats:
        """Counters since ``start()``; frozen by ``aclose()``."""
        wall, cpu = self._stopped or (time.monotonic(), time.process_time())
        started = self._server is not None
        return LinkStats(
            bytes_up=self._bytes_up,
            bytes_down=self._bytes_down,
            connections=self._accepted,
            active=len(self._conns),
            cpu_seconds=cpu - self._started_cpu if started else 0.0,
            wall_seconds=wall - self._started_wall if started else 0.0,
            peak_buffered=max(
                self._peak_buffered,
                *(c.up.model.peak_undelivered for c in self._conns),
                *(c.down.model.peak_undelivered for c in self._conns),
                0,
            ),
        )

    # -- for _Connection and _Pipe ----------------------------------------------------

    def new_model(self, now: float) -> LinkModel:
        model = LinkModel.from_spec(self.spec)
        if self._stalled_until > now:
            model.stall(now, self._stalled_until - now)
        return model

    def count(self, direction: Direction, nbytes: int) -> None:
        if direction == "up":
            self._bytes_up += nbytes
        else:
            self._bytes_down += nbytes

    def fire_cut(self, dest: asyncio.Transport) -> None:
        """The cut is reached: freeze every connection; reset them once ``dest`` has flushed."""
        self.armed_cut = None
        victims = list(self._conns)
        for conn in victims:
            conn.freeze()
        self.spawn(self._reset_when_flushed(victims, dest))

    async def _reset_when_flushed(
        self, victims: list[_Connection], dest: asyncio.Transport
    ) -> None:
        # A RST makes the kernel drop what it has not yet sent, so resetting at
        # once would lose the last bytes of the cut whenever the receiver's
        # window is full. They count as delivered: wait (briefly) until the
        # peer has them, so a receiver that reads gets exactly the promised N.
        loop = self._running_loop()
        deadline = loop.time() + _CUT_FLUSH_SECONDS
        # Polled: the kernel signals no event when its send queue empties.
        while _unsent(dest) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(_TICK)
        for conn in victims:
            conn.abort(reset=True)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self._running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def forget(self, conn: _Connection) -> None:
        self._peak_buffered = max(
            self._peak_buffered, conn.up.model.peak_undelivered, conn.down.model.peak_undelivered
        )
        self._conns.discard(conn)
        if not self._conns and self._idle is not None:
            self._idle.set()

    def _accept(self) -> asyncio.Protocol:
        conn = _Connection(self, self._running_loop())
        self._conns.add(conn)
        self._accepted += 1
        if self._idle is not None:
            self._idle.clear()
        return _Side(conn, is_target=False)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.error("link emulator: a background task failed", exc_info=exc)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the LinkEmulator is not started")
        return self._loop
