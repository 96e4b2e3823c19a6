"""A proxied connection: the protocol of each of its sockets, and its two pipes.

See ``_proxy``'s docstring for its life cycle.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, cast

from ._pipe import Direction, _Pipe, _reset, _set_nodelay

if TYPE_CHECKING:
    from ._proxy import LinkEmulator

logger = logging.getLogger("sshpipe.testing.linkemu")


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
        self.up = _Pipe(self, "up", link.model("up"), loop)
        self.down = _Pipe(self, "down", link.model("down"), loop)
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
