"""Durable renames for many small uploads at the price of one ``sync -f`` on the server.

``fsync@openssh.com`` makes sftp-server fsync each file: a journal commit per
file, and the four pipeline channels' sftp-servers take turns (1,000 x 16 KiB
on loopback: 0.2-1.1 s more for the tree). Where the server runs a shell and
has GNU coreutils' ``sync``, the files written meanwhile wait together
instead: one ``sync -f DIR...`` (syncfs) makes them all durable, then each is
renamed. While one batch syncs, the next one gathers (``Batcher``). The
commands go to one shell kept open (``RemoteCommands``).

Only GNU ``sync`` is trusted (probed once with ``--version``): BSD's ignores
its arguments and its sync(2) need not wait for the disk. Where there is no
such command, or a batch's command fails, the caller fsyncs each file over
SFTP instead: slower, never less durable.
"""

from __future__ import annotations

import contextlib
import logging
import shlex

from ..core.untrusted import COMMAND_OUTPUT_SLACK
from ..transport.commands import RemoteCommands
from .batch import Batcher

logger = logging.getLogger("sshpipe.upload")

MAX_BATCH = 256  # files per command: it names at most this many directories (well under ARG_MAX)


class RemoteSync:
    """Batches ``sync -f`` for a tree's uploads.

    Args:
        commands: the shell on the server (shared with the tree's other commands).
    """

    def __init__(self, commands: RemoteCommands) -> None:
        self._commands = commands
        self._failed = False  # a batch's command failed: per-file fsync from now on
        self._batches: Batcher[str, bool] = Batcher(self._sync_batch, max_batch=MAX_BATCH)
        self._synced: set[str] = set()  # every directory a batch synced

    def __repr__(self) -> str:
        return f"<RemoteSync {self._batches!r} failed={self._failed}>"

    async def usable(self) -> bool:
        """Whether uploads may skip their own fsync and wait for a batch instead.

        Raises:
            ConnectionBroken: the connection went while asking.
        """
        return not self._failed and await self._commands.has("sync")

    async def sync(self, directory: str) -> bool:
        """Return once a ``sync -f`` begun after this call is done; False if it failed.

        Raises:
            ConnectionBroken: the connection went while the command ran.
        """
        return await self._batches.submit(directory)

    @property
    def used(self) -> bool:
        """A batch succeeded: the renames after it want a last sync too."""
        return bool(self._synced)

    async def sync_all(self) -> None:
        """One last ``sync -f`` of every directory used: the renames are durable too."""
        directories = sorted(self._synced)
        for start in range(0, len(directories), MAX_BATCH):
            await self._commands.run(
                _command(directories[start : start + MAX_BATCH]), max_output=COMMAND_OUTPUT_SLACK
            )

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Files are synced inside this; at its end the command under way is waited for.

        A cancelled tree's files are removed by their owners.
        """
        return self._batches.running()

    async def _sync_batch(self, queued: list[str]) -> list[bool]:
        directories = sorted(set(queued))
        result = await self._commands.run(_command(directories), max_output=COMMAND_OUTPUT_SLACK)
        done = result is not None and result[0] == 0
        if done:
            self._synced.update(directories)
        else:
            logger.info("sync -f failed on the server (%s): fsync each file", result)
            self._failed = True
        return [done] * len(queued)


def _command(directories: list[str]) -> str:
    return "sync -f -- " + " ".join(shlex.quote(d) for d in directories)
