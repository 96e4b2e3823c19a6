"""What the SFTP session's requests and replies lean on, apart from the session.

- ``ReplyCallback``: where a request's reply (or the error that ended it) goes;
- ``quiet`` and ``settle``: for replies nobody reads, or that must be waited
  out even while being cancelled (a handle's CLOSE);
- ``ReplyClock``: when a whole reply last came on a connection, shared by its
  channels' stall watchdogs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from ..core import codec

ReplyCallback = Callable[["codec.Reply | BaseException"], None]

# How long a cancelled transfer waits for the CLOSE it sent: a server that
# does not answer in this long has gone, and its handles with it.
SETTLE_TIMEOUT = 30.0


def quiet(future: asyncio.Future[codec.Reply]) -> None:
    """Done-callback for a reply nobody will read: no "never retrieved" warning."""
    if not future.cancelled():
        future.exception()


async def settle(future: asyncio.Future[codec.Reply]) -> None:
    """Wait for a request's answer, whatever it is, even while being cancelled.

    A handle must not outlive a cancelled transfer: its CLOSE is on the wire,
    and the server answers it (or the channel dies) within a round trip; the
    server answers every request sent before it on that handle first.
    """
    future.add_done_callback(quiet)
    with contextlib.suppress(Exception):
        async with asyncio.timeout(SETTLE_TIMEOUT):
            await asyncio.shield(future)


class ReplyClock:
    """When a whole reply last came on any channel of one connection (shared by them)."""

    __slots__ = ("at",)

    def __init__(self, at: float) -> None:
        self.at = at
