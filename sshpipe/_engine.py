"""The asyncio driver: keep requests in flight, feed replies to the pure core.

Issuing and bookkeeping happen in the reply callbacks (synchronously, inside
the channel's ``data_received``), so a reply is turned into the next request
without a trip through the event loop. The awaiting coroutine only moves
payload between the pump and the disk or the reader, and frees budget as it
goes: "ask the core -> await I/O -> feed the core".

Requests are spread over the given SFTP sessions (channels), each holding its
own handle on the file; each request goes to the least busy channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import secrets
import time
from collections.abc import AsyncGenerator, AsyncIterable, Sequence
from dataclasses import dataclass
from functools import partial

from . import _codec as codec
from ._config import FALLBACK_BLOCK_SIZE, MAX_AUTO_BLOCK_SIZE, TransferConfig
from ._errors import ProtocolError, RemoteError, RemoteIsADirectory, SSHPipeError
from ._flight import FlightBudget
from ._localio import LocalSource, LocalTarget
from ._readplan import Range, ReadPlan
from ._reorder import ReorderBuffer
from ._sftp import SFTPSession, status_error
from ._stats import TransferStats

Chunks = list[bytes | memoryview]
# Replies carry the request header too; keep a block plus its framing under the
# server's max packet length (OpenSSH's sftp-client.c subtracts 1 KiB as well).
_PACKET_OVERHEAD = 1024


def block_size_for(config: TransferConfig, sftp: SFTPSession, *, write: bool) -> int:
    """The READ/WRITE length: the configured one, else the server's limit, else 32 KiB."""
    if config.block_size is not None:
        return config.block_size
    limits = sftp.limits
    if limits is None:
        return FALLBACK_BLOCK_SIZE
    size = (limits.max_write_len if write else limits.max_read_len) or MAX_AUTO_BLOCK_SIZE
    if limits.max_packet_len:
        size = min(size, limits.max_packet_len - _PACKET_OVERHEAD)
    return max(1, min(size, MAX_AUTO_BLOCK_SIZE))


@dataclass(slots=True)
class _Handles:
    """One open remote handle per channel, closed together."""

    path: str
    pairs: list[tuple[SFTPSession, bytes]]
    opened: int = 0  # how many channels held a handle (stays after close)

    @classmethod
    async def open(
        cls, channels: Sequence[SFTPSession], path: str, pflags: int, attrs: codec.Attrs
    ) -> _Handles:
        handles = cls(path, [])
        try:
            # The first open alone: if the path is wrong, one error, not K.
            handles.pairs.append((channels[0], await channels[0].open(path, pflags, attrs)))
            if len(channels) > 1:
                rest = await asyncio.gather(
                    *(
                        ch.open(path, pflags & ~(codec.FXF_TRUNC | codec.FXF_EXCL), attrs)
                        for ch in channels[1:]
                    ),
                    return_exceptions=True,
                )
                for ch, result in zip(channels[1:], rest, strict=True):
                    if isinstance(result, BaseException):
                        raise result
                    handles.pairs.append((ch, result))
            handles.opened = len(handles.pairs)
        except BaseException:
            await handles.close(check=False)
            raise
        return handles

    async def close(self, *, check: bool = True) -> None:
        """CLOSE every handle; all CLOSE packets are sent before any reply is awaited."""
        pairs, self.pairs = self.pairs, []
        live = [(ch, h) for ch, h in pairs if ch.broken is None]
        results = await asyncio.gather(
            *(ch.close_handle(h, self.path) for ch, h in live), return_exceptions=True
        )
        if check:
            for result in results:
                if isinstance(result, BaseException):
                    raise result


class _Pump:
    """Shared state of a pipelined transfer: budget, error, and the wake-up event."""

    def __init__(self, handles: _Handles, budget: FlightBudget) -> None:
        self.handles = handles
        self.budget = budget
        self.error: BaseException | None = None
        self.requests = 0
        self.progress = asyncio.Event()

    def _pick(self) -> tuple[SFTPSession, bytes]:
        pairs = self.handles.pairs
        if len(pairs) == 1:
            return pairs[0]
        return min(pairs, key=lambda pair: pair[0].pending)

    def fail(self, exc: BaseException) -> None:
        """Remember the first error; no request is issued after it."""
        if self.error is None:
            self.error = exc
        self.progress.set()

    async def wait(self) -> None:
        await self.progress.wait()
        self.progress.clear()


class ReadPump(_Pump):
    """Keeps READs in flight per the read plan and collects what they return."""

    def __init__(self, handles: _Handles, budget: FlightBudget, plan: ReadPlan) -> None:
        super().__init__(handles, budget)
        self.plan = plan
        self.arrived: list[tuple[int, Chunks, int]] = []  # (offset, chunks, length)
        self.unwritten = 0  # bytes handed to the local writer, not yet written

    def __repr__(self) -> str:
        return f"<ReadPump {self.handles.path} {self.plan!r} {self.budget!r}>"

    @property
    def finished(self) -> bool:
        return self.plan.done or (self.error is not None and self.plan.outstanding == 0)

    def fill(self) -> None:
        plan, budget = self.plan, self.budget
        while self.error is None and budget.has_room(plan.block_size):
            rng = plan.next_range()
            if rng is None:
                break
            sftp, handle = self._pick()
            budget.send(rng.length)
            self.requests += 1
            try:
                sftp.send_read(handle, rng.offset, rng.length, partial(self._on_reply, rng))
            except BaseException as exc:  # the channel broke: count the request as answered
                plan.on_retry(rng)
                budget.reply(rng.length, 0)
                self.fail(exc)

    def _on_reply(self, rng: Range, reply: codec.Reply | BaseException) -> None:
        plan = self.plan
        if isinstance(reply, codec.Data) and 0 < reply.length <= rng.length:
            plan.on_data(rng, reply.length)
            self.budget.reply(rng.length, reply.length)
            self.arrived.append((rng.offset, reply.chunks, reply.length))
        elif isinstance(reply, codec.Status) and reply.code == codec.FX_EOF:
            plan.on_eof(rng)
            self.budget.reply(rng.length, 0)
        else:
            plan.on_retry(rng)  # not answered: the range stays owed
            self.budget.reply(rng.length, 0)
            self.fail(self._reply_error(rng, reply))
        self.fill()
        self.progress.set()

    def _reply_error(self, rng: Range, reply: codec.Reply | BaseException) -> BaseException:
        path = self.handles.path
        if isinstance(reply, BaseException):
            return reply
        if isinstance(reply, codec.Status):
            return status_error(reply, path, rng.offset)
        if isinstance(reply, codec.Data):
            return ProtocolError(
                f"{path}: server returned {reply.length} bytes for a read of {rng.length} "
                f"at offset {rng.offset}"
            )
        return ProtocolError(f"{path}: unexpected {type(reply).__name__} reply to a read")

    def take(self) -> list[tuple[int, Chunks, int]]:
        arrived, self.arrived = self.arrived, []
        return arrived

    def free(self, count: int) -> None:
        self.budget.free(count)
        self.fill()

    def on_written(self, count: int, error: BaseException | None) -> None:
        """The local writer finished ``count`` bytes (called on the loop)."""
        self.unwritten -= count
        if error is not None:
            self.fail(error)
        self.free(count)
        self.progress.set()

    async def drain(self) -> None:
        """After an error: let outstanding replies come back (or the channel die)."""
        while self.plan.outstanding:
            await self.wait()

    def stats(self, started: float, size: int) -> TransferStats:
        return TransferStats(
            bytes=size,
            seconds=time.perf_counter() - started,
            requests=self.requests,
            short_reads_reissued=self.plan.short_reads,
            short_writes_reissued=0,
            peak_requests_in_flight=self.budget.peak_requests,
            peak_bytes_in_flight=self.budget.peak_bytes,
            channels=self.handles.opened,
            block_size=self.plan.block_size,
            size_changed=self.plan.changed,
        )


def _budget(config: TransferConfig) -> FlightBudget:
    return FlightBudget(max_requests=config.requests, max_bytes=config.max_bytes_in_flight)


async def _open_for_read(
    channels: Sequence[SFTPSession], path: str
) -> tuple[_Handles, codec.Attrs]:
    try:
        handles = await _Handles.open(channels, path, codec.FXF_READ, codec.Attrs())
    except RemoteError as exc:
        # Some servers refuse to open a directory with a bare FAILURE (asyncssh
        # does, OpenSSH opens it and fails the reads): say what it really is.
        if type(exc) is RemoteError and await _is_remote_dir(channels[0], path):
            raise RemoteIsADirectory(path, "is a directory") from exc
        raise
    try:
        sftp, handle = handles.pairs[0]
        attrs = await sftp.fstat(handle, path)
        if attrs.is_dir():
            raise RemoteIsADirectory(path, "is a directory")
    except BaseException:
        await handles.close(check=False)
        raise
    return handles, attrs


async def _is_remote_dir(sftp: SFTPSession, path: str) -> bool:
    try:
        return (await sftp.stat(path)).is_dir()
    except SSHPipeError:
        return False


async def _finish_reads(pump: ReadPump, error: BaseException | None) -> None:
    """Stop issuing, let replies in flight return, close every handle."""
    if error is not None:
        pump.fail(error)
    try:
        if pump.plan.outstanding and pump.error is not None:
            # A server that stops answering must not hide the first error.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pump.drain(), timeout=30)
    finally:
        await pump.handles.close(check=pump.error is None)


async def download(
    channels: Sequence[SFTPSession], remote: str, local: str, config: TransferConfig
) -> TransferStats:
    """Copy ``remote`` to ``local`` through a temp file renamed into place at the end."""
    started = time.perf_counter()
    if os.path.isdir(local):  # scp: copying into a directory keeps the remote name
        local = os.path.join(local, posixpath.basename(remote.rstrip("/")) or "download")
    target = LocalTarget(local)
    target.open()
    committed = False
    try:
        handles, attrs = await _open_for_read(channels, remote)
        plan = ReadPlan(
            block_size=block_size_for(config, channels[0], write=False), size_hint=attrs.size
        )
        pump = ReadPump(handles, _budget(config), plan)
        writer = target.start_writer(pump.on_written, in_thread=config.local_io_in_thread)
        failure: BaseException | None = None
        try:
            pump.fill()
            while True:
                batch = pump.take()
                if batch:
                    count = sum(length for _, _, length in batch)
                    pump.unwritten += count
                    writer.submit([(offset, chunks) for offset, chunks, _ in batch], count)
                elif pump.finished and not pump.unwritten:
                    break
                else:
                    await pump.wait()
            if pump.error is not None:
                raise pump.error
        except BaseException as exc:
            failure = exc
            raise
        finally:
            try:
                await writer.close(abandon=failure is not None)
            finally:
                await _finish_reads(pump, failure)
        await target.commit(plan.final_size)
        committed = True
        return pump.stats(started, plan.final_size)
    finally:
        if not committed:
            target.discard()


async def stream(
    channels: Sequence[SFTPSession], remote: str, config: TransferConfig
) -> AsyncGenerator[bytes, None]:
    """Yield the remote file's bytes in order; memory stays within the byte budget."""
    handles, attrs = await _open_for_read(channels, remote)
    plan = ReadPlan(
        block_size=block_size_for(config, channels[0], write=False), size_hint=attrs.size
    )
    pump = ReadPump(handles, _budget(config), plan)
    reorder = ReorderBuffer()
    failure: BaseException | None = None
    try:
        pump.fill()
        while True:
            for offset, chunks, _ in pump.take():
                reorder.add(offset, b"".join(chunks))
            before = reorder.buffered
            pieces = reorder.pop_ready(plan.eof_at if plan.done else None)
            pump.free(before - reorder.buffered)
            for piece in pieces:
                yield piece
            if pump.finished and not pump.arrived:
                break
            if not pieces:
                await pump.wait()
        if pump.error is not None:
            raise pump.error
        pump.free(reorder.discard())
    except BaseException as exc:
        failure = exc
        raise
    finally:
        await _finish_reads(pump, failure)


class WritePump(_Pump):
    """Keeps WRITEs in flight; each is charged to the budget until the server acks it."""

    def __init__(self, handles: _Handles, budget: FlightBudget, block_size: int) -> None:
        super().__init__(handles, budget)
        self.block_size = block_size
        self.outstanding = 0
        self.sent_bytes = 0

    def __repr__(self) -> str:
        return f"<WritePump {self.handles.path} outstanding={self.outstanding} {self.budget!r}>"

    def room(self) -> int:
        """How many full blocks could be sent right now."""
        budget = self.budget
        if self.error is not None:
            return 0
        by_requests = budget.max_requests - budget.requests
        by_bytes = (budget.max_bytes - budget.bytes) // self.block_size
        if budget.bytes == 0:
            by_bytes = max(by_bytes, 1)
        return max(0, min(by_requests, by_bytes))

    def send(self, offset: int, data: bytes) -> None:
        sftp, handle = self._pick()
        self.budget.send(len(data))
        self.outstanding += 1
        self.requests += 1
        self.sent_bytes = max(self.sent_bytes, offset + len(data))
        try:
            sftp.send_write(handle, offset, data, partial(self._on_reply, offset, len(data)))
        except BaseException as exc:
            self._on_reply(offset, len(data), exc)

    def _on_reply(self, offset: int, length: int, reply: codec.Reply | BaseException) -> None:
        self.outstanding -= 1
        self.budget.reply(length, 0)
        if isinstance(reply, codec.Status) and reply.code == codec.FX_OK:
            pass
        elif isinstance(reply, codec.Status):
            self.fail(status_error(reply, self.handles.path, offset))
        elif isinstance(reply, BaseException):
            self.fail(reply)
        else:
            self.fail(
                ProtocolError(
                    f"{self.handles.path}: unexpected {type(reply).__name__} reply to a write"
                )
            )
        self.progress.set()

    async def settle(self) -> None:
        while self.outstanding:
            await self.wait()

    async def drain(self) -> None:
        """Wait for every write to be acknowledged; raise the first failure."""
        await self.settle()
        if self.error is not None:
            raise self.error

    def stats(self, started: float) -> TransferStats:
        return TransferStats(
            bytes=self.sent_bytes,
            seconds=time.perf_counter() - started,
            requests=self.requests,
            short_reads_reissued=0,
            short_writes_reissued=0,
            peak_requests_in_flight=self.budget.peak_requests,
            peak_bytes_in_flight=self.budget.peak_bytes,
            channels=self.handles.opened,
            block_size=self.block_size,
        )


async def _upload(
    channels: Sequence[SFTPSession],
    remote: str,
    config: TransferConfig,
    mode: int,
    blocks: _BlockSource,
    name: str | None,
) -> TransferStats:
    """Write ``blocks`` to a temp name beside ``remote``, then rename it into place."""
    started = time.perf_counter()
    sftp = channels[0]
    remote = await _resolve_remote_target(sftp, remote, name)
    temp = _remote_temp_name(remote)
    pflags = codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_TRUNC | codec.FXF_EXCL
    committed = False
    try:
        # Inside the try: a cancel while the OPEN is in flight must still remove
        # the temp file the server may have created (the name is ours alone: EXCL).
        try:
            handles = await _Handles.open(channels, temp, pflags, codec.Attrs(permissions=mode))
        except RemoteError as exc:
            # Name the path the user asked for, not our temporary one.
            raise type(exc)(remote, exc.reason, status=exc.status) from exc
        pump = WritePump(handles, _budget(config), block_size_for(config, sftp, write=True))
        try:
            offset = 0
            while pump.error is None:
                room = pump.room()
                if room == 0:
                    await pump.wait()
                    continue
                new = await blocks.next(offset, pump.block_size, room)
                if not new:
                    break
                for data in new:
                    pump.send(offset, data)
                    offset += len(data)
            await pump.drain()
        except BaseException as exc:
            pump.fail(exc)
            # Let the writes in flight be answered before the handle is closed.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pump.settle(), timeout=30)
            raise
        finally:
            await handles.close(check=pump.error is None)
        await _rename_into_place(sftp, temp, remote)
        committed = True
        return pump.stats(started)
    finally:
        if not committed:
            await _remove_quietly(sftp, temp)


class _BlockSource:
    async def next(self, offset: int, block: int, count: int) -> list[bytes]:
        raise NotImplementedError


class _FileBlocks(_BlockSource):
    def __init__(self, source: LocalSource, *, in_thread: bool) -> None:
        self.source = source
        self.in_thread = in_thread

    async def next(self, offset: int, block: int, count: int) -> list[bytes]:
        return await self.source.read_blocks(offset, block, count, in_thread=self.in_thread)


class _StreamBlocks(_BlockSource):
    """Re-cuts an async iterable of bytes of any sizes into full blocks."""

    def __init__(self, chunks: AsyncIterable[bytes]) -> None:
        self._iter = aiter(chunks)
        self._pending = bytearray()
        self._ended = False

    async def next(self, offset: int, block: int, count: int) -> list[bytes]:
        while not self._ended and len(self._pending) < block:
            try:
                chunk = await anext(self._iter)
            except StopAsyncIteration:
                self._ended = True
                break
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise TypeError(f"put_stream needs bytes, got {type(chunk).__name__}")
            self._pending += chunk
        cut = min(len(self._pending), block)
        if cut == 0:
            return []
        with memoryview(self._pending) as view:  # one copy, not slice-then-bytes
            data = bytes(view[:cut])
        del self._pending[:cut]
        return [data]


async def upload(
    channels: Sequence[SFTPSession], local: str, remote: str, config: TransferConfig
) -> TransferStats:
    source = LocalSource(local)
    source.open()
    try:
        return await _upload(
            channels,
            remote,
            config,
            source.mode,
            _FileBlocks(source, in_thread=config.local_io_in_thread),
            source.path.name,
        )
    finally:
        source.close()


async def upload_stream(
    channels: Sequence[SFTPSession],
    chunks: AsyncIterable[bytes],
    remote: str,
    config: TransferConfig,
    mode: int = 0o644,
) -> TransferStats:
    return await _upload(channels, remote, config, mode, _StreamBlocks(chunks), None)


def _remote_temp_name(remote: str) -> str:
    head, sep, name = remote.rpartition("/")
    return f"{head}{sep}.{name}.sshpipe-{secrets.token_hex(3)}.partial"


async def _resolve_remote_target(sftp: SFTPSession, remote: str, name: str | None) -> str:
    """Where an upload lands: ``remote`` itself, or ``remote/name`` if it is a directory (scp)."""
    try:
        attrs = await sftp.stat(remote)
    except SSHPipeError:
        return remote  # missing (the usual case) or unreadable: the open will say why
    if not attrs.is_dir():
        return remote
    if name is None:
        raise RemoteIsADirectory(remote, "is a directory")
    return f"{remote.rstrip('/')}/{name}"


async def _rename_into_place(sftp: SFTPSession, temp: str, remote: str) -> None:
    if "posix-rename@openssh.com" in sftp.extensions:
        reply = await sftp.call(
            lambda rid: codec.encode_posix_rename(rid, temp.encode(), remote.encode())
        )
        sftp.check_status(reply, remote)
        return
    # Plain SFTP v3 RENAME fails when the target exists (filexfer-02 §6.5), so
    # the old file is removed first: a crash in between leaves only the temp.
    with contextlib.suppress(SSHPipeError):
        await sftp.remove(remote)
    reply = await sftp.call(lambda rid: codec.encode_rename(rid, temp.encode(), remote.encode()))
    sftp.check_status(reply, remote)


async def _remove_quietly(sftp: SFTPSession, path: str) -> None:
    if sftp.broken is None:
        with contextlib.suppress(SSHPipeError):
            await sftp.remove(path)
