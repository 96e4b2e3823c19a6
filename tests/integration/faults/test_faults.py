"""The engine against an in-process asyncssh server that misbehaves on purpose.

Each fault (``sshpipe.testing.faults``) is a subclass of ``asyncssh.SFTPServer``
(or a wrapper around its channel) so the bytes cross a real SSH connection;
every result is compared byte for byte, every failure is checked for what it
leaves behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

import sshpipe
from sshpipe.core import flowcontrol
from sshpipe.testing.faults import (
    BLOCK,
    DropsConnection,
    DropsConnectionOnWrite,
    FailsReadAt,
    FailsWriteAt,
    Grows,
    OverlongReads,
    Reordering,
    ShortReads,
    Shrinks,
    Slow,
    SlowShortReads,
    Tracker,
    factory,
)
from tests.support.cli import run_cli_async
from tests.support.files import leftover_temps
from tests.support.peers import Peer, StartServer, write_source
from tests.support.waits import eventually


@pytest.mark.parametrize("requests", [128, 3, 1])
async def test_short_reads_are_reissued_for_exactly_the_missing_range(
    faulty_server: StartServer, tmp_path: Path, requests: int
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(ShortReads, tracker)) as peer:
        data = write_source(peer, 300_001)
        config = sshpipe.TransferConfig(requests=requests, block_size=BLOCK)
        async with peer.client(config) as client:
            stats = await client.get("/src.bin", str(tmp_path / "out.bin"))
            streamed = b"".join([piece async for piece in client.stream("/src.bin")])
    assert (tmp_path / "out.bin").read_bytes() == data
    assert streamed == data
    assert stats.short_reads_reissued > 50
    assert stats.requests == tracker.reads // 2  # the stream read it all once more
    # A finished read's CLOSE is sent, not waited for: the server closes the
    # handle when it gets there, or when the session ends.
    await eventually(lambda: tracker.open_handles == 0)


async def test_a_stream_finishes_when_the_budget_is_cut_below_the_pieces_it_holds(
    faulty_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seen in CI: on a loaded machine the log-in RTT passed LAN_RTT, so the
    # flow controller had no LAN floor and cut the budget of a slow server's
    # stream to a block or two, below the pieces it held behind a short
    # read's hole. Nothing was in flight, nothing freed the budget: it hung.
    monkeypatch.setattr(flowcontrol, "LAN_RTT", 0.0)
    async with faulty_server(factory(SlowShortReads, Tracker())) as peer:
        data = write_source(peer, 300_001)
        config = sshpipe.TransferConfig(requests=1, block_size=BLOCK)
        async with peer.client(config) as client:
            await client.get("/src.bin", str(tmp_path / "out.bin"))  # grows the pool's channels
            assert (tmp_path / "out.bin").read_bytes() == data
            for _ in range(3):
                async with asyncio.timeout(20):
                    streamed = [piece async for piece in client.stream("/src.bin")]
                assert b"".join(streamed) == data


async def test_replies_in_any_order_are_reassembled_by_offset(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(Reordering, tracker)) as peer:
        data = write_source(peer, 3 * 1024 * 1024 + 333)
        async with peer.client(sshpipe.TransferConfig(block_size=BLOCK)) as client:
            await client.get("/src.bin", str(tmp_path / "out.bin"))
            streamed = b"".join([piece async for piece in client.stream("/src.bin")])
            await client.put(str(tmp_path / "out.bin"), "/up.bin")
    assert tracker.reordered > 100  # the fault really happened
    assert (tmp_path / "out.bin").read_bytes() == data
    assert streamed == data
    assert (peer.root / "up.bin").read_bytes() == data


async def test_slow_server_still_gets_many_requests_in_flight(
    faulty_server: StartServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loopback is a LAN, floor and all, however loaded the machine: seen in CI,
    # a set-up round trip of ~5 ms took it for a WAN, whose first guess (1 Gbit/s
    # x RTT) held 20 requests of the 65.
    monkeypatch.setattr(flowcontrol, "LAN_RTT", 1.0)
    tracker = Tracker()
    async with faulty_server(factory(Slow, tracker)) as peer:
        data = write_source(peer, 2 * 1024 * 1024)
        async with peer.client(sshpipe.TransferConfig(block_size=BLOCK)) as client:
            stats = await client.get("/src.bin", str(tmp_path / "out.bin"))
    assert (tmp_path / "out.bin").read_bytes() == data
    assert stats.peak_requests_in_flight == 65  # every block of the file, plus the EOF probe


# -- files that change under us ------------------------------------------------


@pytest.mark.parametrize("requests", [1, 128])
async def test_file_truncated_mid_transfer_ends_where_the_server_says(
    faulty_server: StartServer, tmp_path: Path, requests: int
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(Shrinks, tracker)) as peer:
        data = write_source(peer, 1_000_000)
        config = sshpipe.TransferConfig(block_size=BLOCK, requests=requests)
        async with peer.client(config) as client:
            stats = await client.get("/src.bin", str(tmp_path / "out.bin"))
    assert stats.size_changed
    assert stats.bytes == Shrinks.keep
    assert (tmp_path / "out.bin").read_bytes() == data[: Shrinks.keep]


@pytest.mark.parametrize("requests", [1, 128])
async def test_file_that_grows_mid_transfer_is_read_to_its_new_end(
    faulty_server: StartServer, tmp_path: Path, requests: int
) -> None:
    tracker = Tracker()
    extra = os.urandom(5 * BLOCK + 17)
    async with faulty_server(factory(Grows, tracker, extra=extra)) as peer:
        data = write_source(peer, 200_000)
        config = sshpipe.TransferConfig(block_size=BLOCK, requests=requests)
        async with peer.client(config) as client:
            stats = await client.get("/src.bin", str(tmp_path / "out.bin"))
    assert stats.size_changed
    assert (tmp_path / "out.bin").read_bytes() == data + extra


@pytest.mark.parametrize("fault", [Grows, Shrinks], ids=["grows", "shrinks"])
async def test_a_get_of_a_file_that_changed_size_says_so_once_and_exits_0(
    faulty_server: StartServer, tmp_path: Path, fault: type[Grows] | type[Shrinks]
) -> None:
    """The copy is what the server sent (exit 0, as documented), and the user is told:
    one warning line, the summary, and --json's ``size_changed``."""
    tracker = Tracker()
    extra = os.urandom(3 * BLOCK)
    async with faulty_server(factory(fault, tracker, extra=extra)) as peer:
        write_source(peer, 200_000)
        done = await run_cli_async(
            "get", "-B", str(BLOCK), *peer.cli_options(), peer.spec("src.bin"), str(tmp_path / "f")
        )
    assert done.returncode == 0, done.stderr
    final = 200_000 + len(extra) if fault is Grows else Shrinks.keep
    how = "grew" if fault is Grows else "shrank"
    assert done.stderr == (
        f"sshpipe: /src.bin {how} while it was copied from 200000 to {final} bytes: "
        "the copy holds what the server sent then\n"
    )
    assert "; the source changed size while it was read" in done.stdout, done.stdout
    assert (tmp_path / "f").stat().st_size == final


# -- failures: one clear error, nothing left behind ----------------------------


@pytest.mark.parametrize("channels", [1, 2])
async def test_failed_read_names_path_offset_and_reason_and_leaves_nothing(
    faulty_server: StartServer, tmp_path: Path, channels: int
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(FailsReadAt, tracker)) as peer:
        write_source(peer, 2 * 1024 * 1024)
        (tmp_path / "out.bin").write_bytes(b"previous version")
        config = sshpipe.TransferConfig(block_size=BLOCK, channels=channels)
        async with peer.client(config) as client:
            with pytest.raises(sshpipe.RemoteError) as caught:
                await client.get("/src.bin", str(tmp_path / "out.bin"))
            assert tracker.open_handles == 0
    error = caught.value
    assert (error.path, error.offset, error.reason) == (
        "/src.bin",
        10 * BLOCK,
        "injected read failure",
    )
    assert str(error) == f"remote: /src.bin at offset {10 * BLOCK}: injected read failure"
    assert (tmp_path / "out.bin").read_bytes() == b"previous version"  # untouched
    assert leftover_temps(tmp_path) == []


async def test_failed_write_removes_the_remote_temp_and_keeps_the_old_file(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    tracker = Tracker()
    source = tmp_path / "src.bin"
    source.write_bytes(os.urandom(2 * 1024 * 1024))
    async with faulty_server(factory(FailsWriteAt, tracker)) as peer:
        (peer.root / "dest.bin").write_bytes(b"old")
        async with peer.client(sshpipe.TransferConfig(block_size=BLOCK)) as client:
            with pytest.raises(sshpipe.RemoteError, match="No space left on device") as caught:
                await client.put(str(source), "/dest.bin")
        assert caught.value.offset == 10 * BLOCK
        assert (peer.root / "dest.bin").read_bytes() == b"old"
        assert leftover_temps(peer.root) == []
        assert tracker.open_handles == 0


async def test_reply_longer_than_the_request_is_a_protocol_error(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(OverlongReads, tracker)) as peer:
        write_source(peer, 1024 * 1024)
        async with peer.client(sshpipe.TransferConfig(block_size=BLOCK)) as client:
            with pytest.raises(
                sshpipe.ProtocolError, match="returned 32778 bytes for a read of 32768"
            ):
                await client.get("/src.bin", str(tmp_path / "out.bin"))
    assert not (tmp_path / "out.bin").exists()
    assert leftover_temps(tmp_path) == []


async def test_connection_dropped_mid_transfer_raises_broken_and_commits_nothing(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(DropsConnection, tracker)) as peer:
        write_source(peer, 4 * 1024 * 1024)
        no_retries = sshpipe.TransferConfig(block_size=BLOCK, retries=0)
        async with peer.client(no_retries) as client:
            with pytest.raises(sshpipe.ConnectionBroken) as caught:
                await client.get("/src.bin", str(tmp_path / "out.bin"))
    assert caught.value.retryable
    assert not (tmp_path / "out.bin").exists()
    assert leftover_temps(tmp_path) == []


async def test_a_dropped_upload_reopens_its_temp_file_and_resends_only_the_unacknowledged(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    tracker = Tracker()
    data = os.urandom(4 * 1024 * 1024)
    (tmp_path / "up.bin").write_bytes(data)
    async with faulty_server(factory(DropsConnectionOnWrite, tracker)) as peer:
        (peer.root / "up.bin").write_bytes(b"the old file")
        async with peer.client(sshpipe.TransferConfig(block_size=BLOCK)) as client:
            stats = await client.put(str(tmp_path / "up.bin"), "/up.bin")
    assert (peer.root / "up.bin").read_bytes() == data
    assert stats.reconnects == 1
    assert tracker.writes < len(data) // BLOCK + 128 + 2  # not the whole file again
    assert leftover_temps(tmp_path, peer.root) == []


async def test_a_stream_upload_cannot_be_resent_and_fails_cleanly(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    async def chunks() -> Any:
        for _ in range(64):
            yield os.urandom(64 * 1024)

    config = sshpipe.TransferConfig(block_size=BLOCK)
    async with (
        faulty_server(factory(DropsConnectionOnWrite, Tracker())) as peer,
        peer.client(config) as client,
    ):
        with pytest.raises(sshpipe.ConnectionBroken):
            await client.put_stream(chunks(), "/stream.bin")
    assert not (peer.root / "stream.bin").exists()


async def test_a_dropped_connection_is_reopened_and_only_the_rest_is_read(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(DropsConnection, tracker)) as peer:
        data = write_source(peer, 4 * 1024 * 1024)
        async with peer.client(sshpipe.TransferConfig(block_size=BLOCK)) as client:
            stats = await client.get("/src.bin", str(tmp_path / "out.bin"))
            assert client.connections == 1  # the dead one was let go
    assert (tmp_path / "out.bin").read_bytes() == data
    assert stats.reconnects == 1
    # Nothing was read twice but what was in flight when it dropped (< 128 requests).
    assert tracker.reads < len(data) // BLOCK + 128 + 2
    assert leftover_temps(tmp_path) == []


async def test_remote_errors_by_cause(peer: Peer, tmp_path: Path) -> None:
    (peer.root / "adir").mkdir()
    (tmp_path / "local.bin").write_bytes(b"x")
    async with peer.client() as client:
        with pytest.raises(sshpipe.RemoteNotFound):
            await client.get(peer.remote("missing.bin"), str(tmp_path / "x"))
        with pytest.raises(sshpipe.RemoteIsADirectory):
            await client.get(peer.remote("adir"), str(tmp_path / "x"))
        with pytest.raises(sshpipe.RemoteNotFound) as caught:
            await client.put(str(tmp_path / "local.bin"), peer.remote("no/such/dir/x"))
        assert caught.value.path == peer.remote("no/such/dir/x")  # not our temp name
        with pytest.raises(sshpipe.LocalError, match="No such file"):
            await client.put(str(tmp_path / "missing"), peer.remote("x"))
        with pytest.raises(sshpipe.LocalError, match="is a directory"):
            await client.put(str(tmp_path), peer.remote("x"))
        # scp semantics: into an existing directory, the name is kept.
        await client.put(str(tmp_path / "local.bin"), peer.remote("adir"))
        await client.get(peer.remote("adir/local.bin"), str(tmp_path / "sub"))  # new name
        (tmp_path / "into").mkdir()
        await client.get(peer.remote("adir/local.bin"), str(tmp_path / "into"))
    assert (peer.root / "adir" / "local.bin").read_bytes() == b"x"
    assert (tmp_path / "sub").read_bytes() == b"x"
    assert (tmp_path / "into" / "local.bin").read_bytes() == b"x"
    assert leftover_temps(tmp_path, peer.root) == []


# -- cancellation ----------------------------------------------------------------


@pytest.mark.parametrize("direction", ["get", "put", "stream"])
@pytest.mark.parametrize("after_reads", [0, 1, 30])  # reads, or writes for put
async def test_cancel_at_any_point_leaves_no_task_handle_or_partial(
    faulty_server: StartServer, tmp_path: Path, direction: str, after_reads: int
) -> None:
    tracker = Tracker()
    local = tmp_path / "local.bin"
    local.write_bytes(os.urandom(4 * 1024 * 1024))
    async with faulty_server(factory(Slow, tracker)) as peer:
        write_source(peer, 4 * 1024 * 1024)
        async with peer.client(sshpipe.TransferConfig(block_size=BLOCK)) as client:
            await client.get("/src.bin", str(tmp_path / "warm.bin"))  # channel now pooled
            tracker.reads = 0
            baseline = asyncio.all_tasks()

            async def transfer() -> None:
                if direction == "get":
                    await client.get("/src.bin", str(tmp_path / "out.bin"))
                elif direction == "put":
                    await client.put(str(local), "/up.bin")
                else:
                    # aclosing: a cancelled ``async for`` leaves the generator to the
                    # garbage collector; closing it is the caller's part (PEP 525).
                    async with contextlib.aclosing(client.stream("/src.bin")) as pieces:
                        async for _ in pieces:
                            await asyncio.sleep(0)

            task = asyncio.create_task(transfer())
            for _ in range(10_000):
                done = tracker.writes if direction == "put" else tracker.reads
                if done >= after_reads and (after_reads or tracker.open_handles):
                    break
                await asyncio.sleep(0.0005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert asyncio.all_tasks() - baseline == set()
            # The CLOSEs were sent, not waited for: their channels settle in the pool.
            assert await client._pool._settling.wait(10.0) == 0
            assert tracker.open_handles == 0
            # The client is still usable afterwards.
            await client.get("/src.bin", str(tmp_path / "after.bin"))
    assert leftover_temps(tmp_path, peer.root) == []
    assert not (tmp_path / "out.bin").exists()
    assert not (peer.root / "up.bin").exists()
