"""Channels given back with replies still owed: kept from reuse until those are in.

A cancelled transfer stops issuing, sends its CLOSEs and leaves at once: on a
thin link the replies to its READs (a receive window's worth) and the CLOSEs'
behind them can take seconds to come. The pool keeps such a channel here
instead of idle; its replies are discarded as they arrive, and once the last
is in (``RequestChannel.on_drained``) the pool takes it back. The pool owns
the wait: no task, a callback and a deadline; ``aclose`` awaits what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from ..core.errors import Stalled
from .poolshare import BusyChannels, Room
from .replies import SETTLE_TIMEOUT
from .sftp import SFTPSession

# Seconds ``ChannelPool.aclose`` gives channels still settling: a courtesy
# (a session that ends has its handles closed by the server: OpenSSH's
# sftp-server on exit, asyncssh's on cleanup), short so that closing a client
# right after a cancel stays quick. At 20 Mbit/s it covers 5 MB of replies.
SETTLE_AT_CLOSE = 2.0
# Seconds ``aclose`` gives running transfers, their channels closed under
# them, to clean up and give them back: they fail at once where they await,
# and their clean-up is local (a temp they cannot remove is only recorded). A
# lease held across ``aclose`` by its own caller costs this much, no more.
WIND_DOWN = 0.5


class Settling:
    """The channels settling, each until it owes no reply (or ``SETTLE_TIMEOUT``)."""

    def __init__(self) -> None:
        self._waiting: dict[SFTPSession, asyncio.Future[None]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def __repr__(self) -> str:
        return f"<Settling {len(self._waiting)}>"

    def add(self, sftp: SFTPSession, then: Callable[[], None]) -> None:
        """Call ``then`` once ``sftp`` owes no reply, or has ended (``sftp.unsettled``).

        A server that owes replies for ``SETTLE_TIMEOUT`` seconds has gone:
        the channel is aborted (as stalled), which ends the wait too.
        """
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._waiting[sftp] = done
        why = Stalled(f"{sftp.name}: replies owed {SETTLE_TIMEOUT:g} s after its transfer ended")
        overdue = loop.call_later(SETTLE_TIMEOUT, sftp.abort, why)

        def drained() -> None:
            overdue.cancel()
            if self._waiting.get(sftp) is done:
                del self._waiting[sftp]
            done.set_result(None)
            sftp.unsettled = False
            then()

        sftp.on_drained(drained)

    async def wait(self, within: float) -> int:
        """Until every channel has settled, or ``within`` seconds; then close the rest.

        Closing ends their wait (their ``then`` runs, soon after).

        Returns:
            How many had to be closed.
        """
        waiting = list(self._waiting.values())
        if waiting:
            await asyncio.wait(waiting, timeout=within)
        late = list(self._waiting)
        for sftp in late:
            sftp.close()
        if self._waiting:
            # Their drained callbacks run on the loop's next turn: let them.
            await asyncio.wait(list(self._waiting.values()))
        return len(late)


async def wind_down(busy: BusyChannels, room: Room, within: float) -> None:
    """Close the channels of running transfers; give them ``within`` seconds to leave.

    Each fails with ClosedError (what we did, not retried) where it awaits,
    cleans up (a temp file it can no longer remove stays in the pool's
    ``temps``, which the client reports once the pool is closed) and gives its
    channels back, which wakes ``room``.
    """
    for sftp in list(busy):
        sftp.close()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while len(busy):
                await room.wait(room.epoch, None)
