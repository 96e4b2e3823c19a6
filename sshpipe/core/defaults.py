"""The library's defaults and bounds, each with the reason that chose it.

Numbers alone, importing nothing: the command line's ``--help`` states them
without loading the configs that use them (``core.config``: dataclasses,
inspect, 10-20 ms of a command that only prints). ``core.config`` re-exports
each under its old name.
"""

from __future__ import annotations

# 128 outstanding requests: KIO's sftp went 20x faster at 128 than at 1, and
# asyncssh caps its own parallel I/O at 128 (_MAX_SFTP_REQUESTS).
DEFAULT_REQUESTS = 128
# Payload bytes a transfer may charge at once (in flight plus waiting for disk
# or reader): the flow controller's memory budget. 64 MiB carries 1 Gbit/s at
# up to ~500 ms RTT, or 200 MB/s at 300 ms.
DEFAULT_MAX_BYTES_IN_FLIGHT = 64 * 1024 * 1024
# The floor of the byte budget, whatever the controller measures. On loopback
# the RTT of a request is mostly the server's own queue, so the bandwidth-delay
# product says little; 4, 8, 16 and 32 MiB ran within noise of each other
# there (benchmarks/sweep_loopback.py: 670-690 MB/s get, 405-434 MB/s put).
DEFAULT_MIN_BYTES_IN_FLIGHT = 16 * 1024 * 1024
# SFTP channels one connection may carry: OpenSSH's MaxSessions default (10)
# less one, kept free for a command (--verify's sha256sum, a tree's shell):
# with all ten taken by a striped file its check fell back to the size. A
# server that refuses earlier is believed; one that allows more can be told so.
DEFAULT_CHANNELS_PER_CONNECTION = 9
# Connections one client may open for its transfers. Each costs a handshake
# (~7 round trips); 4 x 9 channels x 2 MiB is 72 MiB of upload window.
DEFAULT_MAX_CONNECTIONS = 4
# Connections every client of the process together may hold to one server
# before they stop growing (each keeps its first): two clients' default growth.
# sshd's default MaxStartups (10:30:100) starts dropping log-ins past 10.
DEFAULT_MAX_CONNECTIONS_PER_HOST = 8
# Receive window per channel. OpenSSH uses 2 MiB (CHAN_SES_WINDOW_DEFAULT),
# which caps a channel at 2 MiB per round trip. OpenSSH buffers at most 16 MiB
# per channel (CHAN_INPUT_MAX) and HPN-SSH advertises at most 15 MiB to
# OpenSSH peers; a longer pipe gets more channels instead.
DEFAULT_WINDOW = 15 * 1024 * 1024
# Largest SSH data packet we ask the server to send. 32 KiB is OpenSSH's
# CHAN_SES_PACKET_DEFAULT; sshd then sends what it read from sftp-server
# (~40 KiB on average at 255 KiB). 32K-255K measured within noise on
# loopback (sweep_loopback.py); the largest leaves the server the choice and
# costs asyncssh, at ~30 us of Python per packet, the fewest packets.
DEFAULT_MAX_PACKET_SIZE = 256 * 1024 - 1024
# SFTP caps one READ/WRITE length at 2^32-1; servers cap far lower. Our own
# ceiling keeps one reply bounded even when a server's limits are generous.
MAX_BLOCK_SIZE = 4 * 1024 * 1024
# One process per core is the most that can help; 16 covers the machines
# sshpipe is measured on with room to spare, and bounds what a typo starts.
MAX_WORKERS = 16
# OpenSSH waits for the kernel's TCP timeout (~2 min); a transfer tool that
# retries does better to give up sooner. ssh_config's ConnectTimeout wins.
DEFAULT_CONNECT_TIMEOUT = 30.0
# Five reconnects in a row that move nothing: about 8 s of backoff (0.25 s
# doubling, equal jitter), enough for a flapping link, not for a dead host.
DEFAULT_RETRIES = 5
# A minute without one reply: sshd's ClientAliveInterval x CountMax is 0 by
# default; TCP keepalives take two hours. A reply per RTT is the norm.
DEFAULT_STALL_TIMEOUT = 60.0
# Five minutes waiting for a channel: a wait begins only once every channel the
# client may open carries its handle cap of transfers (36 x 64 by default), so
# one that long means the client is overloaded, not merely busy.
DEFAULT_QUEUE_TIMEOUT = 300.0
# Tries at a password or a key's passphrase before giving up on it: OpenSSH's
# NumberOfPasswordPrompts default.
DEFAULT_PASSWORD_PROMPTS = 3
# Directories a tree may go down: OpenSSH's sftp stops at 64 (MAX_DIR_DEPTH in
# sftp-client.c). A server's endless chain ends there, in bounded memory.
DEFAULT_MAX_DEPTH = 64
# A path of PATH_MAX (4096) bytes holds at most 2048 directories.
MAX_MAX_DEPTH = 2048
# What ``TransferConfig.server_profile`` takes: auto (the banner decides), or
# one of ``core.quirks``' profiles by name (which checks the two agree).
PROFILE_SETTINGS = ("auto", "standard", "aws-transfer", "azure-blob", "mailbox")
