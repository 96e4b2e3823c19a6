"""How big a transfer's requests are and how much one channel may hold (pure).

Computed once per transfer from plain values: the configuration, the server's
``limits@openssh.com`` answer and the first channel's SSH windows. Two
numbers mean one thing each:

- ``block``: the length of one READ or WRITE;
- ``requests``: requests in flight on one channel (``sftp -R``).

What is derived from them has its own name: ``request_cap(lanes)`` is the
transfer's total over its lanes, ``channel_capacity`` the bytes the flow
controller counts one channel to carry, ``lane_cap(window)`` the bytes one
lane may hold in flight.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import codec
from .codec import Limits
from .ratelimit import limited_block
from .untrusted import MIN_BLOCK_SIZE

# Block size when the server does not send limits@openssh.com: 32 KiB is what
# every SFTP server must accept (OpenSSH's sftp default before limits existed).
FALLBACK_BLOCK_SIZE = 32 * 1024
# Ceiling of the automatic block size: OpenSSH's sftp-server allows 255 KiB
# (SFTP_MAX_MSG_LENGTH - 1 KiB); asyncssh's server offers 4 MiB, which would
# leave only 4 requests inside the byte budget and lose the pipelining.
MAX_AUTO_BLOCK_SIZE = 256 * 1024
# Replies carry the request header too; keep a block plus its framing under the
# server's max packet length (OpenSSH's sftp-client.c subtracts 1 KiB as well).
PACKET_OVERHEAD = 1024
# A window the SSH layer did not tell us: OpenSSH's 2 MiB, the common value.
UNKNOWN_WINDOW = 2 * 1024 * 1024


def block_size(configured: int | None, limits: Limits | None, *, write: bool) -> int:
    """The READ/WRITE length: the configured one, else the server's limit, else 32 KiB."""
    if configured is not None:
        return configured
    if limits is None:
        return FALLBACK_BLOCK_SIZE
    size = (limits.max_write_len if write else limits.max_read_len) or MAX_AUTO_BLOCK_SIZE
    if limits.max_packet_len:
        size = min(size, limits.max_packet_len - PACKET_OVERHEAD)
    # A server stating less than every server must take (filexfer-02 §3) is
    # not believed: short reads and writes are re-asked anyway.
    return max(MIN_BLOCK_SIZE, min(size, MAX_AUTO_BLOCK_SIZE))


def largest_write(limits: Limits | None, block: int, ceiling: int) -> int:
    """The longest WRITE the server takes: its stated limit (within its packets and
    our ``ceiling``), else ``block``, the one chosen without it."""
    if limits is None or not limits.max_write_len:
        return block
    size = limits.max_write_len
    if limits.max_packet_len:
        size = min(size, limits.max_packet_len - PACKET_OVERHEAD)
    return max(block, min(size, ceiling))


def lane_cap(window: int, *, write: bool) -> int:
    """Payload bytes one lane may hold in flight, from its channel's window (0: unknown).

    A download: our receive window. An upload: the server's window and half as
    much again: a WRITE stays charged until its STATUS returns, after sshd has
    already re-granted its window, so a bit more keeps the window full; much
    more would only wait in our send buffer and inflate the RTT we measure.
    """
    window = window or UNKNOWN_WINDOW
    return window + window // 2 if write else window


def channel_capacity(
    window: int, *, requests: int, block: int, write: bool, default_window: int
) -> int:
    """What the flow controller counts one channel to carry (``window`` 0: unknown).

    A download: our receive window (else the one we ask for, ``default_window``),
    and no more than its requests. An upload: 1.25 of the server's window; each
    lane holds 1.5 (``lane_cap``), so GAIN's headroom goes into that extra half
    window, not into more channels: channels = bandwidth-delay product / window.
    """
    if write:
        window = window or UNKNOWN_WINDOW
        return min(window + window // 4, requests * block)
    return min(window or default_window, requests * block)


@dataclass(frozen=True, slots=True)
class Sizing:
    """One transfer's sizes, fixed for its whole life (reconnects included).

    Attributes:
        block: bytes per READ/WRITE.
        requests: requests in flight per channel (``TransferConfig.requests``).
        channel_capacity: bytes the flow controller counts one channel to carry.
        write: an upload (lanes are capped by the server's window, not ours).
    """

    block: int
    requests: int
    channel_capacity: int
    write: bool

    def request_cap(self, lanes: int) -> int:
        """Requests the whole transfer may have in flight over ``lanes`` lanes."""
        return self.requests * max(1, lanes)

    def lane_cap(self, window: int) -> int:
        return lane_cap(window, write=self.write)


def sizing(
    *,
    configured_block: int | None,
    requests: int,
    default_window: int,
    limits: Limits | None,
    window: int,
    write: bool,
    rate_limit: int | None = None,
) -> Sizing:
    """The sizes of a transfer whose first channel has ``limits`` and ``window``.

    ``window``: the first channel's receive window (a download) or the
    server's window on it (an upload); 0 when the SSH layer did not say.
    ``rate_limit`` (bytes/s) shortens the block, configured or not, to
    ``ratelimit.BLOCK_SECONDS`` of the rate: the bucket meters whole requests.
    """
    block = limited_block(block_size(configured_block, limits, write=write), rate_limit)
    capacity = channel_capacity(
        window, requests=requests, block=block, write=write, default_window=default_window
    )
    return Sizing(block=block, requests=requests, channel_capacity=capacity, write=write)


def reply_cap(block_size: int | None) -> int:
    """The reply length a session accepts when its READs ask for ``block_size`` bytes."""
    wanted = (block_size or 0) + 1024
    return min(codec.MAX_REPLY_LEN, max(codec.DEFAULT_MAX_REPLY_LEN, wanted))
