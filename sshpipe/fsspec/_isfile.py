"""``isfile`` answered by opening the file, kept for the ``open`` that follows it.

pyarrow (``FSSpecHandler.open_input_file``), like any ``if fs.isfile(p):
fs.open(p)``, asks ``isfile`` and opens at once: a STAT, then a STAT with an
OPEN, two round trips. For a path this filesystem last saw as a regular file,
``isfile`` sends the STAT and the OPEN together instead (one round trip, as
the STAT alone) and keeps the file open: an ``open(path, "rb")`` that comes
next, with nothing else asked of the client in between and within
``PARKED_FOR`` seconds, takes it, opened by the question it follows. Anything
else and it is closed (a reader's CLOSE is not waited for).

Only paths seen as regular files are opened so: an OPEN of a FIFO blocks the
server until a writer comes, and a STAT is all any other ``isfile`` costs.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ..core.errors import RemoteIsADirectory, RemoteNotFound, SSHPipeError

if TYPE_CHECKING:
    from ..client.client import Client
    from ..client.remotefile import RemoteFile

# How long an isfile's open waits for its open: pyarrow opens within a
# millisecond; a file held longer would be a file opened earlier than asked.
PARKED_FOR = 0.25
# Paths remembered as regular files (a few listings' worth; a miss costs only
# the isfile's old way, a STAT).
RECENT_FILES = 1024


class RecentFiles:
    """The paths last seen (STAT, listing) as regular files, the oldest forgotten first."""

    def __init__(self) -> None:
        self._paths: OrderedDict[str, None] = OrderedDict()

    def saw(self, info: dict[str, Any]) -> None:
        name = info["name"]
        if info["type"] != "file":
            self._paths.pop(name, None)
            return
        self._paths[name] = None
        self._paths.move_to_end(name)
        if len(self._paths) > RECENT_FILES:
            self._paths.popitem(last=False)

    def __contains__(self, path: object) -> bool:
        return path in self._paths


class Parked:
    """The file an ``isfile`` opened, one per client, waiting for its ``open``."""

    def __init__(self) -> None:
        self._by_client: dict[Client, tuple[str, RemoteFile, int, asyncio.TimerHandle]] = {}

    def park(self, client: Client, path: str, file: RemoteFile, uses: int) -> None:
        """Keep ``file`` for an open of ``path`` while the client's uses stay ``uses``."""
        self._drop(client)
        loop = asyncio.get_running_loop()
        expiry = loop.call_later(PARKED_FOR, self._drop, client)
        self._by_client[client] = (path, file, uses, expiry)

    def take(self, client: Client | None, path: str, uses: int) -> RemoteFile | None:
        """The file parked for ``path``, if nothing else used the client since."""
        entry = self._by_client.get(client) if client is not None else None
        if client is None or entry is None:
            return None
        parked_path, file, parked_uses, _ = entry
        if parked_path != path or parked_uses != uses or file.closed:
            self._drop(client)
            return None
        del self._by_client[client]
        entry[3].cancel()
        return file

    def _drop(self, client: Client | None) -> None:
        entry = self._by_client.pop(client, None) if client is not None else None
        if entry is None:
            return
        entry[3].cancel()
        task = asyncio.get_running_loop().create_task(entry[1].aclose())
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)


async def open_to_answer(client: Client, path: str) -> RemoteFile | bool | None:
    """The open file if ``path`` is a regular file; False if it is not there or
    not a file; None if the OPEN could not tell (unreadable: ask a STAT)."""
    try:
        file = await client.open(path, "rb")
    except (RemoteNotFound, RemoteIsADirectory):
        return False
    except SSHPipeError:
        return None
    if file.attributes.type != "file":
        await file.aclose()  # a device: opened, but not what isfile means
        return False
    return file


# Closes of files nobody took, referenced until they end.
_CLOSING: set[asyncio.Task[None]] = set()
