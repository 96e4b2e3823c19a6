"""The read planner, driven the way ReadPump drives it, against a simulated server.

ReadPump's loop is: while there is room, ``next_range()`` and send a READ; on a
DATA reply ``on_data(rng, n)`` (0 < n <= rng.length), on an EOF status
``on_eof(rng)``, on a lost request ``on_retry(rng)``; stop at ``plan.done`` and
keep ``plan.final_size`` bytes. The simulation below does the same, with the
server answering outstanding requests in any order, with short reads, and
checking every request the planner makes.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from sshpipe.core.readplan import Range, ReadPlan

# -- the simulated server and driver ------------------------------------------------


class Chooser(Protocol):
    """The server's whims: which request to answer, how much, whether it is lost."""

    def index(self, n: int) -> int: ...
    def count(self, avail: int) -> int: ...
    def lose(self) -> bool: ...


class Fifo:
    """Answer the oldest request, fully (as far as the file and cap allow)."""

    def index(self, n: int) -> int:
        return 0

    def count(self, avail: int) -> int:
        return avail

    def lose(self) -> bool:
        return False


@dataclass
class RandomChooser:
    rnd: random.Random
    order: str  # "fifo", "lifo" or "random"
    short_p: float
    lose_p: float

    def index(self, n: int) -> int:
        if self.order == "fifo":
            return 0
        if self.order == "lifo":
            return n - 1
        return self.rnd.randrange(n)

    def count(self, avail: int) -> int:
        return self.rnd.randint(1, avail) if self.rnd.random() < self.short_p else avail

    def lose(self) -> bool:
        return self.rnd.random() < self.lose_p


@dataclass
class DrawChooser:
    """Every choice drawn by hypothesis, so failures shrink to the simplest schedule."""

    data: st.DataObject
    may_lose: bool

    def index(self, n: int) -> int:
        return self.data.draw(st.integers(0, n - 1))  # shrinks to FIFO

    def count(self, avail: int) -> int:
        return avail - self.data.draw(st.integers(0, avail - 1))  # shrinks to full reads

    def lose(self) -> bool:
        return self.may_lose and self.data.draw(st.integers(0, 15)) == 15


@dataclass
class Sim:
    """A server holding ``master[:size]`` and a driver keeping up to ``inflight`` READs out."""

    plan: ReadPlan
    master: bytes
    size: int
    inflight: int
    chooser: Chooser
    cap: int | None = None  # the server returns at most this many bytes per READ
    # called before each answer with the request about to be answered
    before_answer: Callable[[Sim, Range], None] | None = None
    # ranges the planner may ask again: a short read's remainder, a lost
    # request, and (once the file grows past an EOF) a range answered EOF
    remainders: Counter[Range] = field(default_factory=Counter)
    lost: Counter[Range] = field(default_factory=Counter)
    parked: Counter[Range] = field(default_factory=Counter)
    allow_parked: bool = False
    # most requests allowed so far (checked as they are made, so a runaway stops early)
    limit: Callable[[Sim], int] | None = None

    outstanding: list[Range] = field(default_factory=list)
    issued: list[Range] = field(default_factory=list)
    result: bytearray = field(default_factory=bytearray)
    asked: bytearray = field(default_factory=bytearray)  # 1 = offset was asked for
    got: bytearray = field(default_factory=bytearray)  # 1 = byte arrived
    eof_offsets: list[int] = field(default_factory=list)
    eof_sizes: list[int] = field(default_factory=list)  # file size when each EOF was sent
    events: list[tuple[str, int]] = field(default_factory=list)  # ("eof", offset), ("data", end)
    data_replies: int = 0
    short_replies: int = 0
    losses: int = 0
    reissued: int = 0
    max_data_end: int = 0

    def _grow(self, end: int) -> None:
        for buf in (self.result, self.asked, self.got):
            if len(buf) < end:
                buf.extend(bytes(end - len(buf)))

    def issue(self, rng: Range) -> None:
        assert rng.length > 0, rng
        self._grow(rng.end)
        for pool in (self.remainders, self.lost, self.parked):
            if pool[rng] > 0 and (pool is not self.parked or self.allow_parked):
                pool[rng] -= 1
                self.reissued += 1
                break
        else:
            # A fresh range: nothing in it was ever asked for before.
            assert self.asked.find(1, rng.offset, rng.end) == -1, (
                f"{rng} overlaps an earlier request; issued so far: {self.issued}"
            )
            self.asked[rng.offset : rng.end] = b"\x01" * rng.length
        self.issued.append(rng)
        self.outstanding.append(rng)
        if self.limit is not None:
            assert len(self.issued) <= self.limit(self), f"too many requests: {self.plan!r}"

    def fill(self) -> None:
        while len(self.outstanding) < self.inflight:
            rng = self.plan.next_range()
            if rng is None:
                break
            self.issue(rng)
        assert self.plan.outstanding == len(self.outstanding)

    def answer(self) -> None:
        assert self.outstanding, f"planner stalled: {self.plan!r} not done, nothing asked"
        rng = self.outstanding.pop(self.chooser.index(len(self.outstanding)))
        if self.before_answer is not None:
            self.before_answer(self, rng)
        if self.chooser.lose():
            self.losses += 1
            self.lost[rng] += 1
            self.plan.on_retry(rng)
        elif rng.offset >= self.size:
            self.eof_offsets.append(rng.offset)
            self.eof_sizes.append(self.size)
            self.events.append(("eof", rng.offset))
            self.parked[rng] += 1
            self.plan.on_eof(rng)
        else:
            avail = min(rng.length, self.size - rng.offset, self.cap or rng.length)
            count = self.chooser.count(avail)
            assert 1 <= count <= avail
            end = rng.offset + count
            assert self.got.find(1, rng.offset, end) == -1, f"{rng} returned bytes twice"
            self.got[rng.offset : end] = b"\x01" * count
            self.result[rng.offset : end] = self.master[rng.offset : end]
            self.max_data_end = max(self.max_data_end, end)
            self.data_replies += 1
            self.events.append(("data", end))
            if count < rng.length:
                self.short_replies += 1
                self.remainders[Range(end, rng.length - count)] += 1
            self.plan.on_data(rng, count)

    def run(self, max_steps: int) -> None:
        steps = 0
        self.fill()
        while not self.plan.done:
            steps += 1
            assert steps <= max_steps, f"no end in sight: {self.plan!r}"
            self.answer()
            self.fill()
        assert not self.outstanding

    def assert_complete(self) -> int:
        """Every byte below final_size arrived, and holds the file's bytes there."""
        final = self.plan.final_size
        self._grow(final)
        assert self.got.find(0, 0, final) == -1, "a byte below final_size never arrived"
        assert bytes(self.result[:final]) == self.master[:final]
        assert final in self.eof_offsets, "final_size is not where the server said EOF"
        assert self.plan.short_reads == self.short_replies
        # ... and no data answered after that EOF contradicts it (a file that grew
        # past an EOF is read on until a new one)
        last = max(i for i, (kind, at) in enumerate(self.events) if kind == "eof" and at == final)
        later = [end for kind, end in self.events[last + 1 :] if kind == "data"]
        assert all(end <= final for end in later), f"EOF at {final} contradicted by {later}"
        return final


def make_file(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def fifo_run(size: int, hint: int | None, block: int, inflight: int) -> Sim:
    plan = ReadPlan(block_size=block, size_hint=hint)
    sim = Sim(plan, make_file(size), size, inflight, Fifo(), limit=request_bound)
    sim.run(max_steps=10_000)
    assert sim.assert_complete() == size
    return sim


# -- table tests ----------------------------------------------------------------------


def R(offset: int, length: int) -> Range:
    return Range(offset, length)


@pytest.mark.parametrize(
    ("size", "hint", "block", "inflight", "expected", "changed"),
    [
        # empty file: one probe past the hint finds EOF
        (0, 0, 4, 8, [R(0, 4)], False),
        (0, None, 4, 1, [R(0, 4)], False),
        (0, None, 4, 3, [R(0, 4), R(4, 4), R(8, 4)], False),
        # exact multiple of the block: the last block is full, then the probe
        (8, 8, 4, 8, [R(0, 4), R(4, 4), R(8, 4)], False),
        # block + 1: the last READ asks for just the one byte the hint says is left
        (9, 9, 4, 8, [R(0, 4), R(4, 4), R(8, 1), R(9, 4)], False),
        # block - 1
        (3, 3, 4, 8, [R(0, 3), R(3, 4)], False),
        (7, 7, 4, 8, [R(0, 4), R(4, 3), R(7, 4)], False),
        # size unknown: blocks until EOF; the READ over the end comes back short and
        # its remainder is asked once more to tell "short" from "end"
        (8, None, 4, 1, [R(0, 4), R(4, 4), R(8, 4)], False),
        (6, None, 4, 1, [R(0, 4), R(4, 4), R(6, 2)], False),
        # ... with 3 in flight, two blocks past EOF are already out when it is seen
        (8, None, 4, 3, [R(0, 4), R(4, 4), R(8, 4), R(12, 4), R(16, 4)], False),
        # hint too large (file shrank): EOF inside the hinted size ends it
        (6, 12, 4, 1, [R(0, 4), R(4, 4), R(6, 2)], True),
        (4, 100, 4, 2, [R(0, 4), R(4, 4), R(8, 4)], True),
        # hint too small (file grew): the probe returns data, read on until EOF
        (10, 4, 4, 1, [R(0, 4), R(4, 4), R(8, 4), R(10, 2)], True),
        (10, 5, 4, 2, [R(0, 4), R(4, 1), R(5, 4), R(9, 4), R(13, 4), R(10, 3)], True),
        # block of one byte
        (2, 2, 1, 8, [R(0, 1), R(1, 1), R(2, 1)], False),
    ],
)
def test_requests_for_a_static_file(
    size: int,
    hint: int | None,
    block: int,
    inflight: int,
    expected: list[Range],
    changed: bool,
) -> None:
    sim = fifo_run(size, hint, block, inflight)
    assert sim.issued == expected
    assert sim.plan.changed is changed


@pytest.mark.parametrize("hint_delta", [-1, 0, 1])
@pytest.mark.parametrize("blocks", [0, 1, 5])
def test_block_boundaries(blocks: int, hint_delta: int) -> None:
    block = 32768
    size = max(0, blocks * block + hint_delta)
    sim = fifo_run(size, size, block, 64)
    assert not sim.plan.changed
    assert len(sim.issued) == math.ceil(size / block) + 1  # + the probe
    assert sim.issued[-1] == Range(size, block)


def test_short_read_is_asked_again_for_exactly_the_missing_range() -> None:
    plan = ReadPlan(block_size=10, size_hint=30)
    first = plan.next_range()
    assert first == Range(0, 10)
    plan.on_data(first, 3)
    assert plan.short_reads == 1
    again = plan.next_range()
    assert again == Range(3, 7)  # before any new block
    plan.on_data(again, 2)  # short again
    assert plan.next_range() == Range(5, 5)
    assert plan.next_range() == Range(10, 10)
    assert plan.short_reads == 2
    assert not plan.changed


def test_eof_before_hint_means_the_file_shrank() -> None:
    plan = ReadPlan(block_size=10, size_hint=100)
    a, b, c = plan.next_range(), plan.next_range(), plan.next_range()
    assert (a, b, c) == (Range(0, 10), Range(10, 10), Range(20, 10))
    assert a is not None and b is not None and c is not None
    plan.on_data(a, 10)
    plan.on_data(b, 5)  # short: [15, 20) still owed
    plan.on_eof(c)
    assert plan.changed and plan.eof_at == 20
    assert plan.next_range() == Range(15, 5)  # the hole below EOF is still asked
    assert plan.next_range() is None  # but nothing new past EOF
    assert not plan.done
    plan.on_eof(Range(15, 5))
    assert plan.done
    assert plan.final_size == 15


def test_data_past_the_hint_means_the_file_grew() -> None:
    plan = ReadPlan(block_size=10, size_hint=10)
    first, probe = plan.next_range(), plan.next_range()
    assert (first, probe) == (Range(0, 10), Range(10, 10))
    assert plan.next_range() is None  # only one probe past the hint
    assert first is not None and probe is not None
    plan.on_data(first, 10)
    plan.on_data(probe, 10)
    assert plan.changed
    # pipelining freely again: several blocks can go out at once
    assert [plan.next_range() for _ in range(3)] == [Range(20, 10), Range(30, 10), Range(40, 10)]
    plan.on_data(Range(20, 10), 4)
    plan.on_eof(Range(30, 10))
    plan.on_eof(Range(40, 10))
    assert plan.next_range() == Range(24, 6)
    plan.on_eof(Range(24, 6))
    assert plan.done and plan.final_size == 24


def test_data_past_an_eof_reopens_the_ranges_that_got_eof() -> None:
    plan = ReadPlan(block_size=10, size_hint=None)
    ranges = [plan.next_range() for _ in range(3)]
    assert ranges == [Range(0, 10), Range(10, 10), Range(20, 10)]
    plan.on_data(Range(0, 10), 10)
    plan.on_eof(Range(10, 10))
    assert plan.next_range() is None
    plan.on_data(Range(20, 10), 10)  # the file grew after that EOF
    assert plan.changed and plan.eof_at is None
    assert plan.next_range() == Range(10, 10)  # asked again
    assert plan.next_range() == Range(30, 10)


def test_lost_request_is_reissued() -> None:
    plan = ReadPlan(block_size=10, size_hint=20)
    a, b = plan.next_range(), plan.next_range()
    assert a is not None and b is not None
    plan.on_retry(a)
    assert plan.outstanding == 1
    assert plan.next_range() == a
    assert plan.outstanding == 2
    plan.on_data(a, 10)
    plan.on_data(b, 10)
    probe = plan.next_range()
    assert probe == Range(20, 10)
    plan.on_retry(probe)  # a lost probe is asked again too
    assert plan.next_range() == probe
    plan.on_eof(probe)
    assert plan.done and plan.final_size == 20 and not plan.changed


def test_not_done_while_requests_are_out() -> None:
    plan = ReadPlan(block_size=4, size_hint=None)
    a, b = plan.next_range(), plan.next_range()
    assert a is not None and b is not None
    plan.on_eof(a)
    assert not plan.done  # b is still out
    with pytest.raises(RuntimeError):
        _ = ReadPlan(block_size=4, size_hint=None).final_size
    plan.on_eof(b)
    assert plan.done and plan.final_size == 0


@pytest.mark.parametrize("count", [0, -1, 5])
def test_on_data_rejects_impossible_counts(count: int) -> None:
    plan = ReadPlan(block_size=4, size_hint=None)
    rng = plan.next_range()
    assert rng is not None
    with pytest.raises(ValueError):
        plan.on_data(rng, count)
    assert plan.outstanding == 1  # nothing was counted


@pytest.mark.parametrize("block", [0, -4])
def test_block_size_must_be_positive(block: int) -> None:
    with pytest.raises(ValueError):
        ReadPlan(block_size=block, size_hint=None)


def test_truncation_after_the_bytes_were_read_is_not_seen() -> None:
    """A known limit, not a bug: no READ can reveal a shrink below bytes already read.

    Every byte was read while the file had 20; it shrank to 10 before the probe was
    answered. EOF at 20 is consistent with a 10-byte file, so the result is the
    20-byte snapshot (ReadPump would need to re-read to see otherwise).
    """
    plan = ReadPlan(block_size=10, size_hint=20)
    a, b, probe = plan.next_range(), plan.next_range(), plan.next_range()
    assert a is not None and b is not None and probe is not None
    plan.on_data(a, 10)
    plan.on_data(b, 10)
    plan.on_eof(probe)  # answered after the shrink
    assert plan.done and plan.final_size == 20 and not plan.changed


# -- property: a static file, any schedule -----------------------------------------

BLOCKS = [1, 7, 4096, 32768]
CAPS = [None, 4096, 1000, 5]
HINTS = ["exact", "none", "small", "large"]


def pick_hint(kind: str, size: int, block: int, rnd: random.Random) -> int | None:
    if kind == "none":
        return None
    if kind == "small" and size > 0:
        return rnd.randrange(size)
    if kind == "large":
        return size + rnd.randint(1, 4 * block)
    return size


def request_bound(sim: Sim) -> int:
    """Fresh ranges below EOF, one split at a wrong hint, at most N past EOF
    before the first EOF answer (+1 per loss), plus one re-request per short
    read and per lost request. Holds at every moment, not just at the end."""
    return (
        math.ceil(sim.size / sim.plan.block_size)
        + 1
        + sim.inflight
        + sim.short_replies
        + 2 * sim.losses
    )


def check_static(sim: Sim) -> None:
    assert sim.assert_complete() == sim.size
    assert len(sim.issued) <= request_bound(sim), (len(sim.issued), sim.plan)
    assert len(sim.issued) == sim.data_replies + len(sim.eof_offsets) + sim.losses
    assert sim.reissued == sim.short_replies + sim.losses - sum(sim.remainders.values()) - sum(
        sim.lost.values()
    )
    # a static file never makes the planner re-ask a range that got EOF
    assert sim.parked.total() == len(sim.eof_offsets)


@st.composite
def static_setup(draw: st.DrawFn) -> tuple[int, int | None, int, int]:
    """(block, cap, inflight, size), sized so a run stays a few thousand steps."""
    block = draw(st.sampled_from(BLOCKS))
    cap = draw(st.sampled_from(CAPS))
    unit = min(block, cap or block)
    size = draw(st.integers(0, min(300 * 1024, 1000 * unit)))
    inflight = draw(st.integers(1, 128))
    return block, cap, inflight, size


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    setup=static_setup(),
    hint_kind=st.sampled_from(HINTS),
    order=st.sampled_from(["fifo", "lifo", "random"]),
    short_p=st.sampled_from([0.0, 0.2, 1.0]),
    lose_p=st.sampled_from([0.0, 0.0, 0.05]),
    rnd=st.randoms(use_true_random=True),
)
def test_static_file_any_schedule(
    setup: tuple[int, int | None, int, int],
    hint_kind: str,
    order: str,
    short_p: float,
    lose_p: float,
    rnd: random.Random,
) -> None:
    block, cap, inflight, size = setup
    hint = pick_hint(hint_kind, size, block, rnd)
    note(f"size={size} hint={hint} block={block} cap={cap} inflight={inflight}")
    plan = ReadPlan(block_size=block, size_hint=hint)
    chooser = RandomChooser(rnd, order, short_p, lose_p)
    sim = Sim(plan, make_file(size), size, inflight, chooser, cap=cap, limit=request_bound)
    sim.run(max_steps=50 * (size + 1) + 10 * inflight)
    check_static(sim)
    assert plan.changed is (hint is not None and hint != size)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    block=st.sampled_from([1, 7, 64, 512]),
    inflight=st.integers(1, 16),
    hint_kind=st.sampled_from(HINTS),
    cap=st.sampled_from([None, 5, 100]),
    may_lose=st.booleans(),
)
def test_static_file_drawn_schedule(
    data: st.DataObject,
    block: int,
    inflight: int,
    hint_kind: str,
    cap: int | None,
    may_lose: bool,
) -> None:
    """Small files, but every answer order and length is chosen (and shrunk) by hypothesis."""
    size = data.draw(st.integers(0, 12 * min(block, cap or block)), label="size")
    hint = data.draw(
        {
            "exact": st.just(size),
            "none": st.none(),
            "small": st.integers(0, max(0, size - 1)),
            "large": st.integers(size + 1, size + 3 * block),
        }[hint_kind],
        label="hint",
    )
    plan = ReadPlan(block_size=block, size_hint=hint)
    sim = Sim(
        plan,
        make_file(size),
        size,
        inflight,
        DrawChooser(data, may_lose),
        cap=cap,
        limit=request_bound,
    )
    sim.run(max_steps=50 * (size + 1) + 10 * inflight)
    check_static(sim)
    assert plan.changed is (hint is not None and hint != size)


# -- property: the file changes size mid-way ----------------------------------------


def changing_bound(versions: int, max_size: int) -> Callable[[Sim], int]:
    """A generous request cap for a file that takes ``versions`` sizes: per version,
    the blocks of the largest size, a split at the hint, N past EOF and N ranges
    parked at an EOF asked again; plus the re-requests of short reads and losses."""

    def bound(sim: Sim) -> int:
        per_version = math.ceil(max_size / sim.plan.block_size) + 2 * sim.inflight + 2
        return 2 * versions * per_version + sim.short_replies + 2 * sim.losses

    return bound


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    block=st.sampled_from([1, 7, 512, 4096]),
    inflight=st.integers(1, 32),
    before=st.integers(0, 40),
    after=st.integers(0, 40),
    at_step=st.integers(0, 60),
    drawn=st.booleans(),
    rnd=st.randoms(use_true_random=True),
)
def test_size_change_seen_by_the_planner(
    data: st.DataObject,
    block: int,
    inflight: int,
    before: int,
    after: int,
    at_step: int,
    drawn: bool,
    rnd: random.Random,
) -> None:
    """The file grows or shrinks once, while reads are in flight.

    The change happens at a chosen step, but at the latest just before the first
    answer that could show the old size (an EOF for a grow, bytes past the new
    end for a shrink): a change after that is undetectable by any READ schedule
    (see test_truncation_after_the_bytes_were_read_is_not_seen). Then the result
    must be the file as the server last described it, and ``changed`` set.
    """
    unit = max(1, block // 4)
    s0, s1 = before * unit, after * unit + rnd.randrange(unit)
    assume(s0 != s1)
    master = make_file(max(s0, s1))
    state = {"step": 0, "changed": False}

    def maybe_change(sim: Sim, rng: Range) -> None:
        state["step"] += 1
        if state["changed"]:
            return
        reveals = rng.offset >= s0 if s1 > s0 else rng.end > s1
        if reveals or state["step"] >= at_step:
            sim.size = s1
            state["changed"] = True

    chooser: Chooser = (
        DrawChooser(data, may_lose=False)
        if drawn
        else RandomChooser(rnd, "random", short_p=0.3, lose_p=0.0)
    )
    plan = ReadPlan(block_size=block, size_hint=s0)
    sim = Sim(
        plan,
        master,
        s0,
        inflight,
        chooser,
        before_answer=maybe_change,
        allow_parked=True,
        limit=changing_bound(2, max(s0, s1)),
    )
    sim.run(max_steps=20 * (max(s0, s1) + 1) + 10 * inflight)
    final = sim.assert_complete()
    assert final == s1
    assert final == sim.eof_sizes[-1]  # the size when the last EOF was answered
    assert plan.changed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block=st.sampled_from([1, 7, 512]),
    inflight=st.integers(2, 32),
    s0=st.integers(0, 30),
    extra=st.integers(1, 60),
    hint_small=st.booleans(),
    rnd=st.randoms(use_true_random=True),
)
def test_growth_right_after_an_eof(
    block: int,
    inflight: int,
    s0: int,
    extra: int,
    hint_small: bool,
    rnd: random.Random,
) -> None:
    """The file grows just after the first EOF is answered, with reads still out
    past it: if any of those returns data, the EOF was stale and the planner must
    ask again the ranges that got EOF and read on to the new end."""
    unit = max(1, block // 2)
    s0, s1 = s0 * unit, (s0 + extra) * unit
    state = {"grown": False}

    def grow(sim: Sim, rng: Range) -> None:
        if sim.eof_offsets and not state["grown"]:
            state["grown"] = True
            sim.size = s1

    plan = ReadPlan(block_size=block, size_hint=s0 // 2 if hint_small else None)
    chooser = RandomChooser(rnd, "random", short_p=0.2, lose_p=0.0)
    sim = Sim(
        plan,
        make_file(s1),
        s0,
        inflight,
        chooser,
        before_answer=grow,
        allow_parked=True,
        limit=changing_bound(2, s1),
    )
    sim.run(max_steps=20 * (s1 + 1) + 10 * inflight)
    final = sim.assert_complete()
    first_eof = sim.eof_offsets[0]
    if sim.max_data_end > first_eof:  # the first EOF was contradicted
        assert final == s1
        assert plan.changed
    else:  # nothing after the growth showed it: the file as it was
        assert final <= first_eof


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block=st.sampled_from([1, 7, 512, 4096]),
    inflight=st.integers(1, 64),
    hint_is_none=st.booleans(),
    sizes=st.lists(st.integers(0, 20_000), min_size=2, max_size=4),
    steps=st.lists(st.integers(0, 80), min_size=3, max_size=3),
    after_eof=st.booleans(),
    rnd=st.randoms(use_true_random=True),
)
def test_size_changes_at_any_time(
    block: int,
    inflight: int,
    hint_is_none: bool,
    sizes: list[int],
    steps: list[int],
    after_eof: bool,
    rnd: random.Random,
) -> None:
    """Grow and shrink at arbitrary moments: the planner still terminates, never asks
    a range twice (but for re-asks), and returns a consistent prefix: every byte
    below ``final_size`` as the server sent it, ending at an EOF the server said
    and nothing later contradicted.

    ``after_eof``: the i-th change comes right after the i-th EOF answer (while
    other reads are still out), the moment a grown file is easiest to miss.
    """
    sizes = [s // max(1, 4096 // block) for s in sizes]  # keep 1-byte blocks quick
    master = make_file(max(sizes))
    when = sorted(steps)[: len(sizes) - 1]
    state = {"step": 0, "next": 1}

    def change(sim: Sim, rng: Range) -> None:
        state["step"] += 1
        while state["next"] < len(sizes) and (
            len(sim.eof_offsets) >= state["next"]
            if after_eof
            else state["step"] >= when[state["next"] - 1]
        ):
            sim.size = sizes[state["next"]]
            state["next"] += 1

    hint = None if hint_is_none else sizes[0]
    plan = ReadPlan(block_size=block, size_hint=hint)
    chooser = RandomChooser(rnd, "random", short_p=0.3, lose_p=0.02)
    sim = Sim(
        plan,
        master,
        sizes[0],
        inflight,
        chooser,
        before_answer=change,
        allow_parked=True,
        limit=changing_bound(len(sizes), max(sizes)),
    )
    sim.run(max_steps=50 * (max(sizes) + 1) * len(sizes) + 20 * inflight)
    final = sim.assert_complete()
    assert final <= max(sizes)
    if sim.max_data_end > final:
        assert plan.changed  # we hold bytes the server later said are not there
    if hint is not None and final != hint:
        assert plan.changed


def test_a_limit_shortens_requests_and_keeps_the_rest_of_a_hole_owed() -> None:
    """Compression auto's probe train asks for short blocks, then full ones again."""
    plan = ReadPlan(block_size=10, size_hint=40)
    assert plan.next_range(4) == Range(0, 4)
    assert plan.next_range(4) == Range(4, 4)
    lost = plan.next_range()
    assert lost == Range(8, 10)
    plan.on_retry(lost)
    assert plan.next_range(3) == Range(8, 3)  # the hole's head ...
    assert plan.next_range() == Range(11, 7)  # ... and its rest, still owed
    assert plan.next_range() == Range(18, 10)
    assert plan.next_range(100) == Range(28, 10)  # never longer than a block
    assert plan.outstanding == 6
