"""A server's compressed packets inflated to at most what one packet may hold.

asyncssh inflates each packet with ``zlib.decompressobj().decompress(data)``
and no limit: zlib's ratio reaches ~1030:1, so one 256 KiB packet from a
hostile server could become ~256 MiB in memory before anything looks at it.
With Compression auto the default, every client on a WAN opens a compressed
connection, so this is reachable by default. OpenSSH refuses a packet longer
than 256 KiB once inflated (``PACKET_MAX_SIZE``); here the bound is the
largest channel packet sshpipe may ask for (``TransferConfig.max_packet_size``,
at most 1 MiB) plus the packet's own fields. Past it the packet is refused as
asyncssh refuses a corrupt one ("Decompression failed": the connection ends,
the transfer reports it broken). Gated like the others: on the releases read
for it, and on the registry's shape; it applies once, for the process.
"""

from __future__ import annotations

import zlib

import asyncssh.compression as compression

__all__ = ["INFLATED_MAX", "ZLIB_BOUND", "BoundedZlib", "bound_inflation"]

ZLIB_BOUND = "zlib_bound"
# 1 MiB (the largest max_packet_size TransferConfig takes) + 4 KiB of headers.
INFLATED_MAX = (1 << 20) + 4096
_ZLIB_NAMES = (b"zlib@openssh.com", b"zlib")


class BoundedZlib(compression.Decompressor):
    """asyncssh's zlib decompressor, refusing a packet that inflates past ``INFLATED_MAX``."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj()

    def decompress(self, data: bytes) -> bytes | None:
        try:
            payload = self._inflate.decompress(data, INFLATED_MAX)
        except zlib.error:
            return None
        # Input left over: the packet holds more than INFLATED_MAX (each packet
        # ends in a sync flush, so a legitimate one is always inflated whole).
        return None if self._inflate.unconsumed_tail else payload


def bound_inflation(checked: bool) -> bool:
    """Put ``BoundedZlib`` in asyncssh's registry; False where it stays stock.

    ``checked``: the installed asyncssh is a release the patches were read for.
    """
    registry = getattr(compression, "_cmp_decompressors", None)
    stock = getattr(compression, "_ZLibDecompress", None)
    if not isinstance(registry, dict):
        return False
    if all(registry.get(name) is BoundedZlib for name in _ZLIB_NAMES):
        return True
    if not checked or stock is None or any(registry.get(n) is not stock for n in _ZLIB_NAMES):
        return False
    for name in _ZLIB_NAMES:
        registry[name] = BoundedZlib
    return True
