"""A transfer's ``Compression auto`` switch, made for its lease (``switching``).

The switch itself (``compressswitch``) routes one file's requests between
the plain and the compressed connection; this makes it for a routed lease
and runs its tasks beside the transfer, and says what it did (``report_of``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial

from ..core.flight import SharedBytes
from ..core.stats import CompressionReport
from ..transport.alongside import alongside
from ..transport.compressroute import RoutedLease
from ..transport.pool import Lease
from .compressswitch import Switch

__all__ = ["Sampler", "switching"]

# zlib's ratio on blocks of the data a put will send, read ahead of it and
# charged to the byte cap given while they are read (``BlockSource.ratio``).
Sampler = Callable[[SharedBytes | None], Awaitable[float | None]]


@contextlib.asynccontextmanager
async def switching(
    lease: Lease, sample: Sampler | None = None, shared: SharedBytes | None = None
) -> AsyncIterator[Switch | None]:
    """A switch for a routed lease (None for any other), its mover stopped on leaving.

    ``sample``: a put's ratio on blocks of the local file, read before its
    first WRITE (zlib-6 on 256 KiB: a few ms) and charged to ``shared``
    meanwhile, so that random data never starts the compressed log-in and
    text starts it at once. Its tasks run ``alongside`` the block: the
    block's error comes out as it was raised.
    """
    if not isinstance(lease, RoutedLease) or lease.pacer is not None:
        # Under a rate limit (-l) the bucket counts payload bytes: compression
        # could not carry more of them, only cost CPU.
        yield None
        return
    ratio = None
    if sample is not None and Switch.plain_whatever_its_data(lease) is None:
        ratio = await sample(shared)
    switch = Switch(lease, lease.route.known_cost(), ratio=ratio)
    lease.report = partial(report_of, switch)
    async with alongside(switch.attach, switch.stop):
        yield switch


def report_of(switch: Switch) -> CompressionReport:
    """What the switch did with its file, for the stats (``--json``, the summary)."""
    used, began = switch.used, switch.started_compressed
    achieved = switch.compressed_rate
    if began is not None and switch.last_compressed > began:
        achieved = switch.compressed_bytes / (switch.last_compressed - began)
    return CompressionReport(
        used=used,
        algorithm=switch.lease.route.algorithm if used else "none",
        plain_bytes=switch.delivered - switch.compressed_bytes,
        compressed_bytes=switch.compressed_bytes,
        ratio=switch.ratio,
        link_rate=switch.link_rate,
        compressed_rate=achieved,
        reason=switch.reason,
    )
