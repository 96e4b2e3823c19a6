"""What a transfer did, reported to the caller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeAlias

# The algorithms a server's check-file may hash with that sshpipe can compute
# too (``core.checkfile.PREFERENCE``, best first).
HashAlgorithm: TypeAlias = Literal["sha256", "sha512", "sha384", "sha224", "sha1", "md5"]
# How a copy was checked (``TransferStats.verified``): "hash-remote" is the
# server's sha256sum, "hash-remote:<algorithm>" its check-file extension.
Verified: TypeAlias = Literal[
    "none",
    "size",
    "read-back",
    "hash-remote",
    "hash-remote:sha256",
    "hash-remote:sha512",
    "hash-remote:sha384",
    "hash-remote:sha224",
    "hash-remote:sha1",
    "hash-remote:md5",
]
# Where the flow controller stood at the end (``TransferStats.flow_phase``).
FlowPhase: TypeAlias = Literal["startup", "steady", "fixed"]


@dataclass(frozen=True, kw_only=True, slots=True)
class SetupPhase:
    """One phase of a transfer's set-up (``sshpipe.core.timeline`` names them).

    Attributes:
        name: "connect", "key_exchange", "auth", "channel", "sftp_init",
            "open", "first_data", then "commit" (get) or "fsync_close" and
            "rename" (put).
        seconds: how long it took.
        round_trips: ``seconds`` in round trips of ``TransferStats.rtt_initial``.
    """

    name: str
    seconds: float
    round_trips: float


@dataclass(frozen=True, slots=True)
class CompressionReport:
    """What ``Compression auto`` did with one file (``TransferStats.compression``).

    Attributes:
        used: its requests went (some or all) over the compressed connection.
        algorithm: that connection's ("zlib@openssh.com"), "none" if not used.
        plain_bytes: payload bytes moved over the plain connection.
        compressed_bytes: payload bytes moved over the compressed one.
        ratio: zlib-6's ratio on the sampled blocks (None: not sampled).
        link_rate: payload bytes/s the plain connection delivered, as the
            policy saw it (None: the file ended before it was measured).
        compressed_rate: payload bytes/s achieved compressed, from its first
            reply to its last (None: not used).
        reason: the policy's last word, as ``-v`` logs it.
    """

    used: bool
    algorithm: str
    plain_bytes: int
    compressed_bytes: int
    ratio: float | None
    link_rate: float | None
    compressed_rate: float | None
    reason: str

    def summary(self) -> str:
        """The summary line's words for it."""
        if not self.used:
            return f"not compressed ({self.reason})"
        rate = f", {self.compressed_rate / 1e6:.1f} MB/s" if self.compressed_rate else ""
        ratio = f", zlib ratio {self.ratio:.1f}" if self.ratio else ""
        plain = f" at {self.link_rate / 1e6:.1f} MB/s" if self.link_rate else ""
        return (
            f"{self.compressed_bytes} bytes compressed ({self.algorithm}{ratio}{rate}),"
            f" {self.plain_bytes} plain{plain}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TransferStats:
    """Counters of one finished transfer.

    Attributes:
        bytes: payload bytes transferred (the final size of the file).
        seconds: wall time from opening the remote file to the last byte committed.
        requests: READ/WRITE requests sent, re-issued ones included.
        short_reads_reissued: requests re-sent for the rest of a short read.
        short_writes_reissued: always 0 over SFTP v3 (a WRITE is all or nothing),
            kept so reads and writes report alike.
        peak_requests_in_flight: most requests outstanding at once.
        peak_bytes_in_flight: most payload bytes charged at once (on the wire or buffered).
        channels: SFTP channels the requests were spread over.
        block_size: bytes per request.
        size_changed: the file's size moved while it was read (grew or shrank);
            the result is what the server returned.
        connections: SSH connections those channels belonged to.
        rtt_initial: seconds of one round trip on an idle channel at set-up.
        rtt_min, rtt_smoothed: lowest and smoothed (RFC 6298) request latency.
        peak_delivery_rate: best rate of one round (~1 RTT), bytes/s.
        peak_target_in_flight: most bytes the flow controller asked to keep in flight.
        receive_window: SSH window we granted per channel (limits a download).
        peer_window: SSH window the server granted per channel (limits an upload).
        flow_phase: "startup" if the transfer ended before the controller
            found the link's rate, else "steady"; "fixed" when channels were set.
        verified: how the copy was checked: "none", "size", "hash-remote"
            (SHA-256 against the server's sha256sum), "hash-remote:<algorithm>"
            (against the hash the server's check-file made: "hash-remote:md5",
            "hash-remote:sha256"...) or "read-back".
        reconnects: times the connection dropped or stalled and was reopened
            (the counters above are those of the last connection).
        resumed_bytes: bytes of an earlier partial copy found intact and kept
            (``resume``); only the rest was transferred.
        setup: the phases before the first byte and after the last, in
            order; the connection's and channel's only for the transfer that
            opened them (a reused channel cost nothing).
        compression: what ``Compression auto`` did (None: compression was
            forced on or off, or the file was too short to decide).
        workers: processes that copied the file (``TransferConfig.workers``);
            with more than one, requests, channels and connections are their
            sums and the timings are the first worker's.
    """

    bytes: int
    seconds: float
    requests: int
    short_reads_reissued: int
    short_writes_reissued: int
    peak_requests_in_flight: int
    peak_bytes_in_flight: int
    channels: int
    block_size: int
    size_changed: bool = False
    connections: int = 1
    rtt_initial: float = 0.0
    rtt_min: float = 0.0
    rtt_smoothed: float = 0.0
    peak_delivery_rate: float = 0.0
    peak_target_in_flight: int = 0
    receive_window: int = 0
    peer_window: int = 0
    flow_phase: FlowPhase = "fixed"
    verified: Verified = "none"
    reconnects: int = 0
    resumed_bytes: int = 0
    setup: tuple[SetupPhase, ...] = ()
    compression: CompressionReport | None = None
    workers: int = 1

    @property
    def throughput(self) -> float:
        """Bytes per second (0 for an instant transfer)."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "throughput": self.throughput}


@dataclass(frozen=True, slots=True)
class TreeFailure:
    """One path of a tree that was not copied, and why."""

    path: str
    error: str  # the one-line message, as the CLI prints it
    exit_code: int  # the exit code this error alone would give
    errno: int | None = None  # the POSIX errno it is, where one says it (ENOENT...)


@dataclass(frozen=True, kw_only=True, slots=True)
class Progress:
    """Where a transfer stands, as handed to a ``progress=`` callback.

    A file is one file of ``files_total == 1``; a tree's totals grow while it
    is scanned. ``bytes_done`` and ``files_done`` never go backwards (a
    reconnect or a retried file counts its bytes once); on success the last
    report has ``finished`` set, ``bytes_done == bytes_total`` and
    ``files_done == files_total``.

    Attributes:
        bytes_done: payload bytes done: acknowledged by the server (put),
            written to the local file (get), yielded (stream); bytes an
            earlier run left (``resume``) count as done.
        bytes_total: the bytes to move; while ``scan_done`` is False, what is
            known so far (a stream being uploaded: what was acknowledged).
        files_done: files copied, zero-byte and already-copied ones included.
        files_total: regular files found so far.
        scan_done: the totals are final (the tree is scanned, the size known).
        rate: bytes/s over the last few seconds (resumed bytes not counted).
        eta: seconds left at ``rate``; None while the totals grow or nothing moves.
        current: the paths in flight (sources: the remote path of a get, the
            local one of a put), the most recently started last; at most a few.
        elapsed: seconds since the transfer started.
        finished: this is the last report, made when the transfer ended (a
            tree: before its IncompleteTransfer, if some files failed).
    """

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    scan_done: bool
    rate: float
    eta: float | None = None
    current: tuple[str, ...] = ()
    elapsed: float = 0.0
    finished: bool = False


TreeProgress = Progress  # its first name, when only trees reported progress


# What ``progress=`` takes: a function, or a coroutine function, called with each Progress.
ProgressCallback: TypeAlias = Callable[[Progress], Awaitable[None] | None]


@dataclass(frozen=True, kw_only=True, slots=True)
class TreeStats:
    """Counters of one finished tree (or multi-file) transfer.

    Attributes:
        files: regular files found (copied or failed).
        files_done: files copied.
        files_failed: files that failed (each is in ``failures``).
        directories: directories created or reused at the destination.
        symlinks: symbolic links recreated.
        entries: every entry met, copied or failed: the files, directories and
            links, and those that failed before they were one (a source that
            is not there, a refused name, a directory or link not made).
        skipped: special files (fifo, socket, device) and sshpipe's own
            temporary files left out; the first 1,000 in ``skipped_paths``.
        bytes: payload bytes of the files copied.
        seconds: wall time of the whole transfer.
        failures: the paths that failed (files, directories, links, refused
            names), the first 1,000 of them.
        failures_unlisted: failures past those, counted but not listed.
        reconnects: times the pipeline's connection dropped (or went silent)
            and was opened again; a big file's own reconnects are not counted.
        verified: with ``verify``, the weakest check any file passed ("size",
            "read-back", "hash-remote:md5", "hash-remote:sha1", ...,
            "hash-remote"); "none" when not asked (or no file).
        resumed_files: with ``resume``, files an earlier run of the same copy
            finished, left alone (counted in ``files_done``, not in ``bytes``).
        compression: (source path, what ``Compression auto`` did) for each big
            file (past a sixth of the byte budget: the small files go plain).
    """

    files: int
    files_done: int
    files_failed: int
    directories: int
    symlinks: int
    skipped: int
    bytes: int
    seconds: float
    failures: tuple[TreeFailure, ...] = ()
    failures_unlisted: int = 0
    skipped_paths: tuple[str, ...] = ()
    reconnects: int = 0
    verified: Verified = "none"
    resumed_files: int = 0
    entries: int = 0
    compression: tuple[tuple[str, CompressionReport], ...] = ()

    @property
    def throughput(self) -> float:
        """Bytes per second (0 for an instant transfer)."""
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def files_per_second(self) -> float:
        return self.files_done / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "failures": [asdict(failure) for failure in self.failures],
            "skipped_paths": list(self.skipped_paths),
            "throughput": self.throughput,
            "files_per_second": self.files_per_second,
            "compression": [{"path": path, **asdict(report)} for path, report in self.compression],
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class RemoteFileStats:
    """What a :class:`RemoteFile` has asked of the server so far (``RemoteFile.stats``).

    ``requests``: READs and WRITEs sent; ``bytes_received``: payload bytes the
    READs brought (read-ahead included); ``bytes_written``: bytes handed to
    ``write``; ``short_reads_reissued``: replies shorter than asked whose rest
    was asked again; ``read_ahead``: the window now (bytes past the last
    ``read``), ``peak_read_ahead`` the largest it was; ``seeks``: reads that
    did not start where the last one ended; ``peak_bytes_in_flight``: the
    most payload bytes asked for (READs) or sent (WRITEs) and not yet answered.
    """

    requests: int
    bytes_received: int
    bytes_written: int
    short_reads_reissued: int
    read_ahead: int
    peak_read_ahead: int
    seeks: int
    peak_bytes_in_flight: int
