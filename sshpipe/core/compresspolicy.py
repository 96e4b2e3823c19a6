"""Whether a file should go over the compressed connection (``Compression auto``), pure.

SSH compression is fixed per connection at key exchange, so the engine keeps
an uncompressed connection and, when this policy says so, a compressed one,
and routes files (or a file's remaining requests) between them. The policy
is a function of what was measured, with no clock and no I/O:

- the data's compressibility: zlib-6 on a few sampled blocks (``Ratio``);
- the link's delivery rate while uncompressed and its RTT (the flow
  controller's);
- what zlib costs on this machine (compress and decompress rates, probed once
  per process at the edge); the server's side is unknown, so it is taken to
  be as fast as ours until the rate achieved compressed says otherwise.

Compression pays when the link, not the CPU, is the bottleneck and the data
shrinks: the transfer then runs at ``min(link x ratio, zlib)`` instead of
``link``. Measured on the machine this was written on: at 20 Mbit/s / 40 ms a
CSV whose zlib-6 ratio is 5.5 went 3.5x faster compressed; at 1 Gbit/s /
20 ms it went at 0.36x, zlib-6 compressing ~37 MB/s against a 58 MB/s
uncompressed transfer.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

# The Compression setting: "auto" routes per file (this policy), "yes"/"no" force it.
CompressionMode = Literal["auto", "yes", "no"]

# The gain (estimated uncompressed time over compressed time) a switch to
# compression needs: a quarter of margin over the estimate's noise (the link
# rate is a few rounds' maximum; the ratio a few blocks').
ENTER_GAIN = 1.25
# Once compressing, the rate achieved must stay above this share of the
# uncompressed rate measured before; below it the server (or our CPU) is the
# bottleneck after all, and the file goes back, once. Far enough from
# ENTER_GAIN that noise does not flip a file back and forth.
LEAVE_SHARE = 0.9
# Once compressed, a link carrying (achieved / ratio) under this share of the
# plain rate that chose compression was not the bottleneck: compression is
# CPU-bound there, and that plain rate, read from a few blocks, may have been
# read low (a 1 Gbit/s get read 5.4 MB/s under load, went compressed and ran
# at 9.5; plain ran at 60). Plain is then measured afresh before the file is
# kept compressed. At 20 Mbit/s a get's link carried 0.95 of it compressed, a
# put's 0.49-0.86 (its plain rate read up to 2x high); that get 0.42.
RETEST_SHARE = 0.45
# A file moves at most this many times: to compression and back (final), or
# to compression, back to re-test plain, and once more to compression.
MAX_SWITCHES = 3
# Ratios under this are incompressible data (random, media, .gz: zlib-6 gives
# 0.999-1.01 on them): never worth a connection's set-up.
MIN_RATIO = 1.15
# Payload bytes sampled before a ratio is trusted: four 64 KiB blocks spread
# over the file see a CSV's header and body, a tar's mixed members.
SAMPLE_BYTES = 256 * 1024
# What opening the compressed connection costs, in round trips (TCP, key
# exchange, log-in, channel and OPEN: about ten on sshd) plus a fixed part
# for the key exchange's CPU; a file whose rest is saved less time than this
# stays where it is.
SETUP_RTTS = 10
SETUP_FIXED = 0.05


class Route(enum.Enum):
    """Where a file's requests go."""

    PLAIN = "plain"
    COMPRESSED = "compressed"


@dataclass(frozen=True, kw_only=True, slots=True)
class ZlibCost:
    """What zlib-6 does on this machine: bytes of uncompressed data per second."""

    compress: float
    decompress: float

    def __post_init__(self) -> None:
        if not (self.compress > 0 and self.decompress > 0):
            raise ValueError("zlib rates must be positive")


@dataclass(frozen=True, kw_only=True, slots=True)
class Measured:
    """What is known of one file's transfer when the policy is asked.

    ``ratio``: uncompressed over compressed size of the sampled data (None:
    not sampled yet); ``link_rate``: payload bytes/s delivered uncompressed
    (None: not measured yet); ``compressed_rate``: payload bytes/s achieved
    on the compressed connection (None: not tried); ``remaining``: payload
    bytes still to move (None: unknown, taken as plenty); ``ready``: the
    compressed connection is up with the file open on it (a move costs
    nothing then); ``cpu_per_byte``: this process's CPU seconds per payload
    byte so far (None: not measured); ``upload``: a put (we compress);
    ``plain_mean``: the mean plain rate over the stretch before the move
    (an upload's train over-read the link 2x, so the leaving check takes
    the lower); ``retested``: plain was measured afresh after a compressed
    stretch, ``link_rate`` is that fresh rate and ``compressed_rate`` the
    stretch's.
    """

    ratio: float | None
    link_rate: float | None
    rtt: float
    remaining: int | None = None
    compressed_rate: float | None = None
    ready: bool = False
    cpu_per_byte: float | None = None
    upload: bool = False
    plain_mean: float | None = None
    retested: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """``retest``: back to plain only to measure it afresh (``RETEST_SHARE``)."""

    route: Route
    reason: str
    retest: bool = False


class Ratio:
    """zlib-6's ratio on pieces of data added one at a time, each compressed alone
    (as SSH packets are not: its stream keeps a 32 KiB window, which blocks this
    size barely use). Only the counts are kept: a sample costs no memory once seen.
    """

    def __init__(self) -> None:
        self.raw = 0  # bytes seen
        self.packed = 0  # what zlib-6 made of them

    def add(self, piece: bytes | memoryview) -> None:
        if len(piece):
            self.raw += len(piece)
            self.packed += len(zlib.compress(piece, 6))

    @property
    def value(self) -> float | None:
        """The ratio, or None when there was no byte to judge by."""
        return self.raw / self.packed if self.packed else None


def ratio_of(samples: Iterable[bytes | memoryview]) -> float | None:
    """zlib-6's ratio on the samples together, each compressed alone (``Ratio``).

    None when there is no byte to judge by.
    """
    ratio = Ratio()
    for sample in samples:
        ratio.add(sample)
    return ratio.value


def compressed_rate_estimate(
    link_rate: float,
    ratio: float,
    cost: ZlibCost,
    *,
    cpu_per_byte: float | None = None,
    upload: bool = False,
) -> float:
    """Payload bytes/s expected compressed: the link carries ``ratio`` times more, but no
    more than our CPU and the server's zlib allow.

    Ours: a put compresses, a get inflates, in the same thread as the rest
    of the transfer, so its cost adds to the CPU seconds per byte the plain
    stretch took (``cpu_per_byte``): at 1 Gbit/s a transfer already CPU-bound
    at 20 MB/s would go at 1 / (1/20 + 1/30) = 12 MB/s compressing at 30 MB/s.
    The server's zlib is unknown: taken as fast as ours, doing the other half
    (``decide`` learns better from the rate achieved).
    """
    ours, theirs = (cost.compress, cost.decompress) if upload else (cost.decompress, cost.compress)
    local = 1.0 / (cpu_per_byte + 1.0 / ours) if cpu_per_byte else ours
    return min(link_rate * ratio, local, theirs)


def decide(now: Route, measured: Measured, cost: ZlibCost, *, switches: int = 0) -> Decision:
    """Where the file's remaining requests should go, and why (for ``-v``).

    ``now``: where they go; ``switches``: how many times this file moved.
    The answer is ``now`` unless the evidence is clear (hysteresis): to
    compress, a gain of ``ENTER_GAIN`` that repays the set-up; back, an
    achieved rate under ``LEAVE_SHARE`` of the uncompressed one (final), or
    a link that compressed carried under ``RETEST_SHARE`` of the plain rate
    (plain is then measured afresh, and compression kept only if it beats
    that by ``ENTER_GAIN``); never a fourth move.
    """
    ratio, link = measured.ratio, measured.link_rate
    if switches >= MAX_SWITCHES:
        return Decision(now, f"stays {now.value}: moved {switches} times already")
    if now is Route.COMPRESSED:
        return _judge_compressed(measured)
    if measured.retested:
        achieved = measured.compressed_rate
        if achieved is None or link is None:
            return Decision(now, "stays plain: re-testing plain")
        if achieved >= ENTER_GAIN * link:
            return Decision(
                Route.COMPRESSED,
                f"compress again: compressed {_rate(achieved)} vs {_rate(link)} plain afresh",
            )
        return Decision(now, f"stays plain: {_rate(link)} afresh vs compressed {_rate(achieved)}")
    if switches:
        return Decision(now, "stays plain: moved back already")
    if ratio is None:
        return Decision(now, "stays plain: compressibility not sampled yet")
    if ratio < MIN_RATIO:
        return Decision(now, f"stays plain: incompressible (zlib ratio {ratio:.2f})")
    if link is None:
        return Decision(now, f"stays plain: link rate not measured yet (ratio {ratio:.2f})")
    expected = compressed_rate_estimate(
        link, ratio, cost, cpu_per_byte=measured.cpu_per_byte, upload=measured.upload
    )
    gain = expected / link
    if gain < ENTER_GAIN:
        bound = "CPU" if expected < link * ratio else "ratio"
        spent = measured.cpu_per_byte
        cpu = f", our CPU {_rate(1 / spent)} plain" if spent else ""
        return Decision(
            now,
            f"stays plain: link {_rate(link)}, zlib {_rate(min(cost.compress, cost.decompress))}"
            f"{cpu}, ratio {ratio:.2f}: gain {gain:.2f} ({bound}-bound)",
        )
    if measured.remaining is not None:
        saved = measured.remaining / link - measured.remaining / expected
        setup = 0.0 if measured.ready else SETUP_RTTS * measured.rtt + SETUP_FIXED
        if saved < setup or saved <= 0:
            return Decision(
                now, f"stays plain: {saved:.2f} s saved < {setup:.2f} s to set compression up"
            )
    return Decision(
        Route.COMPRESSED,
        f"compress: link {_rate(link)} x ratio {ratio:.2f} -> {_rate(expected)}"
        f" (gain {gain:.2f}; zlib {_rate(cost.compress)})",
    )


def _judge_compressed(measured: Measured) -> Decision:
    """Compressed for a while: stay, go back (slower than plain), or re-test plain."""
    achieved, link, ratio = measured.compressed_rate, measured.link_rate, measured.ratio
    if achieved is None or link is None:
        return Decision(Route.COMPRESSED, "stays compressed: no rate achieved yet")
    # Against what plain achieved over its whole stretch too, not only the
    # estimate that chose compression (an upload's probe train read 4.7 MB/s
    # on a 2.5 MB/s link, and 3.6 MB/s compressed looked like a loss).
    plain = link if measured.plain_mean is None else min(link, measured.plain_mean)
    if achieved < LEAVE_SHARE * plain:
        return Decision(
            Route.PLAIN,
            f"back to plain: compressed {_rate(achieved)} < uncompressed {_rate(plain)}",
        )
    if ratio is not None and achieved / ratio < RETEST_SHARE * link:
        return Decision(
            Route.PLAIN,
            f"re-test plain: the link carried {_rate(achieved / ratio)} compressed,"
            f" {_rate(link)} plain: CPU-bound",
            retest=True,
        )
    return Decision(
        Route.COMPRESSED, f"stays compressed: {_rate(achieved)} vs {_rate(plain)} plain"
    )


def route_by_name(name: str) -> Route | None:
    """PLAIN for a name whose data is compressed already (``.gz``, media...), else None.

    A tree sends these over the plain connection without sampling them.
    """
    dot = name.rfind(".")
    if dot < 0:
        return None
    return Route.PLAIN if name[dot + 1 :].lower() in _PACKED else None


# Formats whose payload is compressed already: zlib-6 gains under 2 % on them.
_PACKED = frozenset(
    [
        "gz",
        "tgz",
        "bz2",
        "tbz",
        "xz",
        "txz",
        "zst",
        "tzst",
        "lz4",
        "lzma",
        "7z",
        "zip",
        "rar",
        "jar",
        "war",
        "apk",
        "whl",
        "deb",
        "rpm",
        "jpg",
        "jpeg",
        "png",
        "gif",
        "webp",
        "heic",
        "avif",
        "mp3",
        "aac",
        "ogg",
        "opus",
        "flac",
        "m4a",
        "mp4",
        "m4v",
        "mkv",
        "mov",
        "avi",
        "webm",
        "pdf",
        "docx",
        "xlsx",
        "pptx",
        "odt",
        "ods",
    ]
)


def _rate(rate: float) -> str:
    return f"{rate / 1e6:.1f} MB/s"
