"""The pure parts of tree transfers, as tables: layout, globs, budget, accounting."""

from __future__ import annotations

import asyncio

import pytest

from sshpipe.core.errors import RemoteNotFound
from sshpipe.core.progress import MAX_CURRENT
from sshpipe.core.treeplan import (
    TreeAccount,
    glob_match,
    glob_parts,
    is_small,
    landing,
    source_name,
    split_budget,
)
from sshpipe.tree.channels import Credits

MiB = 1024 * 1024


@pytest.mark.parametrize(
    ("source", "dest", "dest_is_dir", "expected"),
    [
        ("/srv/data", "backup", True, "backup/data"),  # into an existing directory
        ("/srv/data", "backup", False, "backup"),  # a new name
        ("/srv/data/", "backup", True, "backup/data"),  # a trailing slash changes nothing
        ("data", "/x", True, "/x/data"),
        (".", "/x", True, "/x"),  # "host:." copies the contents into the directory
        ("/", "/x", True, "/x"),
        ("a/..", "/x", True, "/x"),
    ],
)
def test_landing_follows_scp(source: str, dest: str, dest_is_dir: bool, expected: str) -> None:
    assert landing(source, dest, dest_is_dir=dest_is_dir) == expected


def test_source_name_is_the_last_component() -> None:
    assert [source_name(p) for p in ("a/b/c", "a/b/", "c", "/")] == ["c", "b", "c", ""]


@pytest.mark.parametrize(
    ("pattern", "head", "parts"),
    [
        ("logs/*.gz", "logs", ["*.gz"]),
        ("/var/log/*/x.?", "/var/log", ["*", "x.?"]),
        ("*.txt", ".", ["*.txt"]),
        ("/*", "/", ["*"]),
        ("a/b/c", "a/b/c", []),  # no wildcard: the path itself
        ("a/[xy]/c", "a", ["[xy]", "c"]),
    ],
)
def test_glob_parts(pattern: str, head: str, parts: list[str]) -> None:
    assert glob_parts(pattern) == (head, parts)


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("*.gz", "a.gz", True),
        ("*.gz", ".a.gz", False),  # a leading dot is matched literally, as in a shell
        (".*", ".a", True),
        (".*", "..", False),
        ("*", ".", False),
        ("?", "a", True),
        ("[ab]*", "bc", True),
        ("*.GZ", "a.gz", False),  # case matters on the server as it does in sh
    ],
)
def test_glob_match(pattern: str, name: str, matches: bool) -> None:
    assert glob_match(pattern, name) is matches


@pytest.mark.parametrize("total", [1, 2, 3, 1000, 64 * MiB, 64 * MiB + 1])
def test_the_budget_split_never_exceeds_the_total(total: int) -> None:
    pipeline, big = split_budget(total)
    assert pipeline >= 1 and big >= 1
    assert pipeline + big <= max(total, 2)


def test_small_files_fit_twice_in_the_pipeline() -> None:
    pipeline, _ = split_budget(64 * MiB)
    assert is_small(pipeline // 2, pipeline) and not is_small(pipeline // 2 + 1, pipeline)


def test_accounting_counts_copies_failures_and_progress() -> None:
    account = TreeAccount(started=0.0)
    for size in (10, 20, 30):
        account.found_file(size)
    account.started_file("/b")
    account.moved(15)  # part of a big file, counted as it moves
    assert account.counts().current == ("/b",)
    account.file_done(20, reported=15)
    account.ended_file("/b")
    account.file_done(12, listed=10)  # it grew by 2 since it was listed: so does the total
    account.failed("/x", RemoteNotFound("/x", "no such file"), is_file=True)
    account.skipped("/fifo")
    counts = account.counts()
    assert (counts.files_done, counts.files_total, counts.current) == (2, 3, ())
    assert (counts.bytes_done, counts.bytes_total) == (32, 62)
    stats = account.stats(2.0)
    assert (stats.files, stats.files_done, stats.files_failed, stats.bytes) == (3, 2, 1, 32)
    assert stats.skipped_paths == ("/fifo",) and stats.seconds == 2.0
    assert [(f.path, f.exit_code) for f in stats.failures] == [("/x", 4)]


def test_current_names_the_big_files_then_the_latest_small_ones() -> None:
    account = TreeAccount(started=0.0)
    account.started_file("/big", big=True)
    for index in range(MAX_CURRENT + 3):
        account.started_file(f"/f{index}")
    account.ended_file(f"/f{MAX_CURRENT + 2}")  # the newest ended: the one before shows
    recent = tuple(f"/f{index}" for index in range(3, MAX_CURRENT + 2))
    assert account.counts().current == ("/big", *recent)
    account.started_file("/f0", big=True)  # a small file that grew: now a big one
    assert account.counts().current == ("/big", "/f0", *recent[1:])
    account.ended_file("/big")
    account.ended_file("/f0")
    assert account.counts().current == tuple(f"/f{index}" for index in range(2, MAX_CURRENT + 2))


def test_resumed_bytes_are_done_but_not_moved() -> None:
    account = TreeAccount(started=0.0)
    account.found_file(100)
    account.copied_before(100)
    account.found_file(50)
    account.moved(20, kept=True)
    counts = account.counts()
    assert (counts.bytes_done, counts.bytes_kept, counts.files_done) == (120, 120, 1)


async def test_credits_are_granted_first_come_first_served() -> None:
    credits = Credits(max_requests=4, max_bytes=100)
    order: list[str] = []
    release = asyncio.Event()

    async def hold(name: str, requests: int, count: int) -> None:
        async with credits.hold(requests, count):
            order.append(name)
            await release.wait()

    async with asyncio.TaskGroup() as group:
        group.create_task(hold("a", 1, 80))
        await asyncio.sleep(0)
        group.create_task(hold("big", 1, 60))  # must wait for a
        await asyncio.sleep(0)
        group.create_task(hold("small", 1, 10))  # fits now, but waits its turn behind big
        await asyncio.sleep(0.01)
        assert order == ["a"] and credits.bytes == 80
        release.set()
    assert order == ["a", "big", "small"]
    assert (credits.requests, credits.bytes) == (0, 0)


async def test_credits_never_grant_a_waiter_cancelled_in_the_same_moment() -> None:
    """Holder and waiter cancelled together (a tree stopped by Ctrl-C): no grant to the dead.

    The holder's task runs first and releases while the waiter's future is
    already cancelled; the grant used to set its result (InvalidStateError,
    exit 70) instead of skipping it.
    """
    credits = Credits(max_requests=1, max_bytes=10)

    async def holder() -> None:
        async with credits.hold(1, 10):
            await asyncio.Event().wait()

    first = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiter = asyncio.create_task(credits.hold(1, 10).__aenter__())
    await asyncio.sleep(0)  # queued behind the holder
    first.cancel()
    waiter.cancel()
    results = await asyncio.gather(first, waiter, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results), results
    assert (credits.requests, credits.bytes) == (0, 0)
    async with credits.hold(1, 10):  # nothing left taken or queued
        pass


async def test_credits_clamp_a_request_bigger_than_the_budget_and_survive_cancel() -> None:
    credits = Credits(max_requests=2, max_bytes=100)
    async with credits.hold(5, 1000):  # clamped: it runs alone instead of never
        assert (credits.requests, credits.bytes) == (2, 100)
        waiter = asyncio.create_task(credits.hold(1, 1).__aenter__())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert (credits.requests, credits.bytes) == (0, 0)
    async with credits.hold(1, 1):  # the cancelled waiter left no place taken
        assert credits.bytes == 1
