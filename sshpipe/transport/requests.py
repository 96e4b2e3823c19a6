"""The requests under an SFTP session: ids, replies owed, the stall watchdog.

``RequestChannel`` sends what it is given down a byte pipe (``write``/
``close``) and matches each reply the pipe hands back (``data_received``,
``connection_lost``) to the callback of the request it answers; it never sees
asyncssh. ``sftp.SFTPSession`` builds the protocol's requests on it.

Hot-path requests (READ, WRITE) take a callback instead of returning a future:
a transfer keeps 128 of them in flight and a future plus a task per request is
pure overhead. Control requests (OPEN, CLOSE, STAT...) are awaited.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from ..core import codec
from ..core.errors import ClosedError, ConnectionBroken, ProtocolError, Stalled
from ..core.replyparser import ReplyParser
from ..core.servercaps import ServerCaps
from ..core.status import status_error
from .replies import ReplyCallback, ReplyClock, quiet
from .wiring import Pipe

logger = logging.getLogger("sshpipe.sftp")

_R = TypeVar("_R", bound="codec.Reply")


class RequestChannel:
    """Requests down one pipe and their replies back, each to its callback.

    Args:
        pipe: where request bytes go; replies come back through ``data_received``.
        name: used in log lines and ``repr``.
        max_reply: the longest reply accepted (``core.sizing.reply_cap``).
        stall_timeout: seconds the server may owe a reply without sending a
            byte before the session counts as dropped (``Stalled``); None never.
    """

    def __init__(
        self,
        pipe: Pipe,
        *,
        name: str = "sftp",
        max_reply: int = codec.DEFAULT_MAX_REPLY_LEN,
        stall_timeout: float | None = None,
        replies: ReplyClock | None = None,
    ) -> None:
        self._pipe = pipe
        self.name = name
        self._parser = ReplyParser(max_reply)
        # Every request, control ones too (OPEN, STAT, limits, CLOSE), is
        # covered: a server that never answers one fails the session instead
        # of hanging the transfer. Transfers set their own (``stall_timeout``).
        self.stall_timeout = stall_timeout
        self._watchdog: asyncio.TimerHandle | None = None
        self._pending: dict[int, ReplyCallback] = {}
        self._slow: dict[int, float] = {}  # request id: seconds its answer may take more
        # Requests past ``caps.requests`` (a server that stalled past some):
        # owed to their senders, written as replies make room, in order.
        self._held: deque[bytes] = deque()
        self._next_id = 0
        self._version: asyncio.Future[codec.Version] | None = None  # INIT's answer
        self._broken: BaseException | None = None
        # Caps the server was found to impose, shared by its channels (the
        # pool's): a stall here lowers the requests the next attempt keeps.
        self.caps = ServerCaps()
        # The watchdog's clocks: since when the server owes us a reply, when a
        # byte of this channel last came, when a whole reply last came on any
        # channel of the connection (``replies``, shared). See ``_silence``.
        now = time.monotonic()
        self._owed_since = now
        self._last_byte = now
        self._replies = replies if replies is not None else ReplyClock(now)
        # Told once no reply is owed (or the channel ended): the pool's settling.
        self._drained: list[Callable[[], None]] = []
        # Replies are owed that nobody waits for (a cancelled transfer's, maybe
        # megabytes): the pool lets them come before it lends the channel again.
        self.unsettled = False
        # Called once the watchdog finds the server silent (the link it runs on
        # drops its connection: ``sftp.lent_session``).
        self.on_stalled: Callable[[], None] | None = None

    def __repr__(self) -> str:
        state = "broken" if self._broken else "open"
        return f"<{type(self).__name__} {self.name} {state} pending={len(self._pending)}>"

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def broken(self) -> BaseException | None:
        return self._broken

    # -- pipe callbacks ----------------------------------------------------

    def _silence(self, now: float) -> float:
        """Seconds the server has owed a reply while this channel heard no byte, or its
        connection finished no reply: the one stall detector every transfer and tree
        relies on (the pool sets each channel's ``stall_timeout`` to its transfer's).

        Bytes alone would let a server trickle a reply a byte at a time forever;
        whole replies alone would count a channel whose data waits behind its
        siblings' on the same connection (a thin link, big windows) as silent.
        """
        return now - max(self._owed_since, min(self._last_byte, self._replies.at))

    def abort(self, exc: BaseException) -> None:
        """Give up on the session: every request in flight fails with ``exc`` at once.

        ``exc`` says why (``Stalled``, ``ConnectionBroken``), so the work in
        flight knows whether to retry; ``close`` is for closing on purpose.
        """
        self._fail(exc)

    def data_received(self, data: bytes) -> None:
        self._last_byte = time.monotonic()
        if self._broken is not None:
            return
        try:
            self._parser.feed(data)
            for message in self._parser.drain():
                self._dispatch(message)
        except codec.CodecError as exc:
            self._fail(ProtocolError(f"{self.name}: malformed reply from server: {exc}"))

    def connection_lost(self, exc: BaseException | None) -> None:
        reason = exc if exc is not None else ConnectionBroken(f"{self.name}: channel closed")
        self._fail(reason)

    def _dispatch(self, message: codec.ServerMessage) -> None:
        self._replies.at = time.monotonic()  # a whole message: the connection answers
        if isinstance(message, codec.Version):
            if self._version is None or self._version.done():
                raise codec.CodecError("unexpected VERSION message")
            self._version.set_result(message)
            return
        if self._slow:
            self._slow.pop(message.request_id, None)
        callback = self._pending.pop(message.request_id, None)
        if callback is None:
            # A reply to a request we never sent (or already answered): the peer is
            # broken or hostile, and nothing it says on this session can be trusted.
            raise codec.CodecError(f"reply for unknown request id {message.request_id}")
        if self._held:
            self._send_held()
        callback(message)
        if self._drained and not self._pending:
            self._soon_drained()

    def _fail(self, exc: BaseException) -> None:
        if self._broken is not None:
            return
        self._broken = exc
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        pending, self._pending = self._pending, {}
        self._slow.clear()
        self._held.clear()
        if self._version is not None and not self._version.done():
            self._version.set_exception(exc)
        for callback in pending.values():
            callback(exc)
        self._pipe.close()
        if self._drained:
            self._soon_drained()

    def on_drained(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once no reply is owed, or the channel has ended.

        Called soon after, from the loop, not from inside a reply: a request a
        reply's future leads to (a late OPEN's CLOSE) is sent before the check.
        """
        self._drained.append(callback)
        if not self._pending or self._broken is not None:
            self._soon_drained()

    def _soon_drained(self) -> None:
        asyncio.get_running_loop().call_soon(self._check_drained)

    def _check_drained(self) -> None:
        if self._pending and self._broken is None:
            return  # more was asked since: the next last reply checks again
        callbacks, self._drained = self._drained, []
        for callback in callbacks:
            callback()

    def _watch(self, delay: float) -> None:
        self._watchdog = asyncio.get_running_loop().call_later(delay, self._check_silence)

    def _check_silence(self) -> None:
        """The watchdog's look: fail the session once the server owed a reply too long."""
        self._watchdog = None
        if self._broken is not None or not self._pending or self.stall_timeout is None:
            return  # re-armed by the next request owed
        timeout = self.stall_timeout + max(self._slow.values(), default=0.0)
        silent = self._silence(time.monotonic())
        if silent < timeout:
            self._watch(timeout - silent)
            return
        owed = len(self._pending) - len(self._held)
        logger.debug("%s: no reply for %.1f s with %d owed: stalled", self.name, silent, owed)
        # The next attempt asks for fewer at once.
        self.caps.stalled(owed, time.monotonic(), owed_since=self._owed_since)
        self._fail(Stalled(f"{self.name}: no reply from the server for {timeout:g} s"))
        if self.on_stalled is not None:
            # Now, not at the reconnect after the backoff: a server that went
            # silent here may still be keeping the loop busy (a flood of
            # requests it wants answered), which would slow every step until then.
            self.on_stalled()

    # -- sending -------------------------------------------------------------

    def _allocate(self, callback: ReplyCallback) -> int:
        if self._broken is not None:
            raise self._broken
        if not self._pending:  # silence counts from the first request owed
            self._owed_since = time.monotonic()
            if self._watchdog is None and self.stall_timeout is not None:
                self._watch(self.stall_timeout)
        request_id = self._next_id
        self._next_id = (request_id + 1) & 0xFFFFFFFF
        self._pending[request_id] = callback
        return request_id

    def _send(self, request_id: int, data: bytes, payload: bytes | memoryview = b"") -> None:
        """Write one request (``payload``: a WRITE's bytes, after ``data``); if the pipe
        is gone, the session breaks with it.

        The request is no longer owed, and its sender gets the error raised
        here, not also through its callback: nothing is left to fail unseen.
        """
        cap = self.caps.requests
        if cap is not None and len(self._pending) - len(self._held) > cap:
            # Past what the server answers: sent as replies come, as a copy
            # (the sender may reuse a buffer it lent once this returns).
            self._held.append(data + payload if payload else data)
            return
        try:
            self._pipe.write(data, payload)
        except ConnectionBroken as exc:
            self._pending.pop(request_id, None)
            self._fail(exc)
            raise

    def _send_held(self) -> None:
        """One reply came: the oldest request held back goes (``caps.requests``)."""
        data = self._held.popleft()
        try:
            self._pipe.write(data)
        except ConnectionBroken as exc:
            self._fail(exc)  # its sender hears through its callback, as the others

    def send_read(self, handle: bytes, offset: int, length: int, callback: ReplyCallback) -> None:
        request_id = self._allocate(callback)
        self._send(request_id, codec.encode_read(request_id, handle, offset, length))

    def send_write(self, handle: bytes, offset: int, data: bytes, callback: ReplyCallback) -> None:
        request_id = self._allocate(callback)
        # Header and payload handed over together, not joined: the pipe cuts
        # packets across both (no packet of a header alone) and, over our
        # channels, never copies the payload before its packets are built.
        header = codec.encode_write_header(request_id, handle, offset, len(data))
        self._send(request_id, header, data)

    def _request(
        self, build: Callable[[int], bytes], slow: float = 0.0
    ) -> asyncio.Future[codec.Reply]:
        """Send one request built by ``build(request_id)``; its reply resolves the future.

        ``slow``: seconds its answer may take beyond the stall timeout (the
        server reads a whole file for it: check-file).
        """
        future: asyncio.Future[codec.Reply] = asyncio.get_running_loop().create_future()

        def resolve(reply: codec.Reply | BaseException) -> None:
            if future.done():
                return
            if isinstance(reply, BaseException):
                future.set_exception(reply)
            else:
                future.set_result(reply)

        request_id = self._allocate(resolve)
        if slow > 0:
            self._slow[request_id] = slow
        self._send(request_id, build(request_id))
        return future

    def request(self, build: Callable[[int], bytes]) -> asyncio.Future[codec.Reply]:
        """Send one request now; await the future for its reply (pipelining)."""
        return self._request(build)

    async def call(self, build: Callable[[int], bytes], *, slow: float = 0.0) -> codec.Reply:
        """Send one request and await its reply (``slow``: as for ``_request``)."""
        return await self._request(build, slow)

    def settle_later(self, *futures: asyncio.Future[codec.Reply]) -> None:
        """Their answers are nobody's now (their sender was cancelled): read none.

        The pool lets them come before it lends the channel again
        (``transport.settling``); nobody waits for them here.
        """
        for future in futures:
            future.add_done_callback(quiet)
        self.unsettled = True

    def close(self) -> None:
        """Close the channel; pending requests fail with ClosedError (not retried).

        For a channel given up on because of the network or the server (it
        stalled, its connection died), ``abort`` with that cause instead: the
        work in flight on it is then retried.
        """
        self._fail(ClosedError(f"{self.name}: closed"))

    @staticmethod
    def check_status(
        reply: codec.Reply, path: str, offset: int | None = None, *, write: bool = False
    ) -> None:
        if not isinstance(reply, codec.Status):
            raise ProtocolError(f"{path}: expected a STATUS reply, got {type(reply).__name__}")
        if reply.code != codec.FX_OK:
            raise status_error(reply, path, offset, write=write)

    @classmethod
    def _single_name(cls, reply: codec.Reply, path: str) -> str:
        names = cls._expect(reply, codec.Name, path).names
        if len(names) != 1:
            raise ProtocolError(f"{path}: expected one name in the reply, got {len(names)}")
        return names[0][0]

    @staticmethod
    def _expect(reply: codec.Reply, kind: type[_R], path: str) -> _R:
        if isinstance(reply, kind):
            return reply
        if isinstance(reply, codec.Status):
            raise status_error(reply, path)
        raise ProtocolError(f"{path}: expected {kind.__name__}, got {type(reply).__name__}")
