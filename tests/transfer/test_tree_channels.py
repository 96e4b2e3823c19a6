"""The tree pipeline's credits and channels, on fakes: caps that come down while work waits."""

from __future__ import annotations

import asyncio

from sshpipe.testing.fakes import FakePipe, FakeServer
from sshpipe.transport.sftp import SFTPSession
from sshpipe.tree.channels import Credits, TreeChannels


def session() -> SFTPSession:
    """A channel as the tree's bookkeeping sees it (never started: no request is sent)."""
    return SFTPSession(FakePipe(FakeServer()))


async def test_a_waiter_for_more_than_the_lowered_maximum_is_still_granted() -> None:
    credits = Credits(max_requests=10, max_bytes=100)
    granted = asyncio.Event()

    async def wants_nine() -> None:
        async with credits.hold(9, 1):
            assert credits.requests == 5  # capped when granted, at the maximum then
            granted.set()

    async with credits.hold(8, 1):
        waiter = asyncio.create_task(wants_nine())
        await asyncio.sleep(0)
        credits.max_requests = 5  # a stall taught the pipeline to ask for fewer
    await asyncio.wait_for(waiter, 1)
    assert granted.is_set() and credits.requests == 0 and credits.bytes == 0


async def test_a_step_waits_while_every_channel_holds_its_cap_of_handles() -> None:
    sessions = [session(), session()]
    channels = TreeChannels(sessions)
    for slot in channels.slots:
        slot.cap = 1
    first, second = await channels.take(), await channels.take()
    assert first is not second  # the one with room, not the least loaded by accident
    third = asyncio.create_task(channels.take())
    await asyncio.sleep(0.01)
    assert not third.done()
    channels.give(second)
    assert await asyncio.wait_for(third, 1) is second


async def test_a_refused_open_lowers_the_cap_only_with_others_open() -> None:
    only = session()
    channels = TreeChannels([only])
    alone = await channels.take()
    cap = alone.cap
    channels.refused(alone)  # nothing else open: asked again, the cap as it was
    assert alone.cap == cap and only.caps.handles is None
    others = [await channels.take() for _ in range(5)]
    channels.refused(others[-1])
    assert alone.cap == 5 and only.caps.handles == 5
