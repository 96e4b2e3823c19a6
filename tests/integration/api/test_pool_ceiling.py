"""Many transfers on one client: past the channels it may open they share them, none hangs.

One client opens at most ``max_connections`` x ``channels_per_connection``
channels (36 by default). Transfers past that share the least used busy
channel (SFTP multiplexes requests by id), each woken as soon as room appears
anywhere; only a pool at its true limit (every channel at its handle cap, no
connection left to open) makes one wait, for ``queue_timeout``, and then fail
with ``PoolExhausted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from pathlib import Path

import pytest

import sshpipe
from tests.support.files import random_file
from tests.support.peers import Peer
from tests.support.waits import eventually

KiB = 1024
MiB = 1024 * KiB
READERS = 120


async def test_120_slow_stream_readers_all_start_before_any_finishes(
    openssh_peer: Peer,
) -> None:
    # 120 readers held open at once (a web app proxying downloads): more than
    # the 36 channels the client may open. Each must yield its first piece
    # while all the others still hold theirs.
    digests = [
        hashlib.sha256(random_file(openssh_peer.root / f"s{i}.bin", 300 * KiB)).digest()
        for i in range(READERS)
    ]
    started = 0
    at_peak: list[tuple[int, int]] = []  # (busy channels, leases beyond one per channel)
    all_started = asyncio.Event()

    async def reader(client: sshpipe.Client, i: int) -> bytes:
        nonlocal started
        hasher = hashlib.sha256()
        async with contextlib.aclosing(client.stream(openssh_peer.remote(f"s{i}.bin"))) as pieces:
            hasher.update(await anext(pieces))
            started += 1
            if started == READERS:
                busy = client._pool._busy
                at_peak.append((len(busy), busy.sharing))
                all_started.set()
            await all_started.wait()  # nobody finishes before everybody started
            async for piece in pieces:
                hasher.update(piece)
        return hasher.digest()

    async with openssh_peer.client() as client:
        async with asyncio.timeout(30):  # a lost wake-up hangs here, not for 300 s
            got = await asyncio.gather(*(reader(client, i) for i in range(READERS)))
        assert got == digests
        assert started == READERS
        # Every channel the client may open was in use, the others shared them
        # (84, or more if a reader had grown onto a second channel of its own).
        channels, shared = at_peak[0]
        assert channels == 36 and shared >= READERS - channels, at_peak
        assert client.connections == sshpipe.TransferConfig().max_connections
        assert "busy_channels=0" in repr(client)

        charged = client._pool.client_bytes
        assert (charged.bytes, charged.members, charged.busy) == (0, 0, 0)


@pytest.mark.slow  # ~5 s on a loaded 2-core runner: 200 transfers' set-up, 100 MiB verified
async def test_200_concurrent_gets_on_one_client_hold_one_byte_budget(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    # 200 at once, over the 36 channels: all verified, and what they charge
    # together never passes the client's budget (each file alone would fit
    # its own; 200 budgets would be 200 x 64 MiB).
    count, size = 200, 512 * KiB
    digests = [
        hashlib.sha256(random_file(openssh_peer.root / f"g{i}.bin", size)).digest()
        for i in range(count)
    ]
    config = sshpipe.TransferConfig(fsync=False)  # 200 fsyncs are not what is tested
    async with openssh_peer.client(config) as client:
        charged = client._pool.client_bytes
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, charged.bytes)
                await asyncio.sleep(0.001)

        async with asyncio.timeout(60), asyncio.TaskGroup() as group:
            watcher = group.create_task(watch())
            await asyncio.gather(
                *(
                    client.get(openssh_peer.remote(f"g{i}.bin"), str(tmp_path / f"g{i}.bin"))
                    for i in range(count)
                )
            )
            watcher.cancel()
        assert (charged.bytes, charged.members, charged.busy) == (0, 0, 0)
        assert "busy_channels=0" in repr(client) and "shared" not in repr(client)
    for i in range(count):
        assert hashlib.sha256((tmp_path / f"g{i}.bin").read_bytes()).digest() == digests[i]
    # The demand (100 MiB at once) passed the budget: it bound, and held.
    assert config.max_bytes_in_flight // 2 < peak <= config.max_bytes_in_flight


TINY = sshpipe.TransferConfig(max_connections=1, channels_per_connection=1, queue_timeout=0.3)


@pytest.mark.timing  # queue_timeout measured within 0.3..3 s
async def test_a_pool_at_its_true_limit_waits_queue_timeout_then_raises_pool_exhausted(
    openssh_peer: Peer,
) -> None:
    # One connection of one channel, which may carry one handle: the second
    # transfer has nowhere to go, and says so after queue_timeout.
    data = random_file(openssh_peer.root / "f.bin", 600 * KiB)
    async with openssh_peer.client(TINY) as client:
        client._pool.server_caps.handles = 1  # as a server refusing a second OPEN teaches
        async with contextlib.aclosing(client.stream(openssh_peer.remote("f.bin"))) as first:
            head = await anext(first)
            began = time.monotonic()
            with pytest.raises(sshpipe.PoolExhausted, match="queue_timeout") as raised:
                await client.get(openssh_peer.remote("f.bin"), str(openssh_peer.root / "x"))
            assert 0.3 <= time.monotonic() - began < 3
            assert raised.value.retryable and raised.value.exit_code == 11
            assert isinstance(raised.value, sshpipe.TimedOut)
            # One waiting with time to spare gets the channel once it is given back.
            second = asyncio.create_task(
                client.get(openssh_peer.remote("f.bin"), str(openssh_peer.root / "y"))
            )
            await eventually(lambda: "queued=1" in repr(client))
            rest = b"".join([piece async for piece in first])
        assert head + rest == data
        async with asyncio.timeout(5):
            await second
        assert (openssh_peer.root / "y").read_bytes() == data
        assert not (openssh_peer.root / "x").exists()
        assert "busy_channels=0" in repr(client) and "queued" not in repr(client)


def test_the_cli_says_pool_exhausted_in_one_line_with_exit_11(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sshpipe.cli import command
    from sshpipe.cli import main as cli

    async def exhausted(*_: object) -> int:
        raise sshpipe.PoolExhausted("no SFTP channel free for 300 s: ... (queue_timeout)")

    monkeypatch.setattr(command, "_transfer", exhausted)
    monkeypatch.delenv("SSHPIPE_DEBUG", raising=False)
    assert cli.main(["get", "me@example.org:/f", "f"]) == 11
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "queue_timeout" in err, err
