"""Compression auto against sshd behind a 20 Mbit/s, 40 ms emulated link.

Which connection each file used is read from its stats; every byte is checked.
Speed is the benchmark's (benchmarks/bench_compress.py), not asserted here.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import asyncssh
import pytest

import sshpipe
from sshpipe.testing.embedded import embedded_server
from sshpipe.testing.linkemu import LinkSpec
from sshpipe.transport.authmemory import AuthMemory
from sshpipe.transport.ssh import open_link
from tests.support.cli import run_cli_async
from tests.support.peers import EmulatedLink, Peer, from_embedded

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


@pytest.mark.parametrize(
    ("direction", "compression"), [("get", "auto"), ("put", "auto"), ("get", None), ("put", None)]
)
async def test_text_goes_compressed_and_random_does_not(
    openssh_peer: Peer,
    emulated_link: EmulatedLink,
    tmp_path: Path,
    direction: str,
    compression: str | None,
) -> None:
    # None: no setting and no ssh_config, so the default, which is auto.
    # Random data needs only its sample and the link's rate to be judged: 2 MiB.
    text, noise = _text(SIZE), os.urandom(SIZE // 4)
    async with (
        emulated_link(openssh_peer, SLOW) as (_, far),
        far.client(compression=compression) as client,
    ):
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
    async with (
        emulated_link(openssh_peer, SLOW) as (_, far),
        far.client(compression=forced) as client,
    ):
        stats = await client.get(far.remote("text.csv"), tmp_path / "text.csv")
    assert (tmp_path / "text.csv").read_bytes() == text
    assert stats.compression is None


async def test_a_server_without_compression_means_off_said_once(
    tmp_path: Path, emulated_link: EmulatedLink, caplog: pytest.LogCaptureFixture
) -> None:
    text = _text(SIZE // 4)
    async with embedded_server(tmp_path / "plain", compression_algs=["none"]) as server:
        peer = from_embedded(server)
        (peer.root / "text.csv").write_bytes(text)
        caplog.set_level(logging.INFO, logger="sshpipe.compress")
        async with emulated_link(peer, SLOW) as (_, far), far.client(compression="auto") as client:
            reports = []
            for copy in ("one.csv", "two.csv"):
                stats = await client.get(far.remote("text.csv"), tmp_path / copy)
                assert (tmp_path / copy).read_bytes() == text
                reports.append(stats.compression)
    for report in reports:
        assert report is not None and not report.used and report.compressed_bytes == 0
    said = [r.getMessage() for r in caplog.records if "offers no compression" in r.getMessage()]
    assert len(said) == 1, said


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_a_mixed_tree_uses_both_connections(
    openssh_peer: Peer, emulated_link: EmulatedLink, tmp_path: Path, direction: str
) -> None:
    # A 12 MiB budget makes files past 2 MiB big (their own leases, decided each).
    config = sshpipe.TransferConfig(max_bytes_in_flight=12 * 1024 * 1024)
    files = {
        "logs/text.csv": _text(SIZE * 3 // 4),
        "logs/more.log": _text(SIZE // 2),  # after text.csv's, a put's is weighed at once
        "media/packed.gz": os.urandom(SIZE // 3),  # compressed by its name: never sampled
        "media/noise.bin": os.urandom(SIZE // 3),  # by its sample
        "small.txt": _text(4096),
    }
    tree = (openssh_peer.root if direction == "get" else tmp_path) / "tree"
    for name, data in files.items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    async with emulated_link(openssh_peer, SLOW) as (_, far):
        client = far.client(compression="auto")
        client.config = config
        async with client:
            if direction == "get":
                copy = tmp_path / "copy"
                stats = await client.get(far.remote("tree"), copy, recursive=True)
            else:
                copy = openssh_peer.root / "copy"
                stats = await client.put(tree, far.remote("copy"), recursive=True)
    for name, data in files.items():
        assert (copy / name).read_bytes() == data, name
    reports = {path.rsplit("/", 1)[-1]: report for path, report in stats.compression}
    assert set(reports) == {"text.csv", "more.log", "packed.gz", "noise.bin"}
    for text in ("text.csv", "more.log"):
        assert reports[text].used and reports[text].compressed_bytes > 0, reports[text]
    assert not reports["packed.gz"].used and reports["packed.gz"].ratio is None
    assert not reports["noise.bin"].used and reports["noise.bin"].compressed_bytes == 0


async def get_noise_over_slow_link(
    peer: Peer, emulated_link: EmulatedLink, tmp_path: Path, **options: Any
) -> None:
    """A random file got over the 20 Mbit/s link with ``options``, checked; random
    data never opens the compressed connection by itself, nor goes over it."""
    noise = os.urandom(SIZE // 4)
    (peer.root / "noise.bin").write_bytes(noise)
    async with emulated_link(peer, SLOW) as (_, far):
        client = sshpipe.connect(
            f"{far.user}@{far.host}",
            port=far.port,
            identity_files=[str(far.client_key)],
            **{"known_hosts": [str(far.known_hosts)], "ssh_config": [], **options},
        )
        async with client:
            stats = await client.get(far.remote("noise.bin"), tmp_path / "noise.bin")
    assert (tmp_path / "noise.bin").read_bytes() == noise
    report = stats.compression
    assert report is not None and not report.used and report.compressed_bytes == 0


# The early log-in is gated on the SERVICE_ACCEPT round trip, which pipelined_auth
# times: on stock asyncssh it is not measured, and the compressed connection opens
# when a file first wants it (as ``test_text_goes_compressed_and_random_does_not``).
@pytest.mark.needs_patches
async def test_the_compressed_log_in_runs_beside_the_plain_one(
    openssh_peer: Peer,
    emulated_link: EmulatedLink,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A new host with accept-new: the compressed log-in, begun beside the plain
    # one, waits for its host-key check, so the key is recorded once, not twice
    # (nor refused as changed).
    known = tmp_path / "known_hosts"
    caplog.set_level(logging.INFO, logger="sshpipe")
    await get_noise_over_slow_link(
        openssh_peer, emulated_link, tmp_path, known_hosts=[str(known)],
        strict_host_key_checking="accept-new", compression="auto",
    )  # fmt: skip
    assert len(known.read_text().splitlines()) == 1
    said = [r.getMessage() for r in caplog.records]
    assert sum("compressed connection up" in m for m in said) == 1, said
    assert sum("Permanently added" in m for m in said) == 1, said


@pytest.mark.needs_patches  # the early log-in, as above
async def test_ssh_config_compression_auto_logs_in_beside_the_plain_one_too(
    openssh_peer: Peer,
    emulated_link: EmulatedLink,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # ssh_config's "Compression auto" is known only once the plain log-in has
    # read it; the compressed log-in then starts at once, not at the first data
    # that shrinks: random data, which never opens it otherwise, sees it come up.
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    Compression auto\n")
    caplog.set_level(logging.INFO, logger="sshpipe")
    await get_noise_over_slow_link(openssh_peer, emulated_link, tmp_path, ssh_config=[str(config)])
    said = [r.getMessage() for r in caplog.records]
    assert sum("compressed connection up" in m for m in said) == 1, said


async def test_a_failed_log_in_leaves_no_compressed_one_behind(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    # A key the server refuses: the plain log-in fails in its authentication,
    # after the compressed one was let begin.
    stranger = tmp_path / "stranger"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(stranger))
    client = sshpipe.connect(
        f"{openssh_peer.user}@{openssh_peer.host}",
        port=openssh_peer.port,
        identity_files=[str(stranger)],
        known_hosts=[str(openssh_peer.known_hosts)],
        ssh_config=[],
        compression="auto",
        batch_mode=True,
    )
    with pytest.raises(sshpipe.AuthenticationError):
        async with client:
            pass
    current = asyncio.current_task()
    assert [t for t in asyncio.all_tasks() if t is not current and not t.done()] == []


# Timing: under three test workers on two cores one loopback SFTP INIT took
# over 5 ms, and the file was taken for a WAN's.
@pytest.mark.timing
@pytest.mark.parametrize("direction", ["get", "put"])
async def test_on_loopback_the_default_logs_in_once_and_stays_plain(
    openssh_peer: Peer, tmp_path: Path, caplog: pytest.LogCaptureFixture, direction: str
) -> None:
    # No link is slower than zlib here and the CPU is the bottleneck: a second
    # log-in would only cost (11 % of a 64 MiB get), and text stays plain.
    text = _text(SIZE // 2)
    caplog.set_level(logging.INFO, logger="sshpipe")
    local = tmp_path / "text.csv"
    async with openssh_peer.client(compression=None) as client:
        if direction == "get":
            (openssh_peer.root / "text.csv").write_bytes(text)
            stats = await client.get(openssh_peer.remote("text.csv"), local)
            assert local.read_bytes() == text
        else:
            local.write_bytes(text)
            stats = await client.put(local, openssh_peer.remote("text.csv"))
            assert (openssh_peer.root / "text.csv").read_bytes() == text
        assert client.connections == 1
    report = stats.compression
    assert report is not None and not report.used and report.compressed_bytes == 0, report
    said = [r.getMessage() for r in caplog.records]
    assert not any("compressed connection up" in m for m in said), said


@pytest.mark.needs_patches  # pipelined_auth times it (the early log-in's gate, above)
async def test_the_log_in_measures_the_links_round_trip(
    openssh_peer: Peer, emulated_link: EmulatedLink
) -> None:
    # SERVICE_REQUEST to SERVICE_ACCEPT: the round trip the early compressed
    # log-in is gated on (``compressroute.EARLY_LOGIN_RTT``), with no server work in it.
    memory = AuthMemory()
    async with emulated_link(openssh_peer, SLOW) as (_, far):
        default = far.client(compression=None).connect_config
        link = await open_link(default, memory)
        await link.close()
    assert memory.rtt is not None and SLOW.rtt * 0.9 < memory.rtt < SLOW.rtt * 3
    assert memory.compression == "auto"


async def test_the_command_lines_summary_says_what_went_compressed(
    openssh_peer: Peer, emulated_link: EmulatedLink, tmp_path: Path
) -> None:
    text = _text(SIZE // 2)
    (openssh_peer.root / "text.csv").write_bytes(text)
    async with emulated_link(openssh_peer, SLOW) as (_, far):
        auto = ("-o", "Compression=auto")  # before the options' "no": the first wins
        words = ("get", *auto, *far.cli_options(), far.spec("text.csv"), str(tmp_path / "t.csv"))
        got = await run_cli_async(*words)
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "t.csv").read_bytes() == text
    assert " bytes compressed (zlib@openssh.com, zlib ratio " in got.stdout, got.stdout


async def test_max_connections_counts_the_compressed_connection_too(
    openssh_peer: Peer, emulated_link: EmulatedLink, tmp_path: Path
) -> None:
    # Compression auto's connection is a second one: with max_connections=1
    # there is no room for it, so text goes plain on the one connection.
    text = _text(SIZE // 4)
    config = sshpipe.TransferConfig(max_connections=1)
    async with (
        emulated_link(openssh_peer, SLOW) as (_, far),
        far.client(config, compression="auto") as client,
    ):
        (far.root / "text.csv").write_bytes(text)
        stats = await client.get(far.remote("text.csv"), tmp_path / "text.csv")
        assert (tmp_path / "text.csv").read_bytes() == text
        assert stats.compression is not None and not stats.compression.used
        assert client.connections == 1
        assert client._pool is not None and client._pool.budget.held == 1
