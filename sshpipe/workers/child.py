"""A worker process: ``python -m sshpipe.workers.child``, started by ``crew``.

It reads a ``Hello`` on stdin and logs in at once (while the parent plans),
then its ``Job``; it copies the job's ranges with the engine's own read loop
(get: pwrite into the partial file it inherited) or write pump (put: pread
from the source, WRITE at the same offsets into the parent's temporary file),
reporting ``Moved`` counts, then ``Done`` or ``Failed``, as frames on stdout.
The end of its stdin is the parent going away (or cancelling): it stops then.
It never renames, removes, or journals anything: those are the parent's.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import BinaryIO

from ..client.client import Client
from ..core import codec
from ..core.errors import IntegrityError
from ..core.identity import change
from ..core.readplan import ReadPlan
from ..core.retry import RetryBudget
from ..core.stripes import others
from ..local.source import LocalSource
from ..local.target import InlineWriter
from ..transfer.blocksource import FileBlocks
from ..transfer.channelspec import channel_spec
from ..transfer.lanes import sizing_for
from ..transfer.readpump import ReadPump, reading
from ..transfer.retrying import Retrying
from ..transfer.sending import Sending
from ..transfer.writepump import WritePump
from . import wire

# A report at most this often: the parent's progress display ticks at 10 Hz.
REPORT_EVERY = 0.1


def _read_frame(stream: BinaryIO) -> object | None:
    header = stream.read(wire.HEADER)
    if len(header) < wire.HEADER:
        return None
    length = wire.length_of(header)
    data = stream.read(length)
    if len(data) < length:
        return None
    message: object = pickle.loads(data)  # from our parent: see ``wire``
    return message


class _Reports:
    """What the worker has moved since its last report, sent at most every ``REPORT_EVERY``."""

    def __init__(self, out: int) -> None:
        self.out = out
        self.count = 0
        self.journal: list[tuple[int, int, str]] = []
        self._last = 0.0

    def send(self, message: object) -> None:
        data = wire.frame(message)
        while data:  # a few KiB, to a parent that always reads: blocking is brief
            data = data[os.write(self.out, data) :]

    def moved(self, count: int) -> None:
        self.count += count
        now = time.monotonic()
        if now - self._last >= REPORT_EVERY:
            self.flush()
            self._last = now

    def written(self, batch: list[tuple[int, list[bytes | memoryview]]]) -> None:
        """The get's ``after_write``: each range's SHA-256 for the parent's journal."""
        for offset, chunks in batch:
            digest = hashlib.sha256()
            for chunk in chunks:
                digest.update(chunk)
            self.journal.append((offset, sum(len(c) for c in chunks), digest.hexdigest()))

    def flush(self) -> None:
        if self.count or self.journal:
            self.send(wire.Moved(self.count, tuple(self.journal)))
            self.count, self.journal = 0, []

    # The Tally protocol, for the put's sending (a put's counts are acknowledgements).
    def kept(self, count: int) -> None:
        """Nothing is kept by a worker: the parent counted it."""

    def sized(self, size: int | None) -> None:
        """The parent told the display the size."""


async def _get(client: Client, job: wire.Job, reports: _Reports) -> wire.Done:
    config = client.config
    pool = await client._ready()
    have = others(job.size, list(job.ranges))

    def plan_for(attrs: codec.Attrs, block: int) -> ReadPlan:
        if attrs.size != job.size:
            raise IntegrityError(
                job.remote, f"changed size while it was copied ({job.size} -> {attrs.size} bytes)"
            )
        return ReadPlan.resuming(block_size=block, size=job.size, have=have)

    current: list[ReadPump] = []

    def on_written(count: int, error: BaseException | None) -> None:
        current[-1].on_written(count, error)

    started = time.perf_counter()
    writer = InlineWriter(
        job.fd, Path(job.local), on_written, reports.written if job.journal else None
    )
    async with pool.lease(channel_spec(config)) as lease:
        retry = Retrying(lease, RetryBudget(attempts=config.retries), path=job.remote)
        plan: ReadPlan | None = None
        pump: ReadPump | None = None

        def received() -> int:
            return plan.received if plan is not None else 0

        async for attempt in retry.attempts(received):
            with attempt:
                async with reading(lease, job.remote, config, plan=plan, plan_for=plan_for) as pump:
                    current.append(pump)
                    pump.on_moved = reports.moved
                    plan = pump.plan
                    async for batch in pump.arrivals():
                        count = sum(length for _, _, length in batch)
                        pump.unwritten += count
                        writer.submit([(offset, chunks) for offset, chunks, _ in batch], count)
        assert plan is not None and pump is not None
        stats = pump.stats(started, plan.final_size, lease)
        return wire.Done(stats, plan.final_size)


async def _put(client: Client, job: wire.Job, reports: _Reports) -> wire.Done:
    config = client.config
    pool = await client._ready()
    source = LocalSource(job.local)
    source.open()
    try:
        # Opened by name: the file the parent opened, as it was then, or nothing.
        assert job.identity is not None and source.identity is not None
        changed = change(job.identity, source.identity)
        if changed is not None:
            raise IntegrityError(job.local, f"changed while it was uploaded: {changed}")
        started = time.perf_counter()
        async with pool.lease(channel_spec(config)) as lease:
            sizing = await sizing_for(config, lease.channels[0], write=True)
            blocks = FileBlocks(source, in_thread=False)
            sending = Sending(config, sizing, blocks, job.size, source.mode, None, None, reports)
            sending.skip(others(job.size, list(job.ranges)))
            retry = Retrying(lease, RetryBudget(attempts=config.retries), path=job.shown)

            async def send() -> object:
                return await sending.attempt(lease, job.remote, job.shown, codec.FXF_WRITE)

            pump = await retry.run(send, progress=lambda: sending.acked)
            assert isinstance(pump, WritePump)
            return wire.Done(pump.stats(started, lease), job.size)
    finally:
        source.close()


async def _work(hello: wire.Hello, stdin: BinaryIO, reports: _Reports) -> None:
    client = Client(hello.connect, hello.config)
    async with client:
        await client._ready()
        job = await asyncio.to_thread(_read_frame, stdin)  # meanwhile the log-in goes on
        if not isinstance(job, wire.Job):
            return  # the parent went away before it had a job for us
        _stop_at_eof(stdin, asyncio.current_task())
        done = await (_get if job.direction == "get" else _put)(client, job, reports)
        reports.flush()
        reports.send(done)


def _stop_at_eof(stdin: BinaryIO, task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` when stdin ends: the parent cancelled us or is gone."""
    loop = asyncio.get_running_loop()

    def watch() -> None:
        stdin.read()  # nothing more is sent: this returns at EOF
        if task is not None:
            loop.call_soon_threadsafe(task.cancel)

    threading.Thread(target=watch, name="sshpipe-worker-eof", daemon=True).start()


def _runner() -> Callable[[Coroutine[object, object, None]], None]:
    """uvloop's run where it is installed (the CLI's loop), else asyncio's."""
    try:
        # Here, not at the top: it is optional, and only the worker's own run wants it.
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def main() -> None:
    # A SIGINT sent to our group anyway (``crew`` puts us in one of our own):
    # the parent alone decides (it cancels, and ends us), so its exit code and
    # message are the single process's, never a worker's "interrupted".
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, never into the frames
    reports = _Reports(out)
    stdin = sys.stdin.buffer
    code = 0
    try:
        hello = _read_frame(stdin)
        if not isinstance(hello, wire.Hello):
            os._exit(2)
        _runner()(_work(hello, stdin, reports))
    except Exception as exc:  # every failure goes to the parent, as one line
        reports.send(wire.failed(exc))
        code = 1
    except BaseException:  # cancelled (stdin closed), interrupted: the parent knows
        code = 1
    # No interpreter shutdown: the EOF watcher is blocked in read(), and there
    # is nothing left to flush (the frames went out with os.write).
    os._exit(code)


if __name__ == "__main__":
    # A process of sshpipe's own, as the command's (``cli.main``'s own_process): asyncssh,
    # imported at the log-in, loads quickly and keeps its warning off our stderr.
    from ..transport.loading import quick_asyncssh_import

    quick_asyncssh_import()
    main()
