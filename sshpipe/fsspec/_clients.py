"""One :class:`sshpipe.Client` per event loop, made on first use, closed with the filesystem.

A client belongs to the loop it was first used on (its connections live
there). fsspec runs sync calls on its own loop thread, ``asynchronous=True``
callers on theirs, and Dask ships the filesystem to worker processes: so the
filesystem keeps one client per loop, made lazily (unpickling connects to
nothing; the first call does), and forgets them all in a forked child, whose
copies of the parent's sockets are not its own.

It also knows the files opened for reading through each client: those left open
(pyarrow leaves its own to the garbage collector, which comes after the
filesystem's finalizer at exit) are closed before their client, which would
otherwise wait ``WIND_DOWN`` for channels that nobody is there to give back.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._isfile import Parked

if TYPE_CHECKING:
    from ..client.client import Client
    from ..client.remotefile import RemoteFile

logger = logging.getLogger("sshpipe.fsspec")

# How long close() waits for a client on another loop to say goodbye to its
# server: a server gone silent must not hang the caller's exit.
CLOSE_TIMEOUT = 10.0


class LoopClients:
    """The clients of one filesystem, by event loop."""

    def __init__(self, factory: Callable[[], Client]) -> None:
        self._factory = factory
        self._pid = os.getpid()
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = (
            weakref.WeakKeyDictionary()
        )
        self._files: weakref.WeakKeyDictionary[Client, weakref.WeakSet[RemoteFile]] = (
            weakref.WeakKeyDictionary()
        )
        self.uses = 0  # calls of ``current``: an isfile's parked file wants none since
        self.parked = Parked()

    def __len__(self) -> int:
        self._forget_after_fork()
        return len(self._by_loop)

    def _forget_after_fork(self) -> None:
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._by_loop = weakref.WeakKeyDictionary()
            self._files = weakref.WeakKeyDictionary()

    def current(self) -> Client:
        """The running loop's client, made (not connected: its first call connects) if new."""
        self._forget_after_fork()
        self.uses += 1
        loop = asyncio.get_running_loop()
        client = self._by_loop.get(loop)
        if client is None:
            client = self._by_loop[loop] = self._factory()
        return client

    def warm(self, loop: asyncio.AbstractEventLoop) -> None:
        """Log in and open a channel on ``loop`` now, in the background (``connect_early``).

        The first call, made while this runs, waits for the same log-in (and
        hears its failure); one made after a failure connects again itself.
        """

        async def warm() -> None:
            try:
                await self.current().warm(1)
            except Exception as exc:  # the first call will say it, with its own
                logger.debug("sshpipe filesystem: early log-in failed: %s", exc)

        future = asyncio.run_coroutine_threadsafe(warm(), loop)
        _WARMING.add(future)
        future.add_done_callback(_WARMING.discard)

    def park(self, path: str, file: RemoteFile) -> None:
        """Keep an isfile's open ``file`` for the open of ``path`` that may come next."""
        client = self.current()
        self.parked.park(client, path, file, self.uses)

    def take_parked(self, path: str) -> RemoteFile | None:
        """The file an isfile of ``path`` just opened, if the client was used for nothing since."""
        self._forget_after_fork()
        client = self._by_loop.get(asyncio.get_running_loop())
        return self.parked.take(client, path, self.uses)

    def track(self, file: RemoteFile) -> None:
        """Note a reader opened through the running loop's client, to close before it.

        (A writer left open is not: its close would commit what it was given.)
        """
        if file.mode != "rb":
            return
        self._files.setdefault(self.current(), weakref.WeakSet()).add(file)

    async def _aclose(self, client: Client) -> None:
        """Close ``client``'s files still open (a reader's CLOSE is not waited for), then it."""
        files = self._files.pop(client, None)
        try:
            for file in list(files or ()):
                if not file.closed:
                    await file.aclose()
        finally:
            await client.aclose()

    async def aclose_current(self) -> None:
        """Close this loop's client, and ask the others' loops to close theirs."""
        self._forget_after_fork()
        here = asyncio.get_running_loop()
        mine = self._by_loop.pop(here, None)
        self.close_others(here)
        if mine is not None:
            await self._aclose(mine)

    def close_others(self, here: asyncio.AbstractEventLoop | None) -> None:
        """Close every client not on ``here``: each on its own loop, waited for at most
        CLOSE_TIMEOUT (a loop that no longer runs has taken its sockets with it)."""
        self._forget_after_fork()
        for loop, client in list(self._by_loop.items()):
            if loop is here:
                continue
            del self._by_loop[loop]
            if loop.is_closed() or not loop.is_running():
                continue
            future = asyncio.run_coroutine_threadsafe(self._aclose(client), loop)
            with contextlib.suppress(Exception):
                future.result(CLOSE_TIMEOUT)


def close_all(clients: LoopClients) -> None:
    """Close every client from outside any of their loops (``close()``, the finalizer)."""
    try:
        here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    clients.close_others(here)
    if here is not None:
        # Called from a coroutine on a client's own loop: it cannot be waited
        # for here without blocking that loop, so it closes as a task.
        task = here.create_task(clients.aclose_current())
        _PENDING.add(task)
        task.add_done_callback(_PENDING.discard)


# Tasks of close_all() kept referenced until they end (asyncio holds only weak ones).
_PENDING: set[asyncio.Task[None]] = set()
# Early log-ins under way (``LoopClients.warm``), referenced until they end.
_WARMING: set[concurrent.futures.Future[None]] = set()
