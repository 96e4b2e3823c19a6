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

One direction is a ``_pipe._Pipe``; a connection, its two sockets and its two
pipes are a ``_connection._Connection``; this module has the listener and the faults.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, cast

from . import _pipe
from ._connection import _Connection, _Side
from ._model import LinkModel, LinkSpec, LinkStats
from ._pipe import _TICK, Direction, _Cut

__all__ = ["Direction", "LinkEmulator"]

logger = logging.getLogger("sshpipe.testing.linkemu")

#: How long a cut waits for its last bytes to reach a receiver that does not
#: read before resetting anyway (see ``LinkEmulator._reset_when_flushed``).
_CUT_FLUSH_SECONDS = 1.0


def _check_direction(direction: str) -> Direction:
    if direction not in ("up", "down"):
        raise ValueError(f"direction must be 'up' or 'down', not {direction!r}")
    return cast(Direction, direction)


class LinkEmulator:
    """A TCP proxy on loopback that makes the path to ``target`` look like a WAN link.

    All proxied connections share one link: one serializer of ``spec.rate``
    and one ``spec.queue`` per direction, as a physical link is shared (a
    client that opens two connections does not get twice the rate), and a
    delay of ``spec.rtt / 2`` (see ``sshpipe.testing.linkemu``). Faults act on the
    connections open when called.

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
        self._models: dict[Direction, LinkModel] = {
            "up": LinkModel.from_spec(spec),
            "down": LinkModel.from_spec(spec),
        }
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
        for model in self._models.values():  # connections made during the stall share it
            model.stall(now, seconds)
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
            peak_buffered=max(model.peak_undelivered for model in self._models.values()),
        )

    # -- for _Connection and _Pipe ----------------------------------------------------

    def model(self, direction: Direction) -> LinkModel:
        """The one model of ``direction`` that every connection shares."""
        return self._models[direction]

    def wake(self, direction: Direction, now: float) -> None:
        """A delivery freed room in the shared model: let paused senders check it."""
        for conn in self._conns:
            conn.pipe(direction).recheck(now)

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
        # _pipe._unsent, not a from-import: looked up on each call, so a test can patch it.
        while _pipe._unsent(dest) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(_TICK)
        for conn in victims:
            conn.abort(reset=True)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = self._running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def forget(self, conn: _Connection) -> None:
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
