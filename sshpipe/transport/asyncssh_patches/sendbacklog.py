"""Packets sent and not yet taken by the kernel, and the channel data waiting for them.

asyncssh ignores its transport's ``pause_writing``: a channel's data is
encrypted and queued as soon as the peer's window allows, so an upload's
ciphertext piled up in user space as far as every channel's window reached
(sshd grants 2 MiB a channel: 17 MiB on one connection, in one loop turn's
batch, again joined into one write by 3.11's ``writelines``, again in the
transport's buffer), on top of the WRITEs' own payload, which the flight
budget charges until the server acknowledges it. 200 concurrent puts of
4 MiB on one client grew it by 50-60 MiB more than with it held back.

Here our SFTP channels' data (``packets.ViewWriter``) waits as views of the
WRITEs' payload while more than ``BACKLOG_MARK`` bytes of packets wait for
the kernel (the loop turn's batch and the transport's buffer), and goes on
when they drain. A channel stops only between two requests (ProFTPD needs
them whole), so the mark may be passed by the rest of one request a
channel. The kernel's own send buffer still holds its megabytes, so the
link never waits for us.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Protocol

# Bytes of packets that may wait in user space for the kernel before channel
# data waits instead. The kernel's own send buffer (tcp_wmem: 16 KiB, growing
# to 4 MiB) holds more behind it, so the socket never runs dry meanwhile: a
# 256 MiB put took 1.55 CPU s with it and 1.62 without (median of 8), at the
# same rate within the noise of a loaded machine.
BACKLOG_MARK = 1024 * 1024


class Parked(Protocol):
    def flush(self) -> None: ...


class Backlog:
    """One connection's packets not yet taken by the kernel, and the writers held back."""

    def __init__(self, transport: asyncio.WriteTransport) -> None:
        self._transport = transport
        self.batched = 0  # bytes of the loop turn's batch, not yet written
        self._parked: dict[Parked, None] = {}  # in the order they were held back

    def __repr__(self) -> str:
        return f"<Backlog batched={self.batched} parked={len(self._parked)}>"

    @property
    def full(self) -> bool:
        """Past the mark: channel data should wait."""
        return self.batched + self._transport.get_write_buffer_size() > BACKLOG_MARK

    def park(self, writer: Parked) -> None:
        """``writer`` stopped with data left: flushed again once the backlog drains."""
        self._parked[writer] = None

    def drained(self) -> None:
        """Packets left for the kernel (a batch written, the transport's buffer emptied)."""
        while self._parked and not self.full:
            writer = next(iter(self._parked))
            del self._parked[writer]
            writer.flush()  # may park itself again, at the end of the line


# Each connection's, set by ``batched_send``; our channels' writers look theirs up here.
BACKLOGS: weakref.WeakKeyDictionary[object, Backlog] = weakref.WeakKeyDictionary()
