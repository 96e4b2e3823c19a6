"""Batcher: what arrives while a batch runs forms the next one; results and errors per batch."""

from __future__ import annotations

import asyncio

import pytest

from sshpipe.tree.batch import Batcher


async def test_items_arriving_during_a_batch_run_together_next() -> None:
    seen: list[list[int]] = []
    gate = asyncio.Event()

    async def run(items: list[int]) -> list[int]:
        seen.append(items)
        await gate.wait()
        return [item * 10 for item in items]

    batcher: Batcher[int, int] = Batcher(run, max_batch=3)
    async with batcher.running():
        tasks = [asyncio.create_task(batcher.submit(i)) for i in range(1)]
        await asyncio.sleep(0)  # the first batch, [0], is running
        tasks += [asyncio.create_task(batcher.submit(i)) for i in range(1, 6)]
        await asyncio.sleep(0)
        gate.set()
        assert await asyncio.gather(*tasks) == [0, 10, 20, 30, 40, 50]
    assert seen == [[0], [1, 2, 3], [4, 5]]  # max_batch caps each batch


async def test_an_error_reaches_every_waiter_of_its_batch_only() -> None:
    async def run(items: list[int]) -> list[int]:
        if 2 in items:
            raise OSError("boom")
        return items

    batcher: Batcher[int, int] = Batcher(run, max_batch=2)
    async with batcher.running():
        submitted = (batcher.submit(i) for i in range(4))
        results = await asyncio.gather(*submitted, return_exceptions=True)
    # All four were queued before the first batch started: [0, 1], then [2, 3].
    assert results[:2] == [0, 1]
    assert [type(r) for r in results[2:]] == [OSError, OSError]  # failed together


async def test_a_cancelled_waiter_leaves_its_item_in_the_batch() -> None:
    ran: list[int] = []

    async def run(items: list[int]) -> list[int]:
        await asyncio.sleep(0.01)
        ran.extend(items)
        return items

    batcher: Batcher[int, int] = Batcher(run)
    async with batcher.running():
        task = asyncio.create_task(batcher.submit(7))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert ran == [7]


async def test_batches_under_way_are_finished_when_the_body_fails() -> None:
    """The body's failure is raised as itself, after the batches (their items were handed over)."""
    ran: list[int] = []

    async def run(items: list[int]) -> list[int]:
        await asyncio.sleep(0.01)
        ran.extend(items)
        return items

    batcher: Batcher[int, int] = Batcher(run, max_batch=1)
    with pytest.raises(OSError, match="the body"):
        async with batcher.running():
            waiters = [asyncio.create_task(batcher.submit(i)) for i in range(3)]
            await asyncio.sleep(0)
            raise OSError("the body")
    assert ran == [0, 1, 2]
    assert [await waiter for waiter in waiters] == [0, 1, 2]


async def test_submit_outside_running_is_refused() -> None:
    async def run(items: list[int]) -> list[int]:
        return items

    with pytest.raises(RuntimeError, match="running"):
        await Batcher(run).submit(1)
