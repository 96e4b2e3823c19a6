"""A server whose compressed packet inflates ~1000-fold: refused, in bounded memory.

Compression auto is the default, so every client on a WAN opens a compressed
connection: what a hostile server can send there is reachable by default.
The server here is asyncssh's, its first compressed packet after the log-in
carrying 64 MiB of zeros (~64 KB on the wire): asyncssh alone inflated all of
it; sshpipe refuses a packet past what one may hold
(``asyncssh_patches/zlibbound.py``).
"""

from __future__ import annotations

import os
import tracemalloc
import zlib
from pathlib import Path

import asyncssh
import pytest

import sshpipe
from sshpipe.testing.embedded import embedded_server
from sshpipe.testing.linkemu import LinkSpec
from tests.support.peers import EmulatedLink, from_embedded

pytestmark = [pytest.mark.asyncssh_server]

BOMB = 64 << 20
RETRY_ONCE = sshpipe.TransferConfig(retries=1)


class InflationBomb(asyncssh.SSHServer):
    """Once the client is logged in, its next compressed packet inflates by 64 MiB."""

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn

    def auth_completed(self) -> None:
        # asyncssh's private compressor (set at NEWKEYS, used from the log-in
        # on with zlib@openssh.com): a test server's, never the client's.
        stock = self._conn._compressor  # type: ignore[attr-defined]
        if stock is None:
            return

        class Bomb:
            fired = False

            def compress(self, data: bytes) -> bytes | None:
                if self.fired:
                    result: bytes | None = stock.compress(data)
                    return result
                self.fired = True
                # Fed in 1 MiB pieces: the server (in this process) never holds
                # the 64 MiB, so what the test measures is the client's.
                deflate = stock._comp
                out = deflate.compress(data)
                zeros = bytes(1 << 20)
                for _ in range(BOMB >> 20):
                    out += deflate.compress(zeros)
                packet: bytes = out + deflate.flush(zlib.Z_SYNC_FLUSH)
                return packet

        self._conn._compressor = Bomb()  # type: ignore[attr-defined]


@pytest.mark.needs_patches  # zlib_bound; stock asyncssh inflates the whole bomb
async def test_forced_compression_fails_cleanly_without_inflating_the_bomb(
    tmp_path: Path,
) -> None:
    data = os.urandom(100_000)
    async with embedded_server(tmp_path, connection_factory=InflationBomb) as server:
        peer = from_embedded(server)
        (peer.root / "f.bin").write_bytes(data)
        tracemalloc.start()
        try:
            with pytest.raises(sshpipe.SSHPipeError) as caught:
                async with peer.client(RETRY_ONCE, compression=True) as client:
                    await client.get(peer.remote("f.bin"), tmp_path / "f.bin")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < BOMB // 4, peak  # stock asyncssh held the whole 64 MiB at once
    # The connection broke under the channel's open: said as broken ("connection
    # lost: Decompression failed", exit 5), not as a server refusing a channel.
    assert type(caught.value) is sshpipe.ConnectionBroken, repr(caught.value)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "f.bin").exists()


async def test_auto_goes_plain_when_the_compressed_connection_is_a_bomb(
    tmp_path: Path, emulated_link: EmulatedLink
) -> None:
    # Text over a 40 ms link: auto opens its compressed connection, which the
    # bomb breaks; the file is copied all the same, over the plain one.
    text = b"".join(b"%d,2026-12-07,host%d,ok\n" % (i, i % 89) for i in range(200_000))
    async with embedded_server(tmp_path, connection_factory=InflationBomb) as server:
        peer = from_embedded(server)
        (peer.root / "t.csv").write_bytes(text)
        slow = LinkSpec(rtt=0.04, rate=20e6)
        async with (
            emulated_link(peer, slow) as (_, far),
            far.client(RETRY_ONCE, compression=None) as client,
        ):
            stats = await client.get(far.remote("t.csv"), tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_bytes() == text
    assert stats.compression is not None and not stats.compression.used, stats.compression
