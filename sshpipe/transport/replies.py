"""What the SFTP session's requests and replies lean on, apart from the session.

- ``ReplyCallback``: where a request's reply (or the error that ended it) goes;
- ``quiet``: for replies nobody reads;
- ``ReplyClock``: when a whole reply last came on a connection, shared by its
  channels' stall watchdogs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..core import codec

ReplyCallback = Callable[["codec.Reply | BaseException"], None]

# How long a channel may owe a cancelled transfer's replies (its CLOSEs last,
# ``settling.py``): a server that does not answer in this long has gone, and
# its handles with it.
SETTLE_TIMEOUT = 30.0


def quiet(future: asyncio.Future[codec.Reply]) -> None:
    """Done-callback for a reply nobody will read: no "never retrieved" warning."""
    if not future.cancelled():
        future.exception()


class ReplyClock:
    """When a whole reply last came on any channel of one connection (shared by them)."""

    __slots__ = ("at",)

    def __init__(self, at: float) -> None:
        self.at = at
