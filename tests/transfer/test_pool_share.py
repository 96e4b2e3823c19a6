"""The pool's sharing bookkeeping and its wake-ups, on sessions that never send a request."""

from __future__ import annotations

import asyncio

from sshpipe.core.servercaps import ServerCaps
from sshpipe.testing.fakes import FakePipe, FakeServer
from sshpipe.transport.poolshare import BusyChannels, Room, share_cap
from sshpipe.transport.sftp import SFTPSession

KEY = (1, 2, 3)


def session(caps: ServerCaps) -> SFTPSession:
    sftp = SFTPSession(FakePipe(FakeServer()))
    sftp.caps = caps  # one server's, as the pool shares it
    return sftp


def test_shared_channels_go_least_used_first_and_stay_under_the_handle_cap() -> None:
    caps = ServerCaps(handles=3)
    a, b = session(caps), session(caps)
    busy = BusyChannels()
    busy.add(KEY, [a])
    busy.add(KEY, [b])
    assert busy.share((9, 9, 9), 1) is None  # opened with other settings: not shared
    taken = [busy.share(KEY, 1) for _ in range(4)]
    # Each goes to the least used: a and b take turns, up to 3 users each.
    assert sorted(id(t[0]) for t in taken if t) == sorted([id(a), id(b)] * 2)
    assert busy.sharing == 4 and busy.is_shared([a])
    assert busy.share(KEY, 1) is None  # both carry 3: the handle cap
    assert busy.share(KEY, 3) is None  # fewer than asked have room: none joined
    # Given back by all but the last user: still busy; by the last: free.
    assert [busy.leave(a) for _ in range(3)] == [False, False, True]
    assert a not in busy and b in busy and len(busy) == 1


def test_a_broken_channel_or_a_stalled_server_shares_less() -> None:
    caps = ServerCaps()
    a = session(caps)
    assert share_cap(a) == 64  # no limits stated: the default handle cap
    caps.requests = 8  # a stall: more users than requests would only queue
    assert share_cap(a) == 8
    busy = BusyChannels()
    busy.add(KEY, [a])
    a.abort(ConnectionError("gone"))
    assert busy.share(KEY, 1) is None


async def test_a_wake_up_while_a_transfer_looks_for_room_is_not_lost() -> None:
    room = Room()
    seen = room.epoch
    room.wake()  # came while the transfer looked (its look awaited)
    assert await room.wait(seen, None)  # at once, not for ever

    seen = room.epoch
    loop = asyncio.get_running_loop()
    waiter = asyncio.create_task(room.wait(seen, loop.time() + 5))
    await asyncio.sleep(0)
    loop.call_soon(room.wake)
    assert await asyncio.wait_for(waiter, 1)
    assert not await room.wait(room.epoch, loop.time() + 0.01)  # nothing came: timed out
    assert "waiting=0" in repr(room)
