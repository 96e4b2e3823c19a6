"""The link emulator as a proxy on 127.0.0.1: timing, integrity under backpressure, faults, CLI.

The target is an in-test asyncio server whose accepted connections the test
drives directly, so each test holds both ends of one proxied connection.

Timing assertions keep the issue's ±10% and stay robust on a loaded 2-core box
by measuring quantities large against scheduling noise (1-2 ms): round trips
of 40 ms and more (median of 9), transfers of about a second, stalls of 0.5 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from sshpipe.testing.linkemu import LinkEmulator, LinkSpec, _pipe, _proxy
from sshpipe.testing.linkemu._model import LinkModel
from sshpipe.testing.linkemu._pipe import _Pipe

# Tests here start the link emulator themselves, not only through fixtures.
pytestmark = pytest.mark.linkemu

TIMEOUT = 10.0


@dataclass
class Pair:
    """The two ends of one connection through the emulator."""

    client_r: asyncio.StreamReader
    client_w: asyncio.StreamWriter
    server_r: asyncio.StreamReader
    server_w: asyncio.StreamWriter


@dataclass
class Target:
    """A loopback server; each accepted connection is handed to the test."""

    rcvbuf: int | None = None
    accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(
        default_factory=asyncio.Queue
    )
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    server: asyncio.Server | None = None
    port: int = 0

    async def start(self) -> None:
        sock = socket.socket()
        if self.rcvbuf is not None:  # inherited by accepted sockets: a small receive window
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.server = await asyncio.start_server(self._on_client, sock=sock)

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        self.accepted.put_nowait((reader, writer))

    async def close(self) -> None:
        for writer in self.writers:
            writer.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@dataclass
class Setup:
    link: LinkEmulator
    target: Target
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def connect(self) -> Pair:
        client_r, client_w = await asyncio.open_connection("127.0.0.1", self.link.port)
        self.writers.append(client_w)
        server_r, server_w = await asyncio.wait_for(self.target.accepted.get(), TIMEOUT)
        return Pair(client_r, client_w, server_r, server_w)


@contextlib.asynccontextmanager
async def emulated(spec: LinkSpec, *, rcvbuf: int | None = None) -> AsyncIterator[Setup]:
    target = Target(rcvbuf=rcvbuf)
    await target.start()
    setup: Setup | None = None
    try:
        async with LinkEmulator("127.0.0.1", target.port, spec) as link:
            setup = Setup(link, target)
            yield setup
    finally:
        if setup is not None:
            for writer in setup.writers:
                writer.close()
        await target.close()


def pattern(size: int) -> bytes:
    return random.Random(size).randbytes(size)


async def read_all(reader: asyncio.StreamReader) -> tuple[bytes, BaseException | None]:
    """Everything until EOF or an error; returns the bytes and the error (None at EOF)."""
    chunks = []
    try:
        while chunk := await reader.read(1 << 20):
            chunks.append(chunk)
    except (ConnectionError, OSError) as exc:
        return b"".join(chunks), exc
    return b"".join(chunks), None


async def wait_until_idle(link: LinkEmulator) -> None:
    deadline = time.monotonic() + TIMEOUT
    # Polling: the emulator has no event for "idle", and tests are all that need one.
    while link.stats.active and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    assert link.stats.active == 0


async def ping_pong(pair: Pair, count: int) -> list[float]:
    """Round trips of one byte each way."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        pair.client_w.write(b"?")
        await asyncio.wait_for(pair.server_r.readexactly(1), TIMEOUT)
        pair.server_w.write(b"!")
        await asyncio.wait_for(pair.client_r.readexactly(1), TIMEOUT)
        times.append(time.perf_counter() - started)
    return times


# -- timing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rtt", [0.04, 0.1])
async def test_round_trip_time(rtt: float) -> None:
    async with emulated(LinkSpec(rtt=rtt, rate=100e6)) as setup:
        pair = await setup.connect()
        median = statistics.median(await ping_pong(pair, 9))
    assert median == pytest.approx(rtt, rel=0.1)


async def test_rate_and_bounded_queue() -> None:
    """8 MB one way at 80 Mbit/s: ~0.8 s from the first byte to the last."""
    rate, size, queue = 80e6, 8_000_000, 256 * 1024
    spec = LinkSpec(rtt=0.02, rate=rate, queue=queue)
    payload = pattern(size)
    async with emulated(spec) as setup:
        pair = await setup.connect()

        async def send() -> None:
            view = memoryview(payload)
            for offset in range(0, size, 256 * 1024):
                pair.client_w.write(view[offset : offset + 256 * 1024])
                await pair.client_w.drain()

        async def receive() -> tuple[float, float, int]:
            first = await pair.server_r.read(1 << 20)
            first_at = time.perf_counter()
            received = len(first)
            while received < size:
                received += len(await pair.server_r.read(1 << 20))
            return first_at, time.perf_counter(), received - len(first)

        async with asyncio.timeout(TIMEOUT), asyncio.TaskGroup() as tasks:
            tasks.create_task(send())
            receiving = tasks.create_task(receive())
        first_at, last_at, after_first = receiving.result()
        peak = setup.link.stats.peak_buffered
    measured = after_first * 8 / (last_at - first_at)
    assert measured == pytest.approx(rate, rel=0.1)
    # The sender was pushed back: the proxy held no more than the queue, one read past
    # it, what is propagating (rate * delay, plus a late timer tick or two) and, since
    # a chunk counts until its last byte is delivered, one more read.
    assert queue < peak <= queue + 2 * 256 * 1024 + rate / 8 * (0.01 + 0.01)


async def test_connections_share_the_link() -> None:
    """Two connections at once get the link's rate between them, not each.

    A real link is shared: a client that opens more connections must not
    find more bandwidth than the link has (sshpipe's uploads do open several).
    """
    rate, size = 80e6, 4_000_000
    payload = pattern(size)
    async with emulated(LinkSpec(rtt=0.02, rate=rate)) as setup:
        pairs = [await setup.connect(), await setup.connect()]

        async def send(pair: Pair) -> None:
            view = memoryview(payload)
            for offset in range(0, size, 256 * 1024):
                pair.client_w.write(view[offset : offset + 256 * 1024])
                await pair.client_w.drain()

        async def receive(pair: Pair) -> float:
            received = 0
            while received < size:
                received += len(await pair.server_r.read(1 << 20))
            return time.perf_counter()

        started = time.perf_counter()
        async with asyncio.timeout(TIMEOUT), asyncio.TaskGroup() as tasks:
            for pair in pairs:
                tasks.create_task(send(pair))
            done = [tasks.create_task(receive(pair)) for pair in pairs]
        elapsed = max(task.result() for task in done) - started
    # 8 MB in all at 80 Mbit/s: 0.8 s plus one delay (each alone would take 0.4 s).
    assert elapsed == pytest.approx(2 * size * 8 / rate + 0.01, rel=0.1)


async def test_one_way_delay_of_a_bulk_stream_is_half_the_rtt() -> None:
    """The first byte of a stream arrives rtt/2 after it was sent."""
    async with emulated(LinkSpec(rtt=0.1)) as setup:
        pair = await setup.connect()
        delays = []
        for _ in range(5):
            started = time.perf_counter()
            pair.client_w.write(b"x" * 1000)
            await pair.server_r.readexactly(1000)
            delays.append(time.perf_counter() - started)
    assert statistics.median(delays) == pytest.approx(0.05, rel=0.1)


# -- integrity and flow control -------------------------------------------------------------


async def test_slow_reader_gets_every_byte_in_order_with_bounded_memory() -> None:
    """A receiver slower than the link: the proxy holds at most its in-flight cap."""
    size = 6 << 20
    spec = LinkSpec(rtt=0.02, rate=400e6, queue=128 * 1024)
    payload = pattern(size)
    async with emulated(spec, rcvbuf=64 * 1024) as setup:
        pair = await setup.connect()

        async def send() -> None:
            pair.client_w.write(payload)
            await pair.client_w.drain()
            pair.client_w.write_eof()

        async def slow_read() -> bytes:
            chunks = []
            while chunk := await pair.server_r.read(64 * 1024):
                chunks.append(chunk)
                await asyncio.sleep(0.004)  # at most 16 MB/s, well below 50 MB/s of link
            return b"".join(chunks)

        async with asyncio.timeout(TIMEOUT), asyncio.TaskGroup() as tasks:
            tasks.create_task(send())
            reading = tasks.create_task(slow_read())
        peak = setup.link.stats.peak_buffered
    assert reading.result() == payload
    cap = LinkModel.from_spec(spec).in_flight_limit
    assert peak <= cap + 256 * 1024  # one read past the cap at most
    assert setup.link.stats.bytes_up == size


async def test_both_directions_at_once() -> None:
    """An echo through the link: what goes up comes back down, whole and in order."""
    size = 2 << 20
    payload = pattern(size)
    async with emulated(LinkSpec(rtt=0.02, rate=200e6, queue=64 * 1024)) as setup:
        pair = await setup.connect()

        async def echo() -> None:
            while chunk := await pair.server_r.read(1 << 16):
                pair.server_w.write(chunk)
                await pair.server_w.drain()
            pair.server_w.write_eof()

        async def send() -> None:
            pair.client_w.write(payload)
            await pair.client_w.drain()
            pair.client_w.write_eof()

        async with asyncio.timeout(TIMEOUT), asyncio.TaskGroup() as tasks:
            tasks.create_task(echo())
            tasks.create_task(send())
            back = tasks.create_task(read_all(pair.client_r))
        assert back.result() == (payload, None)
        await wait_until_idle(setup.link)
        stats = setup.link.stats
    assert (stats.bytes_up, stats.bytes_down, stats.connections) == (size, size, 1)


async def test_eof_travels_after_the_data_and_closes_the_connection() -> None:
    async with emulated(LinkSpec(rtt=0.04)) as setup:
        pair = await setup.connect()
        started = time.perf_counter()
        pair.client_w.write(b"request")
        pair.client_w.write_eof()
        assert await asyncio.wait_for(pair.server_r.read(), TIMEOUT) == b"request"
        assert time.perf_counter() - started >= 0.02 * 0.9
        assert "active=1" in repr(setup.link)
        pair.server_w.write(b"reply")
        pair.server_w.close()
        assert await asyncio.wait_for(pair.client_r.read(), TIMEOUT) == b"reply"
        await wait_until_idle(setup.link)
        assert "active=0" in repr(setup.link)


async def test_unreachable_target_closes_the_client() -> None:
    with socket.socket() as probe:  # a port with nobody listening
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    async with LinkEmulator("127.0.0.1", dead_port, LinkSpec(rtt=0.01)) as link:
        reader, writer = await asyncio.open_connection("127.0.0.1", link.port)
        try:
            data, _error = await asyncio.wait_for(read_all(reader), TIMEOUT)
        finally:
            writer.close()
        assert data == b""
        await wait_until_idle(link)
        assert link.stats.connections == 1


async def test_aclose_aborts_connections_and_leaves_no_task_or_timer() -> None:
    loop = asyncio.get_running_loop()
    tasks_before = asyncio.all_tasks()
    async with emulated(LinkSpec(rtt=0.2, rate=10e6)) as setup:
        pair = await setup.connect()
        pair.client_w.write(b"x" * 100_000)  # still in the delay line at aclose()
        await asyncio.sleep(0.02)
        setup.link.stall(5.0)
        await setup.link.aclose()
        await setup.link.aclose()  # twice is fine
        assert setup.link.stats.active == 0
        data, _error = await asyncio.wait_for(read_all(pair.client_r), TIMEOUT)
        assert data == b""
        assert asyncio.all_tasks() - tasks_before == set()
        scheduled = getattr(loop, "_scheduled", [])  # asyncio's timer heap
        ours = [
            h
            for h in scheduled
            if not h.cancelled() and isinstance(getattr(h._callback, "__self__", None), _Pipe)
        ]
        assert ours == []
        wall = setup.link.stats.wall_seconds
        await asyncio.sleep(0.02)
        assert setup.link.stats.wall_seconds == wall  # stats stop at aclose()


# -- faults ---------------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["down", "up"])
async def test_cut_after_resets_after_exactly_n_bytes(direction: str) -> None:
    limit, size = 100_000, 1 << 20
    payload = pattern(size)
    async with emulated(LinkSpec(rtt=0.02, rate=200e6)) as setup:
        pair = await setup.connect()
        await ping_pong(pair, 1)  # 1 byte each way, counted before the cut is armed
        setup.link.cut_after(limit, direction=direction)
        sender, receiver = (
            (pair.server_w, pair.client_r)
            if direction == "down"
            else (pair.client_w, pair.server_r)
        )
        other_end = pair.client_r if direction == "up" else pair.server_r
        sender.write(payload)
        data, error = await asyncio.wait_for(read_all(receiver), TIMEOUT)
        assert data == payload[:limit]
        assert isinstance(error, ConnectionResetError)
        _, other_error = await asyncio.wait_for(read_all(other_end), TIMEOUT)
        assert isinstance(other_error, ConnectionResetError)  # both sides are reset
        await wait_until_idle(setup.link)

        fresh = await setup.connect()  # one-shot: later connections are unaffected
        fresh.server_w.write(payload)
        assert await asyncio.wait_for(fresh.client_r.readexactly(size), TIMEOUT) == payload
        stats = setup.link.stats
    assert getattr(stats, f"bytes_{direction}") == 1 + limit + (size if direction == "down" else 0)


async def test_cut_gives_up_waiting_for_a_receiver_that_never_takes_the_last_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_proxy, "_CUT_FLUSH_SECONDS", 0.2)
    monkeypatch.setattr(_pipe, "_unsent", lambda transport: 1)  # never flushed
    payload = pattern(1 << 20)
    async with emulated(LinkSpec(rtt=0.02)) as setup:
        pair = await setup.connect()
        setup.link.cut_after(50_000)
        pair.server_w.write(payload)
        started = time.perf_counter()
        data, error = await asyncio.wait_for(read_all(pair.client_r), TIMEOUT)
        waited = time.perf_counter() - started
        await wait_until_idle(setup.link)
    assert data == payload[:50_000]
    assert isinstance(error, ConnectionResetError)
    assert waited >= 0.2


async def test_stall_delivers_nothing_then_everything() -> None:
    stall, tick, period = 0.5, 100, 0.01
    async with emulated(LinkSpec(rtt=0.02, rate=100e6)) as setup:
        pair = await setup.connect()
        arrivals: dict[str, list[float]] = {"up": [], "down": []}
        stalled_at = 0.0

        async def ticker(writer: asyncio.StreamWriter, count: int) -> None:
            for _ in range(count):
                writer.write(b"t" * tick)
                await asyncio.sleep(period)
            writer.write_eof()

        async def record(reader: asyncio.StreamReader, name: str) -> int:
            received = 0
            while chunk := await reader.read(1 << 16):
                received += len(chunk)
                arrivals[name].append(time.perf_counter())
            return received

        async def fault() -> None:
            nonlocal stalled_at
            await asyncio.sleep(0.2)
            stalled_at = time.perf_counter()
            setup.link.stall(stall)

        count = int(0.9 / period)
        async with asyncio.timeout(TIMEOUT), asyncio.TaskGroup() as tasks:
            tasks.create_task(ticker(pair.client_w, count))
            tasks.create_task(ticker(pair.server_w, count))
            up = tasks.create_task(record(pair.server_r, "up"))
            down = tasks.create_task(record(pair.client_r, "down"))
            tasks.create_task(fault())
    assert up.result() == down.result() == count * tick  # nothing lost
    for name, times in arrivals.items():
        gaps = [(b - a, a) for a, b in itertools.pairwise(times)]
        longest, began = max(gaps)
        assert longest == pytest.approx(stall, rel=0.1), name
        assert -0.03 < began - stalled_at < 0.01, name  # the silence is the stall's


async def test_a_receiver_reset_during_a_stall_breaks_the_connection_quietly() -> None:
    # While the link is stalled the target sends more and ends its side, and the
    # client resets its own (a close with bytes unread sends RST). When the
    # stall ends the emulator writes the held bytes and the EOF to a socket
    # already reset: that write_eof() raised ENOTCONN out of the pipe's timer.
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        async with emulated(LinkSpec(rtt=0.02)) as setup:
            pair = await setup.connect()
            pair.server_w.write(b"unread by the client")
            await asyncio.sleep(0.05)
            setup.link.stall(0.3)
            pair.server_w.write(b"held by the stall")
            pair.server_w.write_eof()
            await asyncio.sleep(0.01)
            pair.client_w.close()  # bytes unread: RST
            await asyncio.sleep(0.4)  # the stall ends
            await wait_until_idle(setup.link)
            data, _error = await asyncio.wait_for(read_all(pair.server_r), TIMEOUT)
            assert data == b""  # the target's side is closed too, not left open
    finally:
        loop.set_exception_handler(None)
    assert reported == []


@pytest.mark.parametrize("direction", ["down", "up"])
async def test_close_direction_half_closes(direction: str) -> None:
    async with emulated(LinkSpec(rtt=0.04)) as setup:
        pair = await setup.connect()
        closed_w, closed_r, open_w, open_r = (
            (pair.server_w, pair.client_r, pair.client_w, pair.server_r)
            if direction == "down"
            else (pair.client_w, pair.server_r, pair.server_w, pair.client_r)
        )
        closed_w.write(b"queued")
        await asyncio.sleep(0.005)  # read by the proxy, still propagating
        setup.link.close_direction(direction)
        assert await asyncio.wait_for(closed_r.read(), TIMEOUT) == b"queued"  # then EOF
        closed_w.write(b"too late")  # dropped: its receiver saw EOF already
        open_w.write(b"still works")
        assert await asyncio.wait_for(open_r.readexactly(11), TIMEOUT) == b"still works"
        open_w.write_eof()
        assert await asyncio.wait_for(open_r.read(), TIMEOUT) == b""
        await wait_until_idle(setup.link)  # both directions ended: closed


# -- the command line -----------------------------------------------------------------------

CLI = [sys.executable, "-m", "sshpipe.testing.linkemu"]


async def start_cli(*args: str) -> tuple[asyncio.subprocess.Process, int]:
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), TIMEOUT)).decode()
    assert line.startswith("listening on 127.0.0.1:"), line
    return proc, int(line.rsplit(":", 1)[1])


async def stop_cli(proc: asyncio.subprocess.Process) -> dict[str, float]:
    proc.send_signal(signal.SIGTERM)
    out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    assert proc.returncode == 0, err
    assert err == b""
    lines = out.decode().splitlines()
    assert len(lines) == 1
    stats: dict[str, float] = json.loads(lines[0])
    return stats


async def test_cli_runs_a_link_and_reports_stats() -> None:
    target = Target()
    await target.start()
    proc, port = await start_cli(
        "--listen", "127.0.0.1:0", "--target", f"127.0.0.1:{target.port}",
        "--rtt", "40", "--rate", "100", "--queue", "1M",
    )  # fmt: skip
    try:
        client_r, client_w = await asyncio.open_connection("127.0.0.1", port)
        server_r, server_w = await asyncio.wait_for(target.accepted.get(), TIMEOUT)
        pair = Pair(client_r, client_w, server_r, server_w)
        median = statistics.median(await ping_pong(pair, 9))  # uvloop's millisecond clock
        payload = pattern(1 << 20)
        server_w.write(payload)
        assert await asyncio.wait_for(client_r.readexactly(len(payload)), TIMEOUT) == payload
        client_w.close()
        stats = await stop_cli(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await target.close()
    assert median == pytest.approx(0.04, rel=0.1)
    assert stats["bytes_up"] == 9
    assert stats["bytes_down"] == 9 + len(payload)
    assert stats["connections"] == 1
    assert stats["wall_seconds"] > 0.3
    assert 0 < stats["cpu_seconds"] < stats["wall_seconds"]
    assert stats["cpu_share"] == pytest.approx(
        stats["cpu_seconds"] / stats["wall_seconds"], abs=1e-3
    )


async def test_cli_cut_after() -> None:
    target = Target()
    await target.start()
    proc, port = await start_cli(
        "--target", f"127.0.0.1:{target.port}", "--cut-after", "1K", "--cut-direction", "up"
    )
    try:
        _client_r, client_w = await asyncio.open_connection("127.0.0.1", port)
        server_r, _server_w = await asyncio.wait_for(target.accepted.get(), TIMEOUT)
        client_w.write(b"u" * 5000)
        data, error = await asyncio.wait_for(read_all(server_r), TIMEOUT)
        client_w.close()
        stats = await stop_cli(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await target.close()
    assert data == b"u" * 1024
    assert isinstance(error, ConnectionResetError)
    assert stats["bytes_up"] == 1024


@pytest.mark.parametrize(
    "args",
    [
        [],  # no --target
        ["--target", "nowhere"],
        ["--target", "127.0.0.1:99999"],
        ["--target", "127.0.0.1:22", "--rtt", "-5"],
        ["--target", "127.0.0.1:22", "--rate", "0"],
        ["--target", "127.0.0.1:22", "--queue", "lots"],
        ["--target", "127.0.0.1:22", "--queue", "0"],
        ["--target", "127.0.0.1:22", "--stall-at", "1"],
        ["--target", "127.0.0.1:22", "--cut-direction", "sideways"],
    ],
)
def test_cli_bad_arguments(args: list[str]) -> None:
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr
