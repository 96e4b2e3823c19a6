"""FlightBudget: the request and byte caps of one transfer.

ReadPump's protocol: ``has_room(block)`` -> ``send(length)`` (length <= block);
on the reply ``reply(length, kept)`` with the payload bytes still held; as they
reach disk or the reader ``free(count)``. WritePump: ``send(len)``, then
``reply(len, 0)`` on the server's ack.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sshpipe.core.flight import FlightBudget, SharedBytes


@pytest.mark.parametrize(("requests", "nbytes"), [(0, 1), (1, 0), (-1, 10), (5, -5)])
def test_caps_must_be_positive(requests: int, nbytes: int) -> None:
    with pytest.raises(ValueError):
        FlightBudget(max_requests=requests, max_bytes=nbytes)


@pytest.mark.parametrize(
    ("max_requests", "max_bytes", "in_flight", "length", "room"),
    [
        (4, 100, [], 100, True),  # exactly the byte cap
        (4, 100, [], 1000, True),  # an empty pipe admits one oversize request
        (4, 100, [1], 99, True),  # fills to the cap exactly
        (4, 100, [1], 100, False),  # one byte over
        (4, 100, [60], 41, False),
        (4, 100, [1000], 1, False),  # nothing joins an oversize request
        (4, 100, [1000], 0, False),
        (2, 100, [1, 1], 1, False),  # request cap
        (2, 100, [1, 1], 0, False),
        (1, 100, [], 5000, True),
        (1, 100, [5000], 1, False),
        (3, 10**9, [2**20, 2**20], 2**20, True),
    ],
)
def test_has_room(
    max_requests: int, max_bytes: int, in_flight: list[int], length: int, room: bool
) -> None:
    budget = FlightBudget(max_requests=max_requests, max_bytes=max_bytes)
    for n in in_flight:
        budget.send(n)
    assert budget.has_room(length) is room


def test_empty_pipe_means_nothing_charged_not_nothing_outstanding() -> None:
    budget = FlightBudget(max_requests=4, max_bytes=100)
    assert budget.has_room(1000)
    budget.send(1000)
    assert not budget.has_room(1)
    budget.reply(1000, kept=1000)  # answered, but the payload is still in memory
    assert budget.requests == 0 and budget.bytes == 1000
    assert not budget.has_room(1)  # buffered bytes count: memory stays bounded
    budget.free(600)
    assert not budget.has_room(1)
    budget.free(400)
    assert budget.bytes == 0
    assert budget.has_room(1000)  # empty again: the next oversize block may go


def test_reply_and_free_accounting() -> None:
    budget = FlightBudget(max_requests=8, max_bytes=1000)
    for n in (100, 200, 300):
        budget.send(n)
    assert (budget.requests, budget.bytes) == (3, 600)
    budget.reply(200, kept=200)  # full DATA reply, buffered
    assert (budget.requests, budget.bytes) == (2, 600)
    budget.reply(300, kept=120)  # short read: the unfilled 180 bytes are released at once
    assert (budget.requests, budget.bytes) == (1, 420)
    budget.reply(100, kept=0)  # EOF, a write ack, or an error: nothing kept
    assert (budget.requests, budget.bytes) == (0, 320)
    budget.free(320)
    assert (budget.requests, budget.bytes) == (0, 0)
    assert (budget.peak_requests, budget.peak_bytes) == (3, 600)


def test_peaks_are_high_water_marks() -> None:
    budget = FlightBudget(max_requests=3, max_bytes=50)
    budget.send(10)
    budget.send(30)
    budget.reply(10, 0)
    budget.send(20)
    budget.send(0)
    assert (budget.peak_requests, budget.peak_bytes) == (3, 50)
    budget.reply(30, 0)
    budget.reply(20, 0)
    budget.reply(0, 0)
    assert (budget.requests, budget.bytes) == (0, 0)
    assert (budget.peak_requests, budget.peak_bytes) == (3, 50)
    budget.send(500)  # oversize into the empty pipe
    assert budget.peak_bytes == 500


@settings(max_examples=300, deadline=None)
@given(
    max_requests=st.integers(1, 16),
    max_bytes=st.integers(1, 5000),
    block=st.integers(1, 4000),
    ops=st.lists(st.tuples(st.sampled_from("srf"), st.integers(0, 2**16)), max_size=200),
)
def test_read_pump_protocol_keeps_caps(
    max_requests: int, max_bytes: int, block: int, ops: list[tuple[str, int]]
) -> None:
    """Drive the budget like ReadPump; it never exceeds its caps by more than the
    one oversize block an empty pipe admits, and ends empty."""
    budget = FlightBudget(max_requests=max_requests, max_bytes=max_bytes)
    out: list[int] = []  # lengths of requests in flight
    kept = 0  # bytes answered but not yet freed
    peak_requests = peak_bytes = 0
    for op, n in ops:
        if op == "s":
            if not budget.has_room(block):
                # refused only at a cap, never when nothing is charged
                assert budget.requests >= max_requests or budget.bytes > 0
                continue
            length = 1 + n % block
            budget.send(length)
            out.append(length)
        elif op == "r" and out:
            length = out.pop(n % len(out))
            got = n % (length + 1)
            budget.reply(length, got)
            kept += got
        elif op == "f" and kept:
            count = 1 + n % kept
            budget.free(count)
            kept -= count
        assert budget.requests == len(out) <= max_requests
        assert budget.bytes == sum(out) + kept
        assert budget.bytes <= max(max_bytes, block)
        peak_requests = max(peak_requests, budget.requests)
        peak_bytes = max(peak_bytes, budget.bytes)
    assert (budget.peak_requests, budget.peak_bytes) == (peak_requests, peak_bytes)
    for length in out:
        budget.reply(length, 0)
    budget.free(kept)
    assert (budget.requests, budget.bytes) == (0, 0)
    assert budget.has_room(max(max_bytes, block) + 1) is True


def test_members_with_nothing_charged_keep_a_block_of_the_shared_cap() -> None:
    shared = SharedBytes(1000)
    shared.members = 3  # three leases, of which only the first has a budget yet
    first = FlightBudget(max_requests=64, max_bytes=1000, shared=shared)
    assert first.has_room(100)
    first.send(100)
    assert shared.busy == 1
    while first.has_room(100):
        first.send(100)
    # The two members with nothing yet keep 100 each of the 1000.
    assert (shared.bytes, first.blocks(100)) == (800, 0)
    late = FlightBudget(max_requests=64, max_bytes=1000, shared=shared)
    assert late.has_room(100)  # its block was kept for it
    late.send(100)
    assert shared.bytes == 900 and shared.busy == 2
    assert not late.has_room(100)  # the third member's block is still kept
    assert "members=3 busy=2" in repr(shared)
    # A transfer over: what it still has charged leaves the cap; later frees stay its own.
    first.release()
    assert (shared.bytes, shared.busy) == (100, 1)
    first.free(800)
    assert shared.bytes == 100 and first.shared is None


def test_with_nothing_charged_a_transfer_waits_in_line_for_a_block_that_fits() -> None:
    """200 transfers on a cap of 4 blocks: 4 hold a block, the others are granted
    theirs in the order they asked, each as soon as a block comes free."""
    shared = SharedBytes(400)
    shared.members = 200
    granted: list[int] = []
    budgets = []
    for i in range(200):
        budget = FlightBudget(max_requests=64, max_bytes=400, shared=shared)
        budget.on_room = lambda i=i: granted.append(i)  # type: ignore[misc]
        budgets.append(budget)
    for budget in budgets:
        if budget.has_room(100):
            budget.send(100)
    assert [b.bytes for b in budgets[:5]] == [100, 100, 100, 100, 0]
    assert (shared.bytes, shared.waiting) == (400, 196)
    assert not budgets[0].has_room(100)  # busy: the 196 in line come first
    assert not budgets[4].has_room(100)  # in line: its grant comes in turn
    budgets[0].reply(100, 0)  # acknowledged: the first in line is granted the block
    assert granted == [4] and budgets[4].reserved == 100 and shared.bytes == 400
    assert not budgets[0].has_room(100)  # nothing charged, but it asks behind the line now
    assert shared.waiting == 196  # 195 behind 5..199, and the first again at the end
    assert budgets[4].has_room(100)  # the grant is its to send
    budgets[4].send(100)
    assert (budgets[4].reserved, budgets[4].bytes, shared.bytes) == (0, 100, 400)
    budgets[1].reply(100, 0)
    budgets[2].reply(100, 0)
    assert granted == [4, 5, 6]
    budgets[5].stop_asking()  # granted but ended: the block goes to the next in line
    assert granted == [4, 5, 6, 7] and budgets[5].bytes == 0 and shared.bytes == 400
    budgets[8].release()  # in line and gone: out of it
    budgets[3].reply(100, 0)
    assert granted[-1] == 9


def test_a_block_larger_than_the_shared_cap_goes_when_nothing_is_charged() -> None:
    shared = SharedBytes(100)
    one, two = (FlightBudget(max_requests=8, max_bytes=100, shared=shared) for _ in range(2))
    woken: list[str] = []
    two.on_room = lambda: woken.append("two")
    assert one.has_room(1000)
    one.send(1000)
    assert not two.has_room(1000)  # one oversize block at a time
    one.reply(1000, 0)
    assert woken == ["two"] and two.reserved == 1000 and shared.bytes == 1000


def test_reserved_bytes_are_charged_before_the_send_that_uses_them() -> None:
    shared = SharedBytes(1000)
    budget = FlightBudget(max_requests=8, max_bytes=1000, shared=shared)
    assert budget.blocks(100) == 10
    budget.reserve(300)  # three blocks being read from the disk
    assert (budget.bytes, shared.bytes, budget.blocks(100)) == (300, 300, 10)
    budget.send(100)
    budget.send(100)
    budget.send(60)  # a short last block
    assert (budget.reserved, budget.bytes, budget.requests) == (40, 300, 3)
    budget.unreserve()
    assert (budget.reserved, budget.bytes, shared.bytes) == (0, 260, 260)
    budget.send(100)  # nothing reserved: charged as it goes
    assert budget.bytes == 360 and budget.peak_bytes == 360


def test_bytes_held_outside_the_pipe_count_in_the_shared_cap() -> None:
    shared = SharedBytes(1000)
    budget = FlightBudget(max_requests=8, max_bytes=1000, shared=shared)
    budget.held = 700  # a verifying download's pieces, waiting to be hashed in order
    assert shared.bytes == 700
    other = FlightBudget(max_requests=8, max_bytes=1000, shared=shared)
    assert other.blocks(100) == 3
    budget.held = 0
    assert shared.bytes == 0
    budget.held = 50
    budget.release()
    assert shared.bytes == 0


@settings(max_examples=200, deadline=None)
@given(
    members=st.integers(1, 8),
    max_bytes=st.integers(1, 5000),
    block=st.integers(1, 1000),
    ops=st.lists(
        st.tuples(st.integers(0, 7), st.sampled_from("srfx"), st.integers(0, 2**16)),
        max_size=300,
    ),
)
def test_transfers_sharing_a_cap_stay_within_it_and_each_gets_its_turn(
    members: int, max_bytes: int, block: int, ops: list[tuple[int, str, int]]
) -> None:
    """Members drive budgets on one shared cap like ReadPumps: together they stay
    within the cap (a block larger than it alone in it); one refused with nothing
    charged waits in line and is granted a block in turn; once the others are done
    every one in line has had its turn; released budgets give everything back."""
    shared = SharedBytes(max_bytes)
    shared.members = members
    # One budget at first; the others start later, as their leases open their files.
    budgets: list[FlightBudget] = []
    out: list[list[int]] = []
    kept: list[int] = []
    asked: list[int] = []  # in line, in the order they were refused
    granted: list[int] = []

    def start() -> None:
        who = len(budgets)
        budget = FlightBudget(max_requests=16, max_bytes=max_bytes, shared=shared)
        budget.on_room = lambda: granted.append(who)
        budgets.append(budget)
        out.append([])
        kept.append(0)

    start()
    for who, op, n in ops:
        if who >= len(budgets):
            if len(budgets) < members:  # a late starter: a new budget
                start()
            continue
        budget = budgets[who]
        if op == "s":
            if not budget.has_room(block):
                if budget.bytes == 0 and who not in asked:
                    asked.append(who)
                assert budget.bytes > 0 or budget.requests >= 16 or who in asked
                continue
            budget.send(block)
            out[who].append(block)
        elif op == "r" and out[who]:
            length = out[who].pop(n % len(out[who]))
            got = n % (length + 1)
            budget.reply(length, got)
            kept[who] += got
        elif op == "f" and kept[who]:
            count = 1 + n % kept[who]
            budget.free(count)
            kept[who] -= count
        for i in granted:
            if i in asked:
                asked.remove(i)
        reserved = sum(b.reserved for b in budgets)
        charged = sum(sum(o) + k for o, k in zip(out, kept, strict=True)) + reserved
        assert shared.bytes == charged
        assert shared.bytes <= max(max_bytes, block)
        assert shared.busy == sum(1 for b in budgets if b.bytes > 0)
        assert shared.waiting == len(asked)
    order = list(granted)
    # The others finish what they hold: those in line are granted in turn, each
    # sending its block and finishing too.
    while any(out) or any(kept) or any(b.reserved for b in budgets):
        for who, budget in enumerate(budgets):
            if budget.reserved:
                budget.send(budget.reserved)
                out[who].append(block)
            for length in out[who]:
                budget.reply(length, 0)
            out[who] = []
            budget.free(kept[who])
            kept[who] = 0
    assert shared.waiting == 0
    assert granted[len(order) :] == [i for i in asked] or not asked
    for budget in budgets:
        budget.release()
    assert (shared.bytes, shared.busy) == (0, 0)
