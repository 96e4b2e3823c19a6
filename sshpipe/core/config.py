"""Frozen, validated configuration: where to connect and how to transfer.

Example::

    TransferConfig(requests=64, block_size=64 * 1024)
    ConnectConfig(host="example.org", username="me", strict_host_key_checking="accept-new")
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, get_args

from .cipherorder import AES_FIRST
from .defaults import (
    DEFAULT_CHANNELS_PER_CONNECTION,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_BYTES_IN_FLIGHT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_HOST,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_PACKET_SIZE,
    DEFAULT_MIN_BYTES_IN_FLIGHT,
    DEFAULT_PASSWORD_PROMPTS,
    DEFAULT_QUEUE_TIMEOUT,
    DEFAULT_REQUESTS,
    DEFAULT_RETRIES,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_WINDOW,
    MAX_BLOCK_SIZE,
    MAX_MAX_DEPTH,
    MAX_WORKERS,
    PROFILE_SETTINGS,
)
from .errors import UsageError
from .keys import HostKeyCheck, PrivateKey
from .paths import usable
from .prompt import PromptCallback
from .quirks import Quirks
from .sshconfig import parse_destination, parse_jump

# The defaults are defined in ``defaults`` (no imports: --help reads them there)
# and named here too, where the configs that use them have always been.
__all__ = [
    "DEFAULT_CHANNELS_PER_CONNECTION",
    "DEFAULT_CIPHERS",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_BYTES_IN_FLIGHT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS_PER_HOST",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_PACKET_SIZE",
    "DEFAULT_MIN_BYTES_IN_FLIGHT",
    "DEFAULT_PASSWORD_PROMPTS",
    "DEFAULT_QUEUE_TIMEOUT",
    "DEFAULT_REQUESTS",
    "DEFAULT_RETRIES",
    "DEFAULT_STALL_TIMEOUT",
    "DEFAULT_WINDOW",
    "HOST_KEY_POLICIES",
    "MAX_BLOCK_SIZE",
    "MAX_MAX_DEPTH",
    "MAX_WORKERS",
    "VERIFY_LEVELS",
    "ConnectConfig",
    "HostKeyPolicy",
    "TransferConfig",
    "VerifyLevel",
    "connections_per_host",
    "parse_destination",
]


def connections_per_host(max_connections_per_host: int | None, max_connections: int) -> int:
    """The per-process budget in force: the one set, else the default or the
    client's own cap if that is more."""
    if max_connections_per_host is not None:
        return max_connections_per_host
    return max(DEFAULT_MAX_CONNECTIONS_PER_HOST, max_connections)


HostKeyPolicy = Literal["yes", "accept-new", "no"]
# StrictHostKeyChecking's values as ssh_config and -o spell them, as sshpipe
# applies them: "off" is "no"; "ask" is "yes", since sshpipe prompts nobody
# (ssh itself refuses an unknown host under "ask" when it cannot ask).
HOST_KEY_POLICIES: dict[str, HostKeyPolicy] = {
    "yes": "yes",
    "ask": "yes",
    "accept-new": "accept-new",
    "no": "no",
    "off": "no",
}
# Keywords -o may not give (ssh(1) refuses them too): they start blocks or read files.
_BLOCK_KEYWORDS = ("host", "match", "include")
# The order kept where the CPU's flags cannot be read (today's: AES-GCM first,
# far cheaper than chacha20-poly1305 with AES-NI); where they can, the CPU
# chooses (``core.cipherorder``: chacha20 first without AES instructions).
# Never "none" (asyncssh does not offer it unless asked).
DEFAULT_CIPHERS = AES_FIRST


# What ``TransferConfig.verify`` asks for (``TransferStats.verified`` says what was
# done). "best" is "hash" where the server can hash, else "size": the CLI's plain
# --verify. "hash" asked by name fails (HashUnavailable) where it cannot.
VerifyLevel: TypeAlias = Literal["none", "size", "best", "hash", "read-back"]
VERIFY_LEVELS: tuple[VerifyLevel, ...] = get_args(VerifyLevel)


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
        requests: SFTP requests in flight on one channel (``sftp -R``). A
            transfer striped over N channels has up to N x ``requests`` in
            flight; the flow controller counts one channel to carry no more
            than ``requests`` blocks. Derived totals have names of their own
            (``core.sizing.Sizing.request_cap``).
        block_size: bytes in one READ or WRITE request (``sftp -B``); None
            means the server's ``limits@openssh.com`` maximum (at most 256
            KiB), else 32 KiB. Fixed for the whole transfer, reconnects
            included (``core/sizing.py``).
        max_bytes_in_flight: memory budget: payload bytes charged at once, by
            one transfer and (the client's own config's) by all the transfers
            of a client together: 200 at once share it rather than hold 200
            (an upload's blocks are charged before they are read; one with
            nothing charged waits its turn for a block while it is full). A
            tree's big files share the tree's part of it; workers split it.
        min_bytes_in_flight: floor of the byte budget the flow controller sets.
        channels: None lets the flow controller choose how many channels (and
            connections) to use from the measured RTT and delivery rate; a
            number fixes the channels and the byte budget (max_bytes_in_flight).
        channels_per_connection: most channels opened on one connection.
        max_connections: most connections the client opens for its transfers
            (every one: Compression auto's compressed connection too).
        max_connections_per_host: most connections every client of this
            process together holds to one server before they stop growing
            (``transport.hostlimits``): each client keeps its first, so a Dask
            worker's or a web app's many clients stay under the server's
            ``MaxStartups`` and ``MaxSessions`` as one client would. None
            (the default): ``DEFAULT_MAX_CONNECTIONS_PER_HOST`` (8), or the
            client's own ``max_connections`` if more (one client alone is
            never held below what it was told it may open).
        window: SSH receive window of each channel we open (RFC 4254 §5.2).
        max_packet_size: largest SSH data packet we ask the server to send.
        local_io_in_thread: read and write the local file in a worker thread so
            a slow disk never stalls the event loop. False does it on the loop
            thread: ~13% less CPU (no GIL hand-over per batch); the CLI, which
            runs one transfer per process, uses False.
        fsync: make each file durable before it takes its final name: fsync
            of a download (and of its directory after the rename),
            ``fsync@openssh.com`` of an upload when the server offers it. A
            crash then leaves the old file or the whole new one, never a name
            whose bytes are not there. On by default (scp, sftp and rsync do
            not); a tree's small downloads are synced by the batch (one
            syncfs for the files written meanwhile), uploads one by one on the
            server. False keeps only the rename, which already keeps readers
            from ever seeing a partial file.
        verify: check the copy end to end before it takes its final name:
            "none"; "size" (the server's size after the copy); "hash" (a
            SHA-256 computed as the bytes flow, against ``sha256sum`` run on
            the server; where it runs none, the hash its SFTP ``check-file``
            extension makes, in the best algorithm it has; where it has
            neither, the copy fails with ``HashUnavailable`` and does not take
            its name); "best" (as "hash", else the size: the CLI's plain
            ``--verify``); "read-back" (as "hash", else the file read back
            over SFTP and hashed). ``TransferStats.verified`` says which was
            achieved.
        retries: reconnects in a row that may fail to move a byte before a
            download gives up (0: none). A dropped or stalled connection is
            reopened with backoff and only the missing ranges are asked again;
            errors retrying cannot fix (permission, missing file, disk full,
            authentication, host key) are never retried.
        stall_timeout: seconds without a single reply after which a
            connection counts as dropped.
        queue_timeout: seconds a transfer may wait for a channel when every
            channel the client may open already carries all the transfers it
            can (past ``max_connections`` x ``channels_per_connection``,
            transfers share channels); then ``PoolExhausted``. None waits for ever.
        resume: keep an interrupted copy's partial file (fixed name beside
            the destination) and a journal of its complete ranges (each with a
            SHA-256), and continue from them next time (``rsync --partial``,
            ``sftp reget``/``reput``): ranges whose bytes no longer match are
            copied again; a source that changed since is refused
            (``IntegrityError``), and so is a second copy resuming the same
            partial at once (``LocalError``). An upload's journal lives in
            ``$XDG_STATE_HOME/sshpipe/resume``, and its kept ranges are read
            back from the server first.
            A tree (``recursive``) skips the files an earlier run finished
            (journaled there too) and continues its big files.
        inplace: write straight to the destination instead of a temporary
            name renamed over it (``rsync --inplace``): no second copy on
            disk and the file keeps its inode, but a failure leaves a partial
            file under the final name.
        sequential_writes: send an upload's WRITEs in file order on one
            channel, for servers that refuse any other (object-store backed
            ones: Azure Blob SFTP). Without it, a server that refuses a WRITE
            gets the upload again this way, once, and keeps it for the client.
        server_profile: the cloud SFTP server's quirks to expect (``core.quirks``):
            "auto" (the default) reads them from the server's banner (AWS
            Transfer Family, Azure Blob); "aws-transfer", "azure-blob",
            "mailbox" (read-once files) force one; "standard" expects none.
            Quirks met at run time are learned whatever this says. A
            ``core.quirks.Quirks`` object forces itself: a server of a known
            kind configured otherwise (a shorter idle timeout).
        rate_limit: most bytes per second the transfer asks for, over all its
            channels and connections (a tree's files share it); None: no
            limit. A token bucket meters each READ/WRITE before it leaves
            (``core/ratelimit.py``), so the rate over the whole transfer holds
            from the first request. The CLI's ``-l`` is in Kbit/s as scp's
            (1 Kbit = 1024 bits): ``-l 8000`` is 1,024,000 bytes/s.
        max_depth: directories a tree may go down below each source (``-r``);
            one deeper stops the tree with ``TooDeep``. What a tree holds
            while it walks grows with the depth, never with the width.
        workers: processes that share one file's get or put, each with its own
            connection and its own stripe of the file (``transfer/workers``):
            for a client one core cannot keep up with. "auto" (the default)
            is 1 until measured to win (README, "Worker processes"); a number
            forces it (a small file gets fewer).
    """

    requests: int = DEFAULT_REQUESTS
    block_size: int | None = None
    max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT
    min_bytes_in_flight: int = DEFAULT_MIN_BYTES_IN_FLIGHT
    channels: int | None = None
    channels_per_connection: int = DEFAULT_CHANNELS_PER_CONNECTION
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_host: int | None = None
    window: int = DEFAULT_WINDOW
    max_packet_size: int = DEFAULT_MAX_PACKET_SIZE
    local_io_in_thread: bool = True
    fsync: bool = True
    inplace: bool = False
    verify: VerifyLevel = "none"
    resume: bool = False
    retries: int = DEFAULT_RETRIES
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    queue_timeout: float | None = DEFAULT_QUEUE_TIMEOUT
    sequential_writes: bool = False
    server_profile: str | Quirks = "auto"
    rate_limit: int | None = None
    workers: int | Literal["auto"] = "auto"
    max_depth: int = DEFAULT_MAX_DEPTH

    def __post_init__(self) -> None:
        if self.retries < 0 or isinstance(self.retries, bool):
            raise UsageError(f"retries must be 0 or more, not {self.retries!r}")
        if not self.stall_timeout > 0:
            raise UsageError(f"stall_timeout must be positive, not {self.stall_timeout!r}")
        if self.queue_timeout is not None and not self.queue_timeout > 0:
            raise UsageError(f"queue_timeout must be positive or None, not {self.queue_timeout!r}")
        if self.resume and self.inplace:
            raise UsageError("resume keeps a partial file beside the target; inplace has none")
        forced = isinstance(self.server_profile, Quirks)
        if not forced and self.server_profile not in PROFILE_SETTINGS:
            raise UsageError(
                f"server_profile must be one of {', '.join(PROFILE_SETTINGS)}, "
                f"not {self.server_profile!r}"
            )
        if self.verify not in VERIFY_LEVELS:
            raise UsageError(
                f"verify must be one of {', '.join(VERIFY_LEVELS)}, not {self.verify!r}"
            )
        _positive("requests", self.requests, maximum=65536)
        _positive("block_size", self.block_size, maximum=MAX_BLOCK_SIZE)
        _positive("max_bytes_in_flight", self.max_bytes_in_flight)
        _positive("min_bytes_in_flight", self.min_bytes_in_flight)
        _positive("channels", self.channels, maximum=64)
        _positive("channels_per_connection", self.channels_per_connection, maximum=1024)
        _positive("max_connections", self.max_connections, maximum=64)
        _positive("max_connections_per_host", self.max_connections_per_host, maximum=1024)
        _positive("window", self.window, maximum=2**32 - 1)
        _positive("max_packet_size", self.max_packet_size, maximum=2**20)
        # scp's ceiling: 100 x 2^20 Kbit/s (scp.c's strtonum bound), 128 bytes each.
        _positive("rate_limit", self.rate_limit, maximum=100 * 2**20 * 128)
        if self.workers != "auto":
            _positive("workers", self.workers, maximum=MAX_WORKERS)
        _positive("max_depth", self.max_depth, maximum=MAX_MAX_DEPTH)


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectConfig:
    """Where and how to open the SSH connection; unset fields come from ssh_config.

    Attributes:
        host: host name or address (an alias from ssh_config works too).
        port: TCP port; None means ssh_config's Port, else 22.
        username: login name; None means ssh_config's User, else the local user.
        identity_files: private key files to offer (``-i``), in order, then
            ssh_config's IdentityFile; where neither (nor ``keys``) names
            one, ~/.ssh/id_*. An encrypted one is offered by its public half
            and its passphrase asked only if the server accepts it.
        passphrase: decrypts the encrypted ``identity_files`` (and default
            keys); never logged or shown.
        keys: private keys in memory (``sshpipe.load_key``), offered before
            the files.
        agent_path: the ssh-agent socket; None means ssh_config's
            IdentityAgent, else ``$SSH_AUTH_SOCK``; "none" uses no agent.
        password: password to try when keys fail (never logged).
        prompt: a callback (``sshpipe.Prompt`` in, the answer out) for the
            passphrases, passwords and keyboard-interactive challenges a
            log-in needs; None prompts for nothing (``_prompt.py``).
        batch_mode: OpenSSH's BatchMode: never prompt, even with ``prompt``;
            None means ssh_config's BatchMode, else no.
        password_prompts: OpenSSH's NumberOfPasswordPrompts: tries at each
            password, passphrase or challenge before giving up on it.
        known_hosts: known_hosts files; None means ssh_config's, else
            ~/.ssh/known_hosts. Or a callable ``(host, port, HostKey) ->
            bool`` that alone decides: True trusts the key, False refuses it
            (``HostKeyError``); no file is read or written, and
            ``strict_host_key_checking`` must stay "yes".
        strict_host_key_checking: "yes" refuses unknown hosts, "accept-new"
            records them, "no" accepts them; a changed key is always refused.
            None means ssh_config's StrictHostKeyChecking (its "off" is "no",
            its "ask" is "yes": nobody is asked), else "yes".
        ssh_config: OpenSSH client config files to read; None means ~/.ssh/config.
        connect_timeout: seconds allowed for TCP connect plus SSH handshake;
            None means ssh_config's ConnectTimeout, else 30.
        ciphers: encryption algorithms in preference order; None means
            ssh_config's Ciphers, else an order chosen from the CPU's flags
            (AES-GCM first with AES instructions, chacha20-poly1305 first
            without; ``DEFAULT_CIPHERS`` when unreadable). "none" is refused
            from either.
        compression: "auto" chooses per file: an uncompressed
            connection, and a compressed one (zlib@openssh.com, else zlib)
            opened beside it for files that shrink on a link slower than
            zlib; True compresses every connection (helps slow links, halves
            fast ones), False none. None means ssh_config's Compression
            (yes/no/auto), else "auto" (OpenSSH's default is no; README,
            "Compression").
        proxy_jump: jump hosts, ``[user@]host[:port]`` separated by commas
            (``ssh -J``): the connection is tunnelled through each in turn,
            and each is checked and logged in as a host of its own (its own
            ssh_config block; this config's keys, known_hosts, host key
            policy, connect timeout and ciphers; not its port, user,
            compression or ``ssh_options``; never the password). None means
            ssh_config's ProxyJump; "none" connects directly.
        ssh_options: OpenSSH options as ``-o Key=Value`` gives them, (keyword,
            value) pairs read as a config before the ssh_config files: the
            first value of a keyword wins, so they beat the files, and the
            fields above beat them. For keywords with no field here
            (HostName, IdentitiesOnly, KexAlgorithms...). Not Host, Match,
            Include.
        control_path: a mux master's UNIX socket (the CLI's ControlPath,
            expanded): when a master answers there, connections go through
            its authenticated one and pay no handshake; when none does, they
            are opened directly. None: always directly.
    """

    host: str
    port: int | None = None
    username: str | None = None
    identity_files: tuple[str | os.PathLike[str], ...] = ()
    passphrase: str | bytes | None = field(default=None, repr=False)
    keys: tuple[PrivateKey, ...] = ()
    agent_path: str | os.PathLike[str] | None = None
    password: str | None = field(default=None, repr=False)
    prompt: PromptCallback | None = field(default=None, repr=False, compare=False)
    batch_mode: bool | None = None
    password_prompts: int = DEFAULT_PASSWORD_PROMPTS
    known_hosts: tuple[str, ...] | HostKeyCheck | None = None
    strict_host_key_checking: HostKeyPolicy | None = None
    ssh_config: tuple[str, ...] | None = None
    connect_timeout: float | None = None
    ciphers: tuple[str, ...] | None = None
    compression: bool | Literal["auto"] | None = None
    proxy_jump: str | None = None
    ssh_options: tuple[tuple[str, str], ...] = ()
    control_path: str | None = None

    def __post_init__(self) -> None:
        if not self.host:
            raise UsageError("host must not be empty")
        usable(self.host, "host")
        if self.username is not None:
            usable(self.username, "user name")
        files = (*self.identity_files, *(self.ssh_config or ()), self.agent_path, self.control_path)
        for file in (*files, *(() if callable(self.known_hosts) else self.known_hosts or ())):
            if isinstance(file, str | os.PathLike):
                usable(os.fspath(file))
        _positive("port", self.port, maximum=65535)
        if self.strict_host_key_checking not in (None, "yes", "accept-new", "no"):
            raise UsageError(
                "StrictHostKeyChecking must be yes, accept-new or no, "
                f"not {self.strict_host_key_checking!r}"
            )
        if self.connect_timeout is not None and not self.connect_timeout > 0:
            raise UsageError("connect_timeout must be positive")
        if self.compression not in (None, True, False, "auto"):
            raise UsageError(f"compression must be 'auto', True or False, not {self.compression!r}")
        if self.prompt is not None and not callable(self.prompt):
            raise UsageError(f"prompt must be a callable, not {type(self.prompt).__name__}")
        _positive("password_prompts", self.password_prompts, maximum=100)
        if callable(self.known_hosts) and self.strict_host_key_checking not in (None, "yes"):
            raise UsageError(
                "known_hosts as a callable decides alone: strict_host_key_checking "
                f"{self.strict_host_key_checking!r} would not apply"
            )
        if any(not isinstance(key, PrivateKey) for key in self.keys):
            raise UsageError("keys must be PrivateKey objects (see sshpipe.load_key)")
        if self.ciphers is not None and (
            not self.ciphers or any(c.lower() == "none" for c in self.ciphers)
        ):
            raise UsageError("the 'none' cipher is never allowed")
        if self.proxy_jump is not None:
            parse_jump(self.proxy_jump)  # a bad hop is refused before any connection
        for keyword, value in self.ssh_options:
            if not keyword.isalnum() or keyword.lower() in _BLOCK_KEYWORDS:
                raise UsageError(f"not an option -o can set: {keyword!r}")
            if "\n" in value or "\r" in value:
                raise UsageError(f"option {keyword}: a value is one line")
