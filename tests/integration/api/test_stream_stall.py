"""``stream()`` has the stall timeout and the reconnect every other path has.

A stream is read through the same loop as a download: a server that stops
answering mid-file is a dropped connection after ``stall_timeout``, and a
connection cut mid-file is reopened, the stream going on at the first byte it
has not yielded yet (never yielding a byte twice).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

import sshpipe
from sshpipe.core.errors import Stalled
from sshpipe.testing.faults import DropsConnection, Tracker, TrackingServer, factory
from tests.support.peers import StartServer, write_source

BLOCK = 32 * 1024


class Trickles(TrackingServer):
    """After ``answered`` reads, every reply goes out a byte at a time, 20 a second.

    The session keeps hearing from the server (its own watchdog stays quiet),
    but no reply completes: only the transfer's stall timeout can tell. After
    ``gives_up`` seconds of it the server drops the connection, so a client
    without that timeout fails (with the wrong error, too late) instead of
    hanging the test run.
    """

    answered = 20
    gives_up = 5.0

    def __init__(self, chan: Any, root: Path, tracker: Tracker) -> None:
        super().__init__(chan, root, tracker)
        self._send = chan.write
        self._queue = bytearray()
        self._dripping = False
        self._since = 0.0
        chan.write = self._write  # every SFTP reply is exactly one channel write

    def _write(self, data: bytes, datatype: Any = None) -> None:
        if not self._dripping and self.tracker.reads <= self.answered:
            self._send(data)
            return
        self._queue += data
        if not self._dripping:
            self._dripping = True
            self._since = asyncio.get_running_loop().time()
            self._drip()

    def _drip(self) -> None:
        if self.channel.is_closing() or not self._queue:
            return
        if asyncio.get_running_loop().time() - self._since > self.gives_up:
            self.channel.get_connection().abort()
            return
        self._send(bytes(self._queue[:1]))
        del self._queue[:1]
        asyncio.get_running_loop().call_later(0.05, self._drip)


async def _drain(client: sshpipe.Client, path: str) -> bytes:
    return b"".join([piece async for piece in client.stream(path)])


async def test_a_stream_whose_server_stops_answering_raises_stalled(
    faulty_server: StartServer,
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(Trickles, tracker)) as peer:
        write_source(peer, 4 * 1024 * 1024)
        config = sshpipe.TransferConfig(block_size=BLOCK, stall_timeout=0.5, retries=0)
        async with peer.client(config) as client:
            started = asyncio.get_running_loop().time()
            with pytest.raises(Stalled):
                async with asyncio.timeout(10):  # the guard: a hang fails the test
                    await _drain(client, "/src.bin")
            assert asyncio.get_running_loop().time() - started < Trickles.gives_up
    assert tracker.reads > Trickles.answered  # it really stopped mid-file


class SilentOnce(TrackingServer):
    """Never answers the 20th read (of the first connection): the session stalls."""

    answered = 20

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        if self.tracker.reads == self.answered:
            self.tracker.reads += 1
            return asyncio.Event().wait()  # never answered
        return TrackingServer.read(self, file_obj, offset, size)


async def test_a_stream_whose_server_stops_answering_once_goes_on(
    faulty_server: StartServer,
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(SilentOnce, tracker)) as peer:
        data = write_source(peer, 4 * 1024 * 1024)
        config = sshpipe.TransferConfig(block_size=BLOCK, stall_timeout=0.5)
        async with peer.client(config) as client:
            async with asyncio.timeout(30):
                streamed = await _drain(client, "/src.bin")
    assert hashlib.sha256(streamed).hexdigest() == hashlib.sha256(data).hexdigest()


async def test_a_stream_over_a_cut_connection_reconnects_and_yields_each_byte_once(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    tracker = Tracker()
    async with faulty_server(factory(DropsConnection, tracker)) as peer:
        data = write_source(peer, 4 * 1024 * 1024)
        async with peer.client(sshpipe.TransferConfig(block_size=BLOCK)) as client:
            async with asyncio.timeout(30):
                streamed = await _drain(client, "/src.bin")
    assert tracker.reads > 20  # the cut happened mid-file
    assert len(streamed) == len(data)
    assert hashlib.sha256(streamed).hexdigest() == hashlib.sha256(data).hexdigest()
