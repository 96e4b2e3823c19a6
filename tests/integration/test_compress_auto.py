"""Compression auto against sshd behind a 20 Mbit/s, 40 ms emulated link.

Which connection each file used is read from its stats; every byte is checked.
Speed is the benchmark's (benchmarks/bench_compress.py), not asserted here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sshpipe
from sshpipe.linkemu import LinkSpec
from tests.support.peers import EmulatedLink, Peer

pytestmark = [pytest.mark.openssh]

SLOW = LinkSpec(rtt=0.04, rate=20e6)
SIZE = 8 * 1024 * 1024


def _text(size: int) -> bytes:
    """CSV-like lines (zlib-6 ratio ~4-5): what compression is for."""
    rows = [
        f"{i},2026-12-02,host{i % 89},{(i * 7919) % 100003},{i % 97}.5,ok\n"
        for i in range(size // 30)
    ]
    return "".join(rows).encode()[:size]


def _client(far: Peer, compression: bool | str | None) -> sshpipe.Client:
    return sshpipe.connect(
        f"{far.user}@{far.host}",
        port=far.port,
        identity_files=[str(far.client_key)],
        known_hosts=[str(far.known_hosts)],
        ssh_config=[],
        compression=compression,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_text_goes_compressed_and_random_does_not(
    openssh_peer: Peer, emulated_link: EmulatedLink, tmp_path: Path, direction: str
) -> None:
    # Random data needs only its sample and the link's rate to be judged: 2 MiB.
    text, noise = _text(SIZE), os.urandom(SIZE // 4)
    async with emulated_link(openssh_peer, SLOW) as (_, far), _client(far, None) as client:
        for name, data in (("text.csv", text), ("noise.bin", noise)):
            local = tmp_path / f"local-{name}"
            if direction == "get":
                (far.root / name).write_bytes(data)
                stats = await client.get(far.remote(name), local)
                assert local.read_bytes() == data
            else:
                local.write_bytes(data)
                stats = await client.put(local, far.remote(name))
                assert (far.root / name).read_bytes() == data
            report = stats.compression
            assert report is not None, name
            assert report.ratio is not None
            if data is text:
                assert report.used, report
                assert report.algorithm == "zlib@openssh.com"
                assert 0 < report.compressed_bytes < SIZE  # the start went plain
                assert report.ratio > 3
            else:
                assert not report.used, report
                assert report.compressed_bytes == 0
                assert report.ratio < 1.05


@pytest.mark.parametrize("forced", [True, False])
async def test_forced_settings_do_not_route(
    openssh_peer: Peer, emulated_link: EmulatedLink, tmp_path: Path, forced: bool
) -> None:
    text = _text(SIZE // 4)
    (openssh_peer.root / "text.csv").write_bytes(text)
    async with emulated_link(openssh_peer, SLOW) as (_, far), _client(far, forced) as client:
        stats = await client.get(far.remote("text.csv"), tmp_path / "text.csv")
    assert (tmp_path / "text.csv").read_bytes() == text
    assert stats.compression is None
