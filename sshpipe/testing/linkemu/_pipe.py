"""One direction of a proxied connection: its model, its delay line and its one timer.

Also the socket helpers it and ``_connection`` use (no Nagle, unsent bytes,
reset with RST) and the armed ``cut_after``. Why it is built this way is in
``_proxy``'s docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import struct
from collections import deque
from typing import TYPE_CHECKING, Literal

from ._model import LinkModel

if TYPE_CHECKING:
    from ._connection import _Connection

Direction = Literal["up", "down"]

#: uvloop's clock and timers tick in milliseconds (and asyncio's own loop runs
#: anything within its clock resolution as due): what falls due within one tick
#: is delivered now, instead of re-arming a timer that rounds to zero and spins.
_TICK = 0.001

#: SO_LINGER on, timeout 0: close() then sends RST instead of FIN, so a cut
#: connection looks broken to both ends, not cleanly finished.
_LINGER_RESET = struct.pack("ii", 1, 0)

try:  # Linux: SIOCOUTQ (= TIOCOUTQ) is the bytes a socket has not had acknowledged yet
    import fcntl
    import termios

    _SIOCOUTQ: int | None = termios.TIOCOUTQ
except (ImportError, AttributeError):  # elsewhere only the transport's own buffer is seen
    _SIOCOUTQ = None


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
        # The model is shared with other connections: what this one will never
        # deliver must not keep counting against their in-flight cap.
        self.model.delivered(sum(len(data) for _, data in self._line))
        self._line.clear()

    def recheck(self, now: float) -> None:
        """Another connection's delivery changed the shared model: resume if allowed."""
        if not self._reading and not self._conn.closing:
            self._update_reading(now)
            self._arm(now)

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
        delivered = False
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
            delivered = True
            if self._dest_paused:  # write() called our pause_writing()
                break
        if delivered:
            link.wake(self.name, horizon)

    def _finish(self, dest: asyncio.Transport) -> None:
        self.finished = True
        if dest.can_write_eof():
            try:
                dest.write_eof()
            except OSError:
                # ENOTCONN: the receiver reset meanwhile (a close with bytes unread),
                # unseen while its reading was paused (a stall); asyncio's shutdown()
                # raises it here. A broken side breaks the other, as in side_lost().
                self._conn.abort(reset=True)
                return
        self._conn.pipe_finished()
