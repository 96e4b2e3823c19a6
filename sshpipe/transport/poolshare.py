"""The pool's busy channels, shared past the ceiling, and the transfers waiting for room.

A client opens at most ``max_connections`` x ``channels_per_connection``
channels. A transfer normally gets channels of its own; once every channel the
client may open is busy, the next one shares the least used busy channel:
SFTP matches replies to requests by id (filexfer-02 §3), so one channel
carries the handles and requests of many transfers. A channel shared by k
transfers holds about k handles, so its users stay under ``share_cap``.
It goes back to the idle list only when its last user gives it back.

Light users (``ChannelPool.lease(light=True)``: a remote file held open, a
STAT or a listing) ask little of a channel for most of its life, so they share
one with each other, while the channel is quiet, before a new channel is
opened for them (3 round trips: open, subsystem, INIT): pyarrow stats a file
while another it holds open sits idle on its channel. A channel stays
"light" while only light users ever joined it; a transfer that had to share
one makes it ordinary again.

When even sharing finds no room (every channel at its cap, no connection left
to open), a transfer waits in ``Room`` until something changes anywhere (a
channel given back, a connection or channel opened, one lost), for at most
the lease's ``ChannelSpec.queue_timeout``. The pool (``pool.ChannelPool``) keeps one of
each and asks them through their methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from ..core.servercaps import handle_cap
from .lease import ChannelKey
from .sftp import SFTPSession

# Light users one channel carries before the next gets a channel of its own:
# four readers with the default 8 MiB read-ahead each ask 32 MiB of a 15 MiB
# window, still 300 MB/s at 50 ms; metadata requests are a few bytes each.
LIGHT_SHARE = 4
# Replies a light channel may owe and still take a light user: a CLOSE not
# waited for, a STAT or two; not a reader's read-ahead (16 READs for 4 MiB).
QUIET = 4


def share_cap(sftp: SFTPSession) -> int:
    """Transfers one channel may carry at once: one handle each, one request at least each.

    The server's handle cap (``core.servercaps.handle_cap``: half its stated
    limit, or 64, or what a refused OPEN taught) and, after a stall, the
    requests it answers (``ServerCaps.requests``): more users than that would
    only queue behind each other in ``RequestChannel``'s held requests.
    """
    stated = sftp.limits.max_open_handles if sftp.limits is not None else 0
    cap = handle_cap(stated, sftp.caps.handles)
    return max(1, min(cap, sftp.caps.requests or cap))


class BusyChannels:
    """Channels lent out, the settings each was opened with, and how many transfers use each."""

    def __init__(self) -> None:
        self._users: dict[SFTPSession, int] = {}
        self._key: dict[SFTPSession, ChannelKey] = {}
        self._light: set[SFTPSession] = set()  # only light users ever joined

    def __len__(self) -> int:
        return len(self._users)

    def __contains__(self, sftp: object) -> bool:
        return sftp in self._users

    def __iter__(self) -> Iterator[SFTPSession]:
        return iter(list(self._users))

    @property
    def sharing(self) -> int:
        """Leases beyond each busy channel's first user (0 while none is shared)."""
        return sum(self._users.values()) - len(self._users)

    def add(self, key: ChannelKey, channels: list[SFTPSession]) -> None:
        """``channels`` are lent to one transfer, theirs alone."""
        for sftp in channels:
            self._users[sftp] = 1
            self._key[sftp] = key

    def discard(self, sftp: SFTPSession) -> None:
        """Forget ``sftp`` whoever used it (it is being closed)."""
        self._users.pop(sftp, None)
        self._key.pop(sftp, None)
        self._light.discard(sftp)

    def mark_light(self, channels: list[SFTPSession]) -> None:
        """``channels``, each lent to one light user alone, may take other light users."""
        for sftp in channels:
            if self._users.get(sftp) == 1:
                self._light.add(sftp)

    def leave(self, sftp: SFTPSession) -> bool:
        """One user gives ``sftp`` back; True if it was the last (the channel is free)."""
        users = self._users.get(sftp, 0) - 1
        if users > 0:
            self._users[sftp] = users
            return False
        self.discard(sftp)
        return True

    def is_shared(self, channels: list[SFTPSession]) -> bool:
        return any(self._users.get(sftp, 0) > 1 for sftp in channels)

    def share(
        self, key: ChannelKey, count: int, *, light: bool = False
    ) -> list[SFTPSession] | None:
        """``count`` busy channels opened with ``key``, the least used first, each joined.

        Only live channels under their ``share_cap``; None (nothing joined) if
        fewer than ``count`` have room. ``light``: a light user joining light
        channels only, at most ``LIGHT_SHARE`` users on each, and only while
        they owe at most ``QUIET`` replies (a STAT behind a reader's megabytes
        of READs would wait for them all: on a channel of its own it waits only
        for what the connection has already queued); a user that is not light
        makes the channels it joins ordinary.
        """
        fits = [
            sftp
            for sftp, users in self._users.items()
            if self._key[sftp] == key
            and sftp.broken is None
            and users < (min(LIGHT_SHARE, share_cap(sftp)) if light else share_cap(sftp))
            and (not light or (sftp in self._light and sftp.pending <= QUIET))
        ]
        if len(fits) < count:
            return None
        chosen = sorted(fits, key=self._users.__getitem__)[:count]
        for sftp in chosen:
            self._users[sftp] += 1
            if not light:
                self._light.discard(sftp)
        return chosen


class Room:
    """Transfers waiting for a channel, and the wake-up that sends every one to look again.

    ``epoch`` counts wake-ups: a transfer reads it before it looks for room
    and waits only if no wake-up came since, so one that came while it looked
    (its look awaits: channels opening) is never lost.
    """

    def __init__(self) -> None:
        self.epoch = 0
        self.queued = 0  # transfers between their first failed look and their channel
        self._waiters: list[asyncio.Future[None]] = []

    def __repr__(self) -> str:
        return f"<Room epoch={self.epoch} queued={self.queued} waiting={len(self._waiters)}>"

    def wake(self) -> None:
        """Room may have appeared somewhere: every waiter looks again."""
        self.epoch += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, seen: int, deadline: float | None) -> bool:
        """Until a wake-up after ``seen``; False if the loop's clock reached ``deadline`` first."""
        if self.epoch != seen:
            return True
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except TimeoutError:
            return False
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        return True
