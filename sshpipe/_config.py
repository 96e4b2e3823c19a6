"""Frozen, validated configuration: where to connect and how to transfer.

Example::

    TransferConfig(requests=64, block_size=64 * 1024)
    ConnectConfig(host="example.org", username="me", strict_host_key_checking="accept-new")
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ._errors import UsageError

# 128 outstanding requests: KIO's sftp went 20x faster at 128 than at 1, and
# asyncssh caps its own parallel I/O at 128 (_MAX_SFTP_REQUESTS).
DEFAULT_REQUESTS = 128
# Block size when the server does not send limits@openssh.com: 32 KiB is what
# every SFTP server must accept (OpenSSH's sftp default before limits existed).
FALLBACK_BLOCK_SIZE = 32 * 1024
# Payload bytes charged at once (in flight plus waiting for disk or reader).
# 128 x 255 KiB would be 32 MiB. On loopback 4, 8, 16 and 32 MiB ran within
# noise of each other (benchmarks/sweep_loopback.py: 670-690 MB/s get,
# 405-434 MB/s put, 512 MiB x 5); 16 MiB keeps ~800 MB/s possible at 20 ms RTT
# and costs ~18 MiB (get) to ~30 MiB (put) of RSS over a 45 MiB base.
DEFAULT_MAX_BYTES_IN_FLIGHT = 16 * 1024 * 1024
# One SFTP channel: on loopback 2 and 4 channels on one connection were no
# faster (sweep_loopback.py: get 488-516 vs 613 MB/s, put 384 vs 378); they are
# for long links, where one channel's window caps the rate.
DEFAULT_CHANNELS = 1
# Receive window per channel. OpenSSH uses 2 MiB (CHAN_SES_WINDOW_DEFAULT);
# we hold the whole byte budget's worth so the server never waits for an
# adjust at loopback speed. OpenSSH buffers at most 16 MiB per channel.
DEFAULT_WINDOW = 16 * 1024 * 1024
# Largest SSH data packet we ask the server to send. 32 KiB is OpenSSH's
# CHAN_SES_PACKET_DEFAULT; sshd then sends what it read from sftp-server
# (~40 KiB on average at 255 KiB). 32K-255K measured within noise on
# loopback (sweep_loopback.py); the largest leaves the server the choice and
# costs asyncssh, at ~30 us of Python per packet, the fewest packets.
DEFAULT_MAX_PACKET_SIZE = 256 * 1024 - 1024
# Ceiling of the automatic block size: OpenSSH's sftp-server allows 255 KiB
# (SFTP_MAX_MSG_LENGTH - 1 KiB); asyncssh's server offers 4 MiB, which would
# leave only 4 requests inside the byte budget and lose the pipelining.
MAX_AUTO_BLOCK_SIZE = 256 * 1024
# SFTP caps one READ/WRITE length at 2^32-1; servers cap far lower. Our own
# ceiling keeps one reply bounded even when a server's limits are generous.
MAX_BLOCK_SIZE = 4 * 1024 * 1024

HostKeyPolicy = Literal["yes", "accept-new", "no"]
# AES-GCM first: with AES-NI it is far cheaper than chacha20-poly1305 in
# `cryptography`, and never "none" (asyncssh does not offer it unless asked).
DEFAULT_CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
)


def _positive(name: str, value: int | None, *, maximum: int | None = None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name} must be a positive integer, not {value!r}")
    if maximum is not None and value > maximum:
        raise UsageError(f"{name} must be at most {maximum}, not {value}")


@dataclass(frozen=True, kw_only=True, slots=True)
class TransferConfig:
    """How one transfer is pipelined.

    Attributes:
        requests: most SFTP requests outstanding per transfer (``sftp -R``).
        block_size: bytes per READ/WRITE; None means the server's
            ``limits@openssh.com`` maximum, else 32 KiB (``sftp -B``).
        max_bytes_in_flight: payload bytes charged at once; bounds memory.
        channels: SFTP channels the requests are spread over.
        window: SSH receive window of each channel we open (RFC 4254 §5.2).
        max_packet_size: largest SSH data packet we ask the server to send.
        local_io_in_thread: read and write the local file in a worker thread so
            a slow disk never stalls the event loop. False does it on the loop
            thread: ~13% less CPU (no GIL hand-over per batch); the CLI, which
            runs one transfer per process, uses False.
    """

    requests: int = DEFAULT_REQUESTS
    block_size: int | None = None
    max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT
    channels: int = DEFAULT_CHANNELS
    window: int = DEFAULT_WINDOW
    max_packet_size: int = DEFAULT_MAX_PACKET_SIZE
    local_io_in_thread: bool = True

    def __post_init__(self) -> None:
        _positive("requests", self.requests, maximum=65536)
        _positive("block_size", self.block_size, maximum=MAX_BLOCK_SIZE)
        _positive("max_bytes_in_flight", self.max_bytes_in_flight)
        _positive("channels", self.channels, maximum=64)
        _positive("window", self.window, maximum=2**32 - 1)
        _positive("max_packet_size", self.max_packet_size, maximum=2**20)


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectConfig:
    """Where and how to open the SSH connection; unset fields come from ssh_config.

    Attributes:
        host: host name or address (an alias from ssh_config works too).
        port: TCP port; None means ssh_config's Port, else 22.
        username: login name; None means ssh_config's User, else the local user.
        identity_files: private keys to offer (``-i``); empty means the defaults.
        password: password to try when keys fail (never logged).
        known_hosts: known_hosts files; None means ssh_config's, else ~/.ssh/known_hosts.
        strict_host_key_checking: "yes" refuses unknown hosts, "accept-new"
            records them, "no" accepts them; a changed key is always refused.
        ssh_config: OpenSSH client config files to read; None means ~/.ssh/config.
        connect_timeout: seconds allowed for TCP connect plus SSH handshake.
        ciphers: encryption algorithms in preference order.
        compression: offer zlib compression (helps slow links, halves fast ones).
    """

    host: str
    port: int | None = None
    username: str | None = None
    identity_files: tuple[str, ...] = ()
    password: str | None = field(default=None, repr=False)
    known_hosts: tuple[str, ...] | None = None
    strict_host_key_checking: HostKeyPolicy = "yes"
    ssh_config: tuple[str, ...] | None = None
    connect_timeout: float = 30.0
    ciphers: tuple[str, ...] = DEFAULT_CIPHERS
    compression: bool = False

    def __post_init__(self) -> None:
        if not self.host:
            raise UsageError("host must not be empty")
        _positive("port", self.port, maximum=65535)
        if self.strict_host_key_checking not in ("yes", "accept-new", "no"):
            raise UsageError(
                "StrictHostKeyChecking must be yes, accept-new or no, "
                f"not {self.strict_host_key_checking!r}"
            )
        if self.connect_timeout <= 0:
            raise UsageError("connect_timeout must be positive")
        if not self.ciphers or any(c.lower() == "none" for c in self.ciphers):
            raise UsageError("the 'none' cipher is never allowed")


def parse_destination(destination: str) -> tuple[str | None, str]:
    """Split ``[user@]host`` into (user, host); IPv6 may be written in brackets."""
    user, sep, host = destination.rpartition("@")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise UsageError(f"no host in {destination!r}")
    return (user if sep and user else None), host
