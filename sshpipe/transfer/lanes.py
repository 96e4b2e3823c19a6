"""Lanes: the channels one transfer's requests are spread over, each with its handle.

A lane is an SFTP session (channel) with its own handle on the file and a cap
on the bytes it may hold in flight (its SSH window). ``Handles`` opens the file
on each channel (the first alone, so a wrong path is one error) and closes
them together; the pump (``pump.py``) sends each request to the lane with the
most room.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core import codec
from ..core.config import MAX_BLOCK_SIZE, TransferConfig
from ..core.errors import RemoteError
from ..core.flowcontrol import FlowController, FlowLimits
from ..core.quirks import capped_block
from ..core.sizing import Sizing, lane_cap, largest_write, sizing
from ..transport.pool import Lease
from ..transport.sftp import SFTPSession


async def sizing_for(config: TransferConfig, sftp: SFTPSession, *, write: bool) -> Sizing:
    """A transfer's sizes, from the configuration and its first channel (once per transfer).

    It waits for the server's limits, asked for when the channel started:
    ask for the file (OPEN, STAT) first, and their answers come together.
    """
    await sftp.learn_limits()
    return sizing_of(config, sftp, write=write)


def sizing_of(config: TransferConfig, sftp: SFTPSession, *, write: bool) -> Sizing:
    """``sizing_for`` once the channel's limits are in (``learn_limits`` awaited)."""
    learned = sftp.caps.write_block if write else sftp.caps.read_block
    return sizing(
        configured_block=config.block_size or (learned if sftp.limits is None else None),
        requests=min(config.requests, sftp.caps.requests or config.requests),
        default_window=config.window,
        limits=sftp.limits,
        window=sftp.peer_window if write else sftp.recv_window,
        write=write,
        rate_limit=config.rate_limit,
    )


def capped_write(block: int, size: int | None, sftp: SFTPSession, remote: str) -> int:
    """The WRITE length for ``size`` bytes to a server that takes only so many WRITEs a
    file (``quirks.max_write_blocks``: Azure Blob's 50,000 blocks a blob); ``block`` else.

    Raises:
        RemoteError: the file needs more WRITEs even of the longest the server
            takes; raised before a byte is sent.
    """
    quirks = sftp.caps.quirks
    cap = quirks.max_write_blocks
    if cap is None or size is None:
        return block  # a stream's size is not known: the server says when it is over
    largest = largest_write(sftp.limits, block, MAX_BLOCK_SIZE)
    capped = capped_block(size, block, largest, cap)
    if capped is None:
        raise RemoteError(
            remote,
            f"too big for this server ({quirks.name}): {size:,} bytes need more than "
            f"{cap:,} WRITEs of {largest:,} bytes, the most it takes",
        )
    return capped


# What a server that has not answered yet is taken to allow: OpenSSH's limits.
_GUESSED_LIMITS = codec.Limits(
    max_packet_len=256 * 1024, max_read_len=261120, max_write_len=261120, max_open_handles=0
)


def channels_at_start(
    config: TransferConfig, *, size: int | None, write: bool
) -> Callable[[float], int]:
    """How many channels the flow controller will want at once on a link of RTT ``rtt``.

    For ``ChannelPool.lease(at_start=)``: its first target (``rtt`` x 1 Gbit/s,
    at most ``size``) over what one channel carries, guessed before any
    channel is open: OpenSSH's limits and, for an upload, sshd's 2 MiB window.
    """

    def count(rtt: float) -> int:
        guess = sizing(
            configured_block=config.block_size,
            requests=config.requests,
            default_window=config.window,
            limits=_GUESSED_LIMITS,
            window=0 if write else config.window,
            write=write,
            rate_limit=config.rate_limit,
        )
        limits = FlowLimits(
            memory_budget=config.max_bytes_in_flight,
            min_in_flight=config.min_bytes_in_flight,
            channel_capacity=max(1, guess.channel_capacity),
            max_channels=config.channels_per_connection * config.max_connections,
            size=size,
            block=guess.block,
            rate_limit=config.rate_limit,
        )
        return FlowController(limits, rtt0=rtt, now=0.0).channels if rtt > 0 else 1

    return count


def cancelled(error: BaseException | None) -> bool:
    """The transfer was cancelled (or its generator closed, or interrupted), not failed."""
    return error is not None and not isinstance(error, Exception)


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
        cls,
        sftp: SFTPSession,
        path: str,
        pflags: int,
        attrs: codec.Attrs,
        *,
        write: bool,
        sent: asyncio.Future[codec.Reply] | None = None,
    ) -> Handles:
        """``sent``: that OPEN is already on its way (on ``sftp``): its answer is the handle."""
        handles = cls(path, pflags, attrs, write)
        if sent is not None:
            handle = await sftp.handle_from(sent, path)
        else:
            handle = await sftp.open(path, pflags, attrs)
        handles._append(sftp, handle)
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
        window = sftp.peer_window if self.write else sftp.recv_window
        lane = Lane(sftp, handle, lane_cap(window, write=self.write))
        self.lanes.append(lane)
        self.used.append(sftp)
        return lane

    def release(self) -> None:
        """Send CLOSE for every handle of a finished read without waiting for the answers.

        Nothing depends on them: every byte is in, and the server's error on
        closing a read handle says nothing about the data. The transfer ends a
        round trip sooner; the answers come back on the channels later.
        """
        lanes, self.lanes = self.lanes, []
        for lane in lanes:
            if lane.sftp.broken is None:
                lane.sftp.close_handle_soon(lane.handle, self.path)

    async def close_after(self, error: BaseException) -> None:
        """CLOSE every handle after ``error``, checking nothing; cancelled, without
        waiting: the channels owe the answers, and the pool lets them settle."""
        if cancelled(error):
            for sftp in self.used:
                sftp.unsettled = True
            self.release()
        else:
            await self.close(check=False)

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


def initial_channels(lease: Lease) -> list[SFTPSession]:
    """The channels the file is opened on before any growth: all of them when fixed."""
    return list(lease.channels) if not lease.can_grow else lease.channels[:1]


async def open_lanes(
    channels: list[SFTPSession],
    path: str,
    pflags: int,
    attrs: codec.Attrs,
    *,
    write: bool,
    sent: asyncio.Future[codec.Reply] | None = None,
) -> Handles:
    """Open the file on the first channel alone (one error if the path is wrong), then the rest.

    ``sent``: the first channel's OPEN, already sent (an upload's, with its STAT).
    """
    handles = await Handles.open(channels[0], path, pflags, attrs, write=write, sent=sent)
    try:
        rest = await asyncio.gather(
            *(handles.add(sftp) for sftp in channels[1:]), return_exceptions=True
        )
        for result in rest:
            if isinstance(result, BaseException):
                raise result
    except BaseException as exc:
        await handles.close_after(exc)
        raise
    return handles
