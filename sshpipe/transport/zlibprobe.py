"""What zlib-6 costs on this machine, measured once per process (``Compression auto``).

The policy (``core.compresspolicy``) weighs the link's rate against zlib's:
on a CPU that compresses 37 MB/s, compression halves a 1 Gbit/s transfer and
quadruples a 20 Mbit/s one. The probe compresses and inflates 256 KiB of
CSV-like lines (zlib-6 ratio ~4, like the logs and tables compression is for)
three times: ~30 ms, paid by the first transfer that asks, off the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import time
import zlib

from ..core.compresspolicy import ZlibCost

__all__ = ["cached_zlib_cost", "zlib_cost"]

_PROBE_BYTES = 256 * 1024
# The best of a few rounds, in the thread's CPU seconds, not wall time: run
# beside a busy event loop on a loaded machine, wall time made zlib look 3 MB/s
# (its CPU cost there: 15-37 MB/s), and a 20 Mbit/s link stayed uncompressed.
_ROUNDS = 3


def _probe_data() -> bytes:
    # Deterministic lines with varying numbers: repetitive like a CSV, not a run of one byte.
    rows = [
        f"{i},2026-12-02T02:{i % 60:02d}:{(i * 7) % 60:02d},host{(i * 13) % 97},"
        f"{(i * 2654435761) % 100000},{(i * 40503) % 997}.{i % 100:02d},ok\n"
        for i in range(_PROBE_BYTES // 40)
    ]
    return "".join(rows).encode()[:_PROBE_BYTES]


@functools.cache
def _measure() -> ZlibCost:
    data = _probe_data()
    packing = inflating = float("inf")
    for _ in range(_ROUNDS):
        began = time.thread_time()
        packed = zlib.compress(data, 6)
        middle = time.thread_time()
        zlib.decompress(packed)
        ended = time.thread_time()
        packing, inflating = min(packing, middle - began), min(inflating, ended - middle)
    return ZlibCost(
        compress=len(data) / max(packing, 1e-6), decompress=len(data) / max(inflating, 1e-6)
    )


def cached_zlib_cost() -> ZlibCost | None:
    """The probe's answer if it ran already in this process, else None (never blocks)."""
    return _measure() if _measure.cache_info().currsize else None


async def zlib_cost() -> ZlibCost:
    """zlib-6's compress and inflate rates here, bytes of uncompressed data per second."""
    if _measure.cache_info().currsize:
        return _measure()
    return await asyncio.to_thread(_measure)
