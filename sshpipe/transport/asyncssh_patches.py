"""Tuning of asyncssh's internals: the one module that touches its private attributes.

Each patch makes a transfer faster without changing what goes on the wire:

- ``input_buffer``: the connection's receive buffer consumed in O(1);
- ``batched_send``: one loop iteration's packets written in one ``writelines``;
- ``window_top_up``: a channel's receive window granted again each eighth;
- ``peer_window``: the send window the server granted, read for the flow controller.

They rest on asyncssh's private attributes, so they are gated twice. By
version: only the releases whose source was read for them (``CHECKED_FROM``
to ``CHECKED_TO``) get any; any other runs stock asyncssh. By shape: each
patch first checks that the attribute it replaces is there as expected, and
is skipped alone (a debug line says so) if not. ``tune_connection`` returns
the names of the patches in force, which ``SSHLink.patches`` shows.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import asyncssh
from asyncssh.constants import MSG_CHANNEL_WINDOW_ADJUST
from asyncssh.packet import UInt32

logger = logging.getLogger("sshpipe.ssh")

# Releases whose connection.py and channel.py were read for these patches:
# 2.22.0, 2.23.0, 2.23.1, 2.24.0 and 2.24.1 (every release in between).
CHECKED_FROM = (2, 22, 0)
CHECKED_TO = (2, 24, 1)

INPUT_BUFFER = "input_buffer"
BATCHED_SEND = "batched_send"
WINDOW_TOP_UP = "window_top_up"
PEER_WINDOW = "peer_window"
CHANNEL_PATCHES = frozenset({WINDOW_TOP_UP, PEER_WINDOW})


def version_checked(version: str) -> bool:
    """Whether ``version`` is one of the asyncssh releases the patches were checked against."""
    try:
        release = tuple(int(part) for part in version.split("."))
    except ValueError:  # a pre-release or local build: not checked
        return False
    return CHECKED_FROM <= release <= CHECKED_TO


def _skipped(patch: str) -> None:
    logger.debug("asyncssh %s: %s does not fit, not applied", asyncssh.__version__, patch)


class _InputBuffer:
    """Stand-in for asyncssh's receive buffer with O(1) consumption from the front.

    asyncssh keeps received bytes in a ``bytes`` object and, for every SSH
    packet, re-slices the rest of it (``self._inpbuf = self._inpbuf[n:]``):
    with 256 KiB socket reads and OpenSSH's ~40 KiB packets every byte was
    copied about eight times, 14% of a download's CPU. A bytearray consumed
    with ``del buf[:n]`` (O(1) in CPython) supports the same operations:
    ``+=``, ``len``, truth, ``buf[:n]``/``buf[a:b]`` (copies, as before) and
    ``buf[n:]`` (consumes).
    """

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = bytearray(data)

    def __len__(self) -> int:
        return len(self._data)

    def __bool__(self) -> bool:
        return bool(self._data)

    def __iadd__(self, data: bytes) -> _InputBuffer:
        self._data += data
        return self

    def __getitem__(self, key: slice) -> Any:
        if key.stop is None and key.step is None:
            del self._data[: key.start or 0]
            return self
        return bytes(memoryview(self._data)[key])

    def find(self, sub: bytes, *args: int) -> int:
        return self._data.find(sub, *args)


def _batch_sends(conn: asyncssh.SSHClientConnection) -> bool:
    """Hand the packets of one loop iteration to the transport in one ``writelines``.

    asyncssh writes every SSH packet separately (one send syscall each); an
    upload is cut into 32 KiB packets by OpenSSH's max packet size, so that is
    ~33,000 syscalls per GiB. Batching per loop iteration keeps order and adds
    no measurable latency. False if the connection does not fit.
    """
    transport = getattr(conn, "_transport", None)
    if not (
        callable(getattr(conn, "_send", None))
        and callable(getattr(transport, "writelines", None))
        and callable(getattr(transport, "is_closing", None))
    ):
        return False
    assert transport is not None
    loop = asyncio.get_running_loop()
    pending: list[bytes] = []

    def flush() -> None:
        # To the transport the packets were sent to: as it closes, asyncssh
        # queues DISCONNECT, lets go of conn._transport at once and aborts the
        # transport a loop turn later, so looking it up here lost the DISCONNECT.
        if not transport.is_closing():
            transport.writelines(pending)
        pending.clear()

    def send(data: bytes) -> None:
        if conn._transport is None:  # closed: asyncssh's own _send drops it too
            return
        if not pending:
            loop.call_soon(flush)
        pending.append(data)

    conn._send = send  # type: ignore[method-assign]
    return True


def tune_connection(
    conn: asyncssh.SSHClientConnection, version: str | None = None
) -> frozenset[str]:
    """Apply the connection patches that fit; the names of the patches in force.

    The channel patches are in force when the release was checked; each
    channel still checks its own shape (``ChannelTuning``).

    Args:
        version: asyncssh's (the installed one unless a test says otherwise).
    """
    version = asyncssh.__version__ if version is None else version
    if not version_checked(version):
        logger.debug(
            "asyncssh %s is outside the checked releases %s to %s: running it stock",
            version,
            ".".join(map(str, CHECKED_FROM)),
            ".".join(map(str, CHECKED_TO)),
        )
        return frozenset()
    applied = set(CHANNEL_PATCHES)
    if isinstance(getattr(conn, "_inpbuf", None), bytes):
        conn._inpbuf = _InputBuffer(conn._inpbuf)  # type: ignore[assignment]
        applied.add(INPUT_BUFFER)
    else:
        _skipped(INPUT_BUFFER)
    if _batch_sends(conn):
        applied.add(BATCHED_SEND)
    else:
        _skipped(BATCHED_SEND)
    return frozenset(applied)


class ChannelTuning:
    """The channel patches on one channel: the early window top-up, the peer-window read.

    asyncssh grants more window only once half of it is used, so the server can
    have at most half a window in flight once the link's delay is longer than
    its own send time: a download ran at half of window / RTT. Granting again
    after each eighth keeps the whole window available, for one small
    WINDOW_ADJUST per eighth.

    Args:
        enabled: the patches in force on the connection (``tune_connection``).
    """

    def __init__(
        self, chan: asyncssh.SSHClientChannel[bytes], window: int, enabled: frozenset[str]
    ) -> None:
        self._chan = chan
        self._window = window
        self._top_up_at = window - max(window // 8, 1)
        applied: set[str] = set()
        for patch, fits in (
            (WINDOW_TOP_UP, _fits_top_up(chan)),
            (PEER_WINDOW, isinstance(getattr(chan, "_send_window", None), int)),
        ):
            if patch in enabled and fits:
                applied.add(patch)
            elif patch in enabled:
                _skipped(patch)
        self.applied = frozenset(applied)
        self._top_up = WINDOW_TOP_UP in applied

    def after_data(self) -> None:
        """Call after each delivery of data: asyncssh has counted it off the window."""
        if not self._top_up:
            return
        chan = self._chan
        left: int = chan._recv_window
        if left < self._top_up_at and not chan.is_closing():
            chan.send_packet(MSG_CHANNEL_WINDOW_ADJUST, UInt32(self._window - left))
            chan._recv_window = self._window

    @property
    def peer_window(self) -> int:
        """The send window the server granted the channel (0 where it is not read)."""
        return int(self._chan._send_window) if PEER_WINDOW in self.applied else 0


def _fits_top_up(chan: asyncssh.SSHClientChannel[bytes]) -> bool:
    return (
        isinstance(getattr(chan, "_recv_window", None), int)
        and callable(getattr(chan, "send_packet", None))
        and callable(getattr(chan, "is_closing", None))
    )
