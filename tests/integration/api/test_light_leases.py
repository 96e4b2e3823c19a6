"""Light leases and one log-in at a time, counted through the pool against sshd.

A remote file held open lends its channel to STATs, listings and further
opens (``poolshare``'s light users), so pyarrow's ``isfile`` beside a file it
left open opens no second channel; a transfer still gets channels of its own.
Callers arriving while the first log-in runs take its outcome (``LoginTurns``):
one connection, or one failure heard by all, unless the server only dropped
the connection before the log-in (busy): then each tries itself.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

import sshpipe
from sshpipe.transport.poolshare import LIGHT_SHARE
from tests.support.files import random_file
from tests.support.peers import Peer

KiB = 1024


def _channels(client: sshpipe.Client) -> tuple[int, int]:
    """(idle, busy) channels, as the client's repr shows them."""
    found = re.search(r"idle_channels=(\d+) busy_channels=(\d+)", repr(client))
    assert found is not None, repr(client)
    return int(found[1]), int(found[2])


def _given_back(client: sshpipe.Client) -> tuple[int, int]:
    """(idle or settling, busy): a reader's CLOSE is sent, not awaited, so its
    channel may still be settling (owed that reply) when ``aclose`` returns."""
    idle, busy = _channels(client)
    settling = re.search(r"settling_channels=(\d+)", repr(client))
    return idle + (int(settling[1]) if settling else 0), busy


async def test_metadata_and_further_opens_share_an_open_files_channel(
    openssh_peer: Peer,
) -> None:
    peer = openssh_peer
    a = random_file(peer.root / "a.bin", 300 * KiB)
    b = random_file(peer.root / "b.bin", 5 * KiB)
    async with peer.client() as sp:
        # Held open, as pyarrow leaves its files; no read-ahead left in flight.
        first = await sp.open(peer.remote("a.bin"), read_ahead=0)
        assert await first.read(10) == a[:10]
        assert (await sp.stat(peer.remote("a.bin"))).size == len(a)
        assert await sp.exists(peer.remote("b.bin"))
        assert "a.bin" in await sp.ls(str(peer.root))
        async with sp.open(peer.remote("b.bin")) as second:
            assert await second.read() == b
            assert "shared=1" in repr(sp)
        assert await first.pread(100 * KiB, 10) == a[100 * KiB : 100 * KiB + 10]
        assert _channels(sp) == (0, 1)
        await first.aclose()
        assert _given_back(sp) == (1, 0), repr(sp)  # one channel was ever opened
        assert sp.connections == 1


async def test_a_stat_beside_a_file_with_reads_in_flight_takes_its_own_channel(
    openssh_peer: Peer,
) -> None:
    """Behind megabytes of READs a STAT would wait for them all: it goes beside them."""
    peer = openssh_peer
    data = random_file(peer.root / "big.bin", 4 * 1024 * KiB)
    async with peer.client() as sp, sp.open(peer.remote("big.bin")) as f:
        reading = asyncio.create_task(f.pread(0, len(data)))
        await asyncio.sleep(0)  # its READs are sent, none answered yet
        assert (await sp.stat(peer.remote("big.bin"))).size == len(data)
        assert await reading == data
        assert _channels(sp) == (1, 1) and "shared" not in repr(sp)


async def test_a_transfer_takes_a_channel_of_its_own_beside_an_open_file(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    peer = openssh_peer
    data = random_file(peer.root / "big.bin", 2 * 1024 * KiB)
    config = sshpipe.TransferConfig(channels=1)
    async with peer.client(config) as sp, sp.open(peer.remote("big.bin")) as f:
        await sp.get(peer.remote("big.bin"), tmp_path / "got.bin")
        assert (tmp_path / "got.bin").read_bytes() == data
        assert "shared" not in repr(sp)
        idle, busy = _channels(sp)
        assert busy == 1 and idle >= 1  # the get's went back idle; the file keeps its own
        assert await f.read(4) == data[:4]


async def test_light_users_spread_over_channels_past_their_share(openssh_peer: Peer) -> None:
    peer = openssh_peer
    data = random_file(peer.root / "f.bin", 4 * KiB)
    async with peer.client() as sp:
        files = [await sp.open(peer.remote("f.bin")) for _ in range(LIGHT_SHARE + 1)]
        assert [await f.read() for f in files] == [data] * len(files)
        assert _channels(sp) == (0, 2)
        for f in files:
            await f.aclose()
        assert _given_back(sp) == (2, 0), repr(sp)


async def test_first_calls_at_once_log_in_once(openssh_peer: Peer) -> None:
    peer = openssh_peer
    random_file(peer.root / "f.bin", 1 * KiB)
    sp = peer.client()  # not entered: the STATs are its first calls
    try:
        stats = await asyncio.gather(*(sp.stat(peer.remote("f.bin")) for _ in range(3)))
        assert {st.size for st in stats} == {1 * KiB}
        assert sp.connections == 1
    finally:
        await sp.aclose()


async def test_callers_behind_a_dropped_log_in_each_try_themselves(openssh_peer: Peer) -> None:
    """Three first calls behind a connection dropped before the log-in (sshd's
    MaxStartups: busy now, not refusing): each tries itself, one at a time."""
    accepted = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        client = sshpipe.connect(
            f"{openssh_peer.user}@127.0.0.1",
            port=port,
            identity_files=[str(openssh_peer.client_key)],
            known_hosts=[str(openssh_peer.known_hosts)],
            ssh_config=[],
            # A hang-up before the log-in is tried again within the retries
            # (test_connect_retries): none here, one connection per log-in.
            config=sshpipe.TransferConfig(retries=0),
        )
        async with asyncio.timeout(30):
            calls = (client.stat("/x") for _ in range(3))
            got = await asyncio.gather(*calls, return_exceptions=True)
            assert all(isinstance(e, sshpipe.ConnectDropped) for e in got), got
            assert accepted == 3
            with pytest.raises(sshpipe.ConnectError):
                await client.stat("/x")
            assert accepted == 4
        await client.aclose()
    finally:
        server.close()
        await server.wait_closed()
