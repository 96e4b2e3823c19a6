"""The mux master's SSH side: its connections (``Upstream``) and the channels on them
whose bytes are spliced to a client's socket (``Splice``).

What both the master (``muxmaster``: which connection, which channel, the
spare kept ready) and a client's connection (``muxconn``: the bytes of the
channel it was given) work on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import asyncssh

from ..core.errors import ChannelRefused, ConnectionBroken, Stalled
from ..core.text import clip
from .asyncssh_patches import ChannelTuning
from .sshlink import SSHLink

__all__ = ["Spare", "Splice", "Upstream", "open_splice"]


class Splice(asyncssh.SSHClientSession[bytes]):
    """One SSH SFTP channel, its bytes collected until a client takes it, then forwarded."""

    def __init__(self, window: int, patches: frozenset[str]) -> None:
        self.chan: asyncssh.SSHClientChannel[bytes] | None = None
        self.client: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.lost = False
        self.on_lost: Callable[[], None] | None = None
        self._window = window
        self._patches = patches
        self._tuning: ChannelTuning | None = None
        self._more: asyncio.Event = asyncio.Event()
        self._filter_id: int | None = None
        self._on_filtered: Callable[[bytes], None] | None = None
        self._scan = bytearray()

    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self.chan = chan
        self._tuning = ChannelTuning(chan, self._window, self._patches)

    @property
    def peer_window(self) -> int:
        return self._tuning.peer_window if self._tuning is not None else 0

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype is None:
            self._deliver(self._filtered(data) if self._filter_id is not None else data)
        if self._tuning is not None:
            self._tuning.after_data()

    def _deliver(self, data: bytes) -> None:
        if not data:
            return
        if self.client is not None:
            self.client.write(data)
        else:
            self.buffer += data
            self._more.set()

    def expect_reply(self, request_id: int, answered: Callable[[bytes], None]) -> None:
        """Take the reply to our own request ``request_id`` out of the stream, for ``answered``.

        The spare's limits request is sent after INIT and not waited for: its
        answer may come once a client holds the channel, and must not reach it.
        """
        self._filter_id = request_id
        self._on_filtered = answered

    def _filtered(self, data: bytes) -> bytes:
        """``data`` less our reply, once whole packets show where it is."""
        self._scan += data
        out = bytearray()
        while len(self._scan) >= 4:
            end = 4 + int.from_bytes(self._scan[:4], "big")
            if len(self._scan) < end:
                break
            packet = bytes(self._scan[:end])
            del self._scan[:end]
            if len(packet) >= 9 and int.from_bytes(packet[5:9], "big") == self._filter_id:
                self._filter_id = None
                if self._on_filtered is not None:
                    self._on_filtered(packet)
                out += self._scan  # past it, the stream is the client's alone
                self._scan = bytearray()
                break
            out += packet
        return bytes(out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._more.set()
        if self.client is not None:
            self.client.close()
        if self.on_lost is not None:
            self.on_lost()

    def pause_writing(self) -> None:  # the SSH channel's send window is full
        if self.client is not None:
            self.client.pause_reading()

    def resume_writing(self) -> None:
        if self.client is not None:
            self.client.resume_reading()

    async def packet(self) -> bytes:
        """The next whole SFTP packet (length included), before a client takes the channel."""
        while True:
            if len(self.buffer) >= 4:
                end = 4 + int.from_bytes(self.buffer[:4], "big")
                if len(self.buffer) >= end:
                    raw = bytes(self.buffer[:end])
                    del self.buffer[:end]
                    return raw
            if self.lost:
                raise ConnectionError("SFTP channel closed by the server")
            self._more.clear()
            await self._more.wait()


class Spare:
    """A channel opened ahead; ``version`` is the VERSION packet its INIT got (b"" if none)."""

    def __init__(self, splice: Splice, key: tuple[int, int], version: bytes, peer_window: int):
        self.splice = splice
        self.key = key
        self.version = version
        self.peer_window = peer_window


class Upstream:
    """One SSH connection of the master (a slot) and its spare channel."""

    def __init__(self, link: SSHLink) -> None:
        self.link = link
        self.channels = 0  # open on it, spare included
        self.spare: asyncio.Task[Spare | None] | None = None
        self.watchers: set[asyncio.Transport] = set()  # clients' links on it ("hello")


async def open_splice(
    link: SSHLink,
    session: Splice,
    *,
    window: int,
    max_packet_size: int,
    within: float,
) -> None:
    """Start the sftp subsystem on a new channel of ``link`` whose bytes go to ``session``.

    Not ``SSHLink.open_sftp``: the master splices the channel's bytes to a
    client's socket rather than speak SFTP on it.

    Raises:
        ChannelRefused, ConnectionBroken, Stalled: as ``open_sftp``.
    """
    try:
        async with asyncio.timeout(within):
            await link.connection.create_session(
                lambda: session,
                subsystem="sftp",
                encoding=None,
                window=window,
                max_pktsize=max_packet_size,
            )
    except asyncssh.ChannelOpenError as exc:
        raise ChannelRefused(
            f"{link.label}: server refused an SFTP channel: {clip(exc.reason)}"
        ) from exc
    except TimeoutError as exc:
        raise Stalled(f"{link.label}: no answer to an SFTP channel request") from exc
    except (asyncssh.Error, OSError) as exc:
        raise ConnectionBroken(f"connection lost: {exc}") from exc
    link.channels_opened += 1
