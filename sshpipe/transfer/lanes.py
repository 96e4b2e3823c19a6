"""Lanes: the channels one transfer's requests are spread over, each with its handle.

A lane is an SFTP session (channel) with its own handle on the file and a cap
on the bytes it may hold in flight (its SSH window). ``Handles`` opens the file
on each channel (the first alone, so a wrong path is one error) and closes
them together; the pump (``pump.py``) sends each request to the lane with the
most room.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from .._config import FALLBACK_BLOCK_SIZE, MAX_AUTO_BLOCK_SIZE, TransferConfig
from ..core import codec
from ..core.untrusted import MIN_BLOCK_SIZE
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession

# Replies carry the request header too; keep a block plus its framing under the
# server's max packet length (OpenSSH's sftp-client.c subtracts 1 KiB as well).
_PACKET_OVERHEAD = 1024


def block_size_for(config: TransferConfig, sftp: SFTPSession, *, write: bool) -> int:
    """The READ/WRITE length: the configured one, else the server's limit, else 32 KiB."""
    if config.block_size is not None:
        return config.block_size
    limits = sftp.limits
    if limits is None:
        return FALLBACK_BLOCK_SIZE
    size = (limits.max_write_len if write else limits.max_read_len) or MAX_AUTO_BLOCK_SIZE
    if limits.max_packet_len:
        size = min(size, limits.max_packet_len - _PACKET_OVERHEAD)
    # A server stating less than every server must take (filexfer-02 §3) is
    # not believed: short reads and writes are re-asked anyway.
    return max(MIN_BLOCK_SIZE, min(size, MAX_AUTO_BLOCK_SIZE))


@dataclass(slots=True, eq=False)
class Lane:
    """One channel's handle on the file and what is in flight on it."""

    sftp: SFTPSession
    handle: bytes
    cap: int  # payload bytes it may hold in flight (its SSH window)
    bytes: int = 0
    requests: int = 0


@dataclass(slots=True)
class Handles:
    """One open remote handle per lane, closed together."""

    path: str
    pflags: int
    attrs: codec.Attrs
    write: bool  # lanes are capped by the server's window (upload) or ours
    lanes: list[Lane] = field(default_factory=list)
    used: list[SFTPSession] = field(default_factory=list)  # every channel that held a lane

    @classmethod
    async def open(
        cls, sftp: SFTPSession, path: str, pflags: int, attrs: codec.Attrs, *, write: bool
    ) -> Handles:
        handles = cls(path, pflags, attrs, write)
        handles._append(sftp, await sftp.open(path, pflags, attrs))
        return handles

    async def add(self, sftp: SFTPSession) -> Lane:
        """Open the file on one more channel (never truncating or creating it again)."""
        handle = await sftp.open(
            self.path,
            self.pflags & ~(codec.FXF_TRUNC | codec.FXF_EXCL | codec.FXF_CREAT),
            self.attrs,
        )
        return self._append(sftp, handle)

    def _append(self, sftp: SFTPSession, handle: bytes) -> Lane:
        if self.write:
            # The server's window and half as much again: a WRITE stays charged
            # until its STATUS returns, after sshd has already re-granted its
            # window, so a bit more keeps the window full; much more would only
            # wait in our send buffer and inflate the RTT we measure.
            window = sftp.peer_window or UNKNOWN_WINDOW
            cap = window + window // 2
        else:
            cap = sftp.recv_window or UNKNOWN_WINDOW
        lane = Lane(sftp, handle, cap)
        self.lanes.append(lane)
        self.used.append(sftp)
        return lane

    async def close(self, *, check: bool = True) -> None:
        """CLOSE every handle; all CLOSE packets are sent before any reply is awaited."""
        lanes, self.lanes = self.lanes, []
        live = [lane for lane in lanes if lane.sftp.broken is None]
        results = await asyncio.gather(
            *(lane.sftp.close_handle(lane.handle, self.path) for lane in live),
            return_exceptions=True,
        )
        if check:
            for result in results:
                if isinstance(result, BaseException):
                    raise result


# A window asyncssh did not tell us: OpenSSH's 2 MiB, the common value.
UNKNOWN_WINDOW = 2 * 1024 * 1024


def initial_channels(lease: Lease) -> list[SFTPSession]:
    """The channels the file is opened on before any growth: all of them when fixed."""
    return list(lease.channels) if not lease.can_grow else lease.channels[:1]


async def open_lanes(
    channels: list[SFTPSession], path: str, pflags: int, attrs: codec.Attrs, *, write: bool
) -> Handles:
    """Open the file on the first channel alone (one error if the path is wrong), then the rest."""
    handles = await Handles.open(channels[0], path, pflags, attrs, write=write)
    try:
        rest = await asyncio.gather(
            *(handles.add(sftp) for sftp in channels[1:]), return_exceptions=True
        )
        for result in rest:
            if isinstance(result, BaseException):
                raise result
    except BaseException:
        await handles.close(check=False)
        raise
    return handles


# tree/recovery.py imports the reconnect step from here; it lives in retrying.py.
from .retrying import after_break as after_break  # noqa: E402
