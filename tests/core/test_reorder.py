"""ReorderBuffer: pieces added in any order come out in offset order.

``stream()`` adds each DATA reply at its offset, pops what continues the
delivered prefix, and once the plan is done pops with ``limit=plan.eof_at`` and
discards the rest; what it buffers is charged to the flight budget, so
``buffered`` must always equal the bytes added and not yet popped or dropped.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sshpipe.core.reorder import ReorderBuffer


def cut(data: bytes, cuts: list[int]) -> list[tuple[int, bytes]]:
    bounds = [0, *sorted(set(cuts)), len(data)]
    return [(a, data[a:b]) for a, b in itertools.pairwise(bounds) if b > a]


@pytest.mark.parametrize(
    ("order", "expected_pops"),
    [
        ([0, 1, 2], [[b"aa"], [b"bbb"], [b"c"]]),
        ([2, 1, 0], [[], [], [b"aa", b"bbb", b"c"]]),
        ([1, 0, 2], [[], [b"aa", b"bbb"], [b"c"]]),
        ([0, 2, 1], [[b"aa"], [], [b"bbb", b"c"]]),
    ],
)
def test_out_of_order_adds_deliver_in_order(
    order: list[int], expected_pops: list[list[bytes]]
) -> None:
    pieces = [(0, b"aa"), (2, b"bbb"), (5, b"c")]
    buf = ReorderBuffer()
    pops = []
    for index in order:
        buf.add(*pieces[index])
        pops.append(buf.pop_ready())
    assert pops == expected_pops
    assert buf.delivered == 6 and buf.buffered == 0


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=2000),
    cuts=st.lists(st.integers(0, 2000), max_size=40),
    rnd=st.randoms(use_true_random=False),
    pop_every=st.integers(1, 5),
)
def test_any_order_any_pop_schedule(
    data: bytes, cuts: list[int], rnd: random.Random, pop_every: int
) -> None:
    pieces = cut(data, [c for c in cuts if c < len(data)])
    shuffled = list(pieces)
    rnd.shuffle(shuffled)
    buf = ReorderBuffer()
    out: list[bytes] = []
    added = 0
    for i, (offset, piece) in enumerate(shuffled, 1):
        buf.add(offset, piece)
        added += len(piece)
        if i % pop_every == 0:
            out.extend(buf.pop_ready())
        assert buf.buffered == added - sum(map(len, out))
        assert buf.delivered == sum(map(len, out))
    out.extend(buf.pop_ready())
    assert b"".join(out) == data
    assert buf.buffered == 0 and buf.discard() == 0


@pytest.mark.parametrize(
    ("limit", "expected", "delivered", "left"),
    [
        (0, [], 0, 9),
        (1, [b"a"], 1, 6),  # cut inside the first piece; the piece's bytes leave the buffer
        (3, [b"abc"], 3, 6),  # exactly at a piece boundary
        (4, [b"abc", b"d"], 4, 3),
        (9, [b"abc", b"def", b"ghi"], 9, 0),
        (50, [b"abc", b"def", b"ghi"], 9, 0),
        (None, [b"abc", b"def", b"ghi"], 9, 0),
    ],
)
def test_pop_ready_never_passes_limit(
    limit: int | None, expected: list[bytes], delivered: int, left: int
) -> None:
    buf = ReorderBuffer()
    for offset, piece in [(6, b"ghi"), (0, b"abc"), (3, b"def")]:
        buf.add(offset, piece)
    assert buf.pop_ready(limit) == expected
    assert buf.delivered == delivered
    assert buf.buffered == left


def test_limit_then_discard_frees_everything_past_eof() -> None:
    """The end of stream(): pop up to EOF, then drop what lies past it."""
    buf = ReorderBuffer()
    buf.add(0, b"0123")
    buf.add(8, b"89")  # past a shrunken EOF at 6
    buf.add(4, b"4567")
    before = buf.buffered
    assert buf.pop_ready(6) == [b"0123", b"45"]
    freed = before - buf.buffered
    assert freed == 8  # the whole piece at 4 left memory, though 2 bytes were cut
    assert buf.discard() == 2
    assert buf.buffered == 0
    assert buf.pop_ready() == []


def test_gap_holds_everything_after_it() -> None:
    buf = ReorderBuffer()
    buf.add(4, b"late")
    buf.add(8, b"later")
    assert buf.pop_ready() == []
    assert buf.buffered == 9 and buf.delivered == 0
    buf.add(0, b"head")
    assert buf.pop_ready() == [b"head", b"late", b"later"]


def test_start_offset() -> None:
    buf = ReorderBuffer(start=100)
    buf.add(100, b"x")
    assert buf.pop_ready() == [b"x"]
    assert buf.delivered == 101
    with pytest.raises(ValueError):
        ReorderBuffer(start=100).add(99, b"y")


def test_empty_piece_is_ignored() -> None:
    buf = ReorderBuffer()
    buf.add(0, b"")
    buf.add(5, b"")
    assert buf.buffered == 0 and buf.pop_ready() == []
    buf.add(0, b"ab")  # the empty piece at 0 did not take the slot
    assert buf.pop_ready() == [b"ab"]


@pytest.mark.parametrize(
    ("setup", "offset"),
    [
        pytest.param([(0, b"abc")], 0, id="same-offset-buffered"),
        pytest.param([(4, b"abc")], 4, id="same-offset-out-of-order"),
        pytest.param([(0, b"abc"), "pop"], 0, id="already-delivered"),
        pytest.param([(0, b"abc"), "pop"], 2, id="inside-delivered"),
        pytest.param([(0, b"abc"), (3, b"d"), "pop"], 3, id="below-delivered"),
    ],
)
def test_overlap_rejected(setup: list[tuple[int, bytes] | str], offset: int) -> None:
    buf = ReorderBuffer()
    for step in setup:
        if step == "pop":
            buf.pop_ready()
        else:
            assert isinstance(step, tuple)
            buf.add(*step)
    state = (buf.delivered, buf.buffered)
    with pytest.raises(ValueError, match="overlaps"):
        buf.add(offset, b"zz")
    assert (buf.delivered, buf.buffered) == state  # a rejected piece changes nothing
