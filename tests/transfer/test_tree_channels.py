"""The tree pipeline's credits, channels and queues, on fakes: caps that come down while
work waits, a handle left while its step waits, queues bounded by their paths too."""

from __future__ import annotations

import asyncio

import pytest

import sshpipe.tree.run as tree_run
from sshpipe.core.codec import Attrs
from sshpipe.testing.fakes import FakePipe, FakeServer
from sshpipe.transport.sftp import SFTPSession
from sshpipe.tree.channels import Credits, TreeChannels, stepping_aside
from sshpipe.tree.item import Item
from sshpipe.tree.run import EntryQueue, EntryStack


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


async def test_a_step_waiting_aside_leaves_its_handle_to_the_steps_it_waits_for() -> None:
    """One handle: a listing waiting for room in a queue (the workers' room) must not
    hold it, or the worker that would make the room never gets one."""
    channels = TreeChannels([session()])
    channels.slots[0].cap = 1
    room = asyncio.Event()

    async def listing(sftp: SFTPSession) -> None:
        async with stepping_aside():
            await room.wait()
        assert channels.slots[0].handles == 1  # its own again

    async def worker(sftp: SFTPSession) -> None:
        room.set()

    listed = asyncio.create_task(channels.run(listing))
    await asyncio.sleep(0)
    await asyncio.wait_for(channels.run(worker), 1)
    await asyncio.wait_for(listed, 1)
    assert channels.slots[0].handles == 0


async def test_stepping_aside_outside_a_step_does_nothing() -> None:
    async with stepping_aside():
        pass


def _entry(name: str, length: int) -> Item:
    return Item("/" + name * length, "/dest/" + name * length, Attrs(), "file")


async def test_a_queue_of_entries_is_full_at_its_count_or_at_its_paths_characters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tree_run, "QUEUED_PATH_CHARS", 1000)
    queue = EntryQueue(4)
    for name in "abc":
        queue.put_nowait(_entry(name, 10))
    assert not queue.full()
    queue.put_nowait(_entry("d", 10))
    assert queue.full()  # four entries
    while not queue.empty():
        queue.get_nowait()
    queue.put_nowait(_entry("x", 600))  # 1,206 characters: one long entry fills it
    assert queue.full() and queue.qsize() == 1
    assert queue.get_nowait() is not None and not queue.full()
    stack = EntryStack(8)
    for name in "ab":
        stack.put_nowait(_entry(name, 1))
    stack.put_nowait(None)  # a stop sign weighs nothing
    assert [stack.get_nowait() for _ in range(3)] == [None, _entry("b", 1), _entry("a", 1)]
