"""A client's life (issue 20, part 8): nested ``async with``, one event loop, no stall.

Against the embedded server; every byte compared.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import sshpipe
from tests.support.files import random_file
from tests.support.fresh import run_fresh
from tests.support.peers import Peer


async def test_nested_async_with_closes_at_the_outermost_exit(
    asyncssh_peer: Peer, tmp_path: Path
) -> None:
    data = random_file(asyncssh_peer.root / "a.bin", 70_001)
    client = asyncssh_peer.client()
    async with client:
        async with client as inner:
            assert inner is client
            await client.get(asyncssh_peer.remote("a.bin"), tmp_path / "one.bin")
        assert client.connections == 1  # the inner exit left it open
        await client.get(asyncssh_peer.remote("a.bin"), tmp_path / "two.bin")
        assert repr(client).startswith("<Client 127.0.0.1 open connections=1")
    assert repr(client).startswith("<Client 127.0.0.1 closed connections=0")
    assert (tmp_path / "one.bin").read_bytes() == data == (tmp_path / "two.bin").read_bytes()
    # Closed for good, as an httpx client: neither a new block nor a transfer reopens it.
    with pytest.raises(sshpipe.ClosedError):
        async with client:
            pass
    with pytest.raises(sshpipe.ClosedError):
        await client.get(asyncssh_peer.remote("a.bin"), tmp_path / "three.bin")
    assert not (tmp_path / "three.bin").exists()


async def test_tasks_entering_at_once_share_one_connection(asyncssh_peer: Peer) -> None:
    client = asyncssh_peer.client()
    entered = asyncio.Event()

    async def user() -> int:
        async with client:
            entered.set()
            await asyncio.sleep(0)
            return client.connections

    async with asyncio.TaskGroup() as tg:
        users = [tg.create_task(user()) for _ in range(3)]
    assert [task.result() for task in users] == [1, 1, 1]
    assert entered.is_set() and "closed" in repr(client)


def test_a_client_closed_before_use_stays_closed() -> None:
    client = sshpipe.connect("nobody@127.0.0.1", port=1)
    asyncio.run(client.aclose())
    assert repr(client).startswith("<Client 127.0.0.1 closed")
    with pytest.raises(sshpipe.ClosedError):
        asyncio.run(client.open())


async def test_a_client_used_from_another_loop_says_so(asyncssh_peer: Peer, tmp_path: Path) -> None:
    """A second asyncio.run() (here in a thread: this test's loop is running) is refused."""
    data = random_file(asyncssh_peer.root / "a.bin", 10_000)
    remote = asyncssh_peer.remote("a.bin")
    async with asyncssh_peer.client() as client:
        await client.get(remote, tmp_path / "first.bin")

        def elsewhere() -> None:
            asyncio.run(client.get(remote, tmp_path / "elsewhere.bin"))

        with pytest.raises(sshpipe.UsageError, match="another event loop"):
            await asyncio.to_thread(elsewhere)
        with pytest.raises(sshpipe.UsageError, match="another event loop"):
            await asyncio.to_thread(asyncio.run, client.glob("/*"))
        # Refused before it touched anything: the client goes on here.
        await client.get(remote, tmp_path / "again.bin")
    assert (tmp_path / "again.bin").read_bytes() == data
    assert not (tmp_path / "elsewhere.bin").exists()


def test_the_engine_is_imported_off_the_event_loop() -> None:
    """asyncssh and the engine (0.3 s and more of imports) load in a worker thread.

    ``sshpipe.connect()`` itself loads neither; the client's first use imports
    them in a thread while the loop keeps ticking.
    """
    result = run_fresh("""
        import asyncio, json, sys, threading, time
        import sshpipe

        where = {}

        class Recorder:
            def find_spec(self, name, path=None, target=None):
                if name in ("asyncssh", "sshpipe.client.engine"):
                    where[name] = threading.current_thread() is threading.main_thread()
                return None

        sys.meta_path.insert(0, Recorder())

        async def main():
            client = sshpipe.connect("nobody@127.0.0.1", port=1, ssh_config=[])
            before = "asyncssh" in sys.modules
            ticks = 0
            async def tick():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.001)
                    ticks += 1
            ticker = asyncio.ensure_future(tick())
            try:
                await client.open()
            except sshpipe.ConnectError:
                pass
            ticker.cancel()
            return before, ticks

        before, ticks = asyncio.run(main())
        print(json.dumps({"before": before, "where": where, "ticks": ticks}))
    """)
    assert result["before"] is False  # connect() loaded none of it
    # Loaded, and not in the main thread:
    assert result["where"] == {
        "sshpipe.client.engine": False,
        "asyncssh": False,
    }  # not the main thread
    assert result["ticks"] > 0  # the loop ran while they loaded


async def test_keys_ssh_config_and_known_hosts_are_read_off_the_event_loop(
    asyncssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A passphrase's KDF or an RSA key's checks take 0.3 s: not on the caller's loop."""
    import threading

    import asyncssh

    stock = asyncssh.SSHClientConnectionOptions
    on_loop_thread: list[bool] = []

    def recording(*args: object, **kwargs: object) -> asyncssh.SSHClientConnectionOptions:
        on_loop_thread.append(threading.current_thread() is threading.main_thread())
        return stock(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncssh, "SSHClientConnectionOptions", recording)
    data = random_file(asyncssh_peer.root / "a.bin", 5000)
    async with asyncssh_peer.client() as client:
        await client.get(asyncssh_peer.remote("a.bin"), tmp_path / "a.bin")
    assert (tmp_path / "a.bin").read_bytes() == data
    assert on_loop_thread == [False]
