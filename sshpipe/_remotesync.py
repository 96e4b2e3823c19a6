"""Durable renames for many small uploads at the price of one ``sync -f`` on the server.

``fsync@openssh.com`` makes sftp-server fsync each file: a journal commit per
file, and the four pipeline channels' sftp-servers take turns (1,000 x 16 KiB
at 20 ms: 0.3-1.1 s more for the tree). Where the server runs a shell and
has GNU coreutils' ``sync``, the files written meanwhile wait together
instead: one ``sync -f DIR...`` (syncfs) makes them all durable, then each is
renamed. While one batch syncs, the next one gathers. The commands go to one
shell kept open (``RemoteShell``): an exec each would cost six round trips.

Only GNU ``sync`` is trusted (probed once with ``--version``): BSD's ignores
its arguments and its sync(2) need not wait for the disk. Where there is no
such command, or a batch's command fails, the caller fsyncs each file over
SFTP instead: slower, never less durable.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
from collections.abc import Callable

from ._errors import ConnectionBroken
from ._sftp import SFTPSession, Shell

logger = logging.getLogger("sshpipe.upload")

MAX_BATCH = 256  # files per command: it names at most this many directories (well under ARG_MAX)


class RemoteSync:
    """Batches ``sync -f`` for a tree's uploads.

    Args:
        channel: a live pipeline channel, asked anew for each command (a
            reconnect replaces them); its connection runs the command.
    """

    def __init__(self, channel: Callable[[], SFTPSession]) -> None:
        self._channel = channel
        self._probe: asyncio.Task[bool] | None = None
        self._failed = False  # a batch's command failed: per-file fsync from now on
        self._queue: list[tuple[str, asyncio.Future[bool]]] = []
        self._task: asyncio.Task[None] | None = None
        self._synced: set[str] = set()  # every directory a batch named
        self.used = False  # a batch succeeded: the renames want a last sync too
        self._shell: Shell | None = None
        self._shell_on = channel()  # the channel whose connection runs the shell

    def __repr__(self) -> str:
        return f"<RemoteSync waiting={len(self._queue)} failed={self._failed}>"

    async def usable(self) -> bool:
        """Whether uploads may skip their own fsync and wait for a batch instead."""
        if self._failed:
            return False
        if self._probe is None:
            self._probe = asyncio.get_running_loop().create_task(self._check())
        probe = self._probe
        try:
            return await asyncio.shield(probe)
        except ConnectionBroken:
            if self._probe is probe:  # not an answer: ask again on the new connection
                self._probe = None
            raise

    async def _check(self) -> bool:
        result = await self._run("sync --version")
        usable = result is not None and result[0] == 0 and "GNU coreutils" in result[1]
        logger.debug("server-side sync -f %s", "usable" if usable else "not usable")
        return usable

    async def sync(self, directory: str) -> bool:
        """Return once a ``sync -f`` begun after this call is done; False if it failed.

        Raises:
            ConnectionBroken: the connection went while the command ran.
        """
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue.append((directory, future))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def sync_all(self) -> None:
        """One last ``sync -f`` of every directory used: the renames are durable too."""
        directories = sorted(self._synced)
        for start in range(0, len(directories), MAX_BATCH):
            await self._run(_command(directories[start : start + MAX_BATCH]))

    async def close(self) -> None:
        """Wait for the command under way (a cancelled tree's files are removed by their owners)."""
        if self._probe is not None and not self._probe.done():
            self._probe.cancel()
        for task in (self._probe, self._task):
            if task is not None:
                await asyncio.wait([task])
        if self._shell is not None:
            self._shell.close()
            self._shell = None

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            directories = sorted({directory for directory, _ in batch})
            outcome: bool | BaseException
            try:
                result = await self._run(_command(directories))
                outcome = result is not None and result[0] == 0
                if outcome:
                    self.used = True
                    self._synced.update(directories)
                else:
                    logger.info("sync -f failed on the server (%s): fsync each file", result)
                    self._failed = True
            except ConnectionBroken as exc:
                outcome = exc
            for _, future in batch:
                if future.done():  # its waiter was cancelled
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)

    async def _run(self, command: str) -> tuple[int, str] | None:
        """(exit status, stdout) from the shell kept open; None where no shell runs.

        Raises:
            ConnectionBroken: the shell's connection is gone (not the command's
                fault; the next command opens a shell on the new connection).
        """
        if self._shell is None or self._shell_on.broken is not None:
            if self._shell is not None:
                self._shell.close()
            self._shell_on = self._channel()
            if self._shell_on.open_shell is None:
                return None
            self._shell = await self._shell_on.open_shell()
            if self._shell is None:
                return None
        result = await self._shell.run(command)
        if result is None:
            self._shell.close()
            self._shell = None
            if self._shell_on.broken is not None:
                raise ConnectionBroken(f"connection lost while running {command.split()[0]}")
        return result


def _command(directories: list[str]) -> str:
    return "sync -f -- " + " ".join(shlex.quote(d) for d in directories)
