"""An upload made durable as it goes: fsync@openssh.com while the WRITEs still flow.

The server's fsync before the rename used to find the whole file in its page
cache and flush it all then (512 MiB on loopback: ~0.6 s of a 3.2 s command,
the transfer idle meanwhile). Sent every ``SYNC_EVERY`` acknowledged bytes
on a channel of its own, each fsync flushes what is written so far while the
writes go on: OpenSSH's sftp-server serves one channel's requests in order,
so on a lane's own channel it would hold that lane's WRITEs back for as long
as it took. An fsync covers the whole file whichever handle it names, and
only bytes already acknowledged are known to be in it: the final fsync, after
the last acknowledgement, is still what makes the file durable; the early
ones leave it only the tail to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from ..core import codec
from ..core.errors import SSHPipeError
from ..core.text import printable
from ..local import writeback
from ..transport.sftp import SFTPSession
from .grower import Grower
from .lanes import cancelled
from .pump import Pump

logger = logging.getLogger("sshpipe.upload")


class EarlySync:
    """Sends fsync@openssh.com on its own channel each ``SYNC_EVERY`` bytes acknowledged."""

    def __init__(self, grower: Grower, pump: Pump, path: str, shown: str, size: int) -> None:
        self._grower = grower
        self._pump = pump
        self._path = path  # the file written (a temp name)
        self._shown = shown  # the user's name for it, in errors
        self._size = size  # still to be acknowledged when it starts
        self._acked = 0
        self._next = writeback.SYNC_EVERY
        self._due = asyncio.Event()
        self._stopped = False

    def __repr__(self) -> str:
        return f"<EarlySync {printable(self._path)} acked={self._acked} next={self._next}>"

    def acked(self, count: int) -> None:
        """``count`` more bytes are acknowledged (on the loop: no I/O here)."""
        self._acked += count
        # Not when the end is near: the final fsync follows, and only it can wait
        # for the last WRITE; two at once would only share the same flush.
        if self._acked >= self._next and self._size - self._acked > writeback.SYNC_EVERY:
            self._due.set()

    def stop(self) -> None:
        self._stopped = True
        self._due.set()

    async def run(self) -> None:
        """Until ``stop``: an error of its own fails the pump (a sync that failed
        says the disk did not take the bytes), a refused channel only ends it."""
        sftp, handle = await self._open()
        if handle is None:
            return
        try:
            while True:
                await self._due.wait()
                self._due.clear()
                if self._stopped:
                    return
                self._next = self._acked + writeback.SYNC_EVERY
                reply = await sftp.fsync_request(handle)
                sftp.check_status(reply, self._shown)
        except SSHPipeError as exc:
            self._pump.fail(exc)
        except asyncio.CancelledError:
            sftp.unsettled = True  # an fsync may be owed: the pool lets it come first
            raise
        finally:
            # Not waited for: the upload's own fsync and CLOSEs follow at once.
            if sftp.broken is None:
                sftp.close_handle_soon(handle, self._shown)

    async def _open(self) -> tuple[SFTPSession, bytes | None]:
        """A channel and a handle of their own, or no handle (the final fsync alone then)."""
        first = self._pump.handles.lanes[0].sftp
        try:
            sftp = await self._grower.side_channel()
            if sftp is None or not sftp.can_fsync:
                return first, None
            return sftp, await sftp.open(self._path, codec.FXF_WRITE)
        except SSHPipeError as exc:
            logger.debug("%s: no channel for early syncs: %s", printable(self._shown), exc)
            return first, None


@contextlib.asynccontextmanager
async def syncing_early(
    grower: Grower, pump: Pump, path: str, shown: str, size: int
) -> AsyncIterator[EarlySync]:
    """Early syncs for the duration of the block; on leaving, the one in flight is
    waited for and the handle closed. The block's error comes out unwrapped."""
    early = EarlySync(grower, pump, path, shown, size)
    failure: BaseException | None = None
    async with asyncio.TaskGroup() as group:
        running = group.create_task(early.run())
        try:
            yield early
        except BaseException as exc:  # raised below, not wrapped in an ExceptionGroup
            failure = exc
        early.stop()
        if cancelled(failure):
            running.cancel()  # no wait for an fsync queued behind the WRITEs sent
    if failure is not None:
        try:
            raise failure
        finally:
            failure = None
