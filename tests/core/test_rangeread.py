"""The range planner (``core.rangeread``): blocks asked, short reads re-asked, EOF cuts.

Tables for the exact requests, and hypothesis driving ``RangeRead`` against a
simulated server that answers in any order with any length it may.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sshpipe.core.rangeread import RangeRead, cut, spans
from sshpipe.core.readplan import Range


def asked(read: RangeRead) -> list[Range]:
    out = []
    while (rng := read.next_range()) is not None:
        out.append(rng)
    return out


@pytest.mark.parametrize(
    ("offset", "length", "block", "expected"),
    [
        (0, 10, 4, [Range(0, 4), Range(4, 4), Range(8, 2)]),
        (5, 8, 4, [Range(5, 4), Range(9, 4)]),
        (7, 3, 100, [Range(7, 3)]),
        (3, 0, 4, []),
    ],
)
def test_a_range_is_asked_in_blocks(
    offset: int, length: int, block: int, expected: list[Range]
) -> None:
    read = RangeRead(offset, length, block)
    assert asked(read) == expected
    assert read.outstanding == len(expected)


def test_a_short_reply_is_asked_again_at_offset_plus_received_first() -> None:
    read = RangeRead(0, 8, 4)
    first, second = read.next_range(), read.next_range()
    assert (first, second) == (Range(0, 4), Range(4, 4))
    read.on_data(Range(0, 4), b"ab")
    assert read.short_reads == 1 and read.wants
    assert read.next_range() == Range(2, 2)
    read.on_data(Range(2, 2), b"cd")
    read.on_data(Range(4, 4), b"efgh")
    assert read.done and read.result() == b"abcdefgh"


def test_eof_cuts_the_range_and_what_is_left_of_it() -> None:
    read = RangeRead(0, 12, 4)
    assert len(asked(read)) == 3
    read.on_data(Range(0, 4), b"abc")  # short: its rest is owed
    read.on_eof(Range(8, 4))
    read.on_data(Range(4, 4), b"efgh")
    assert read.next_range() == Range(3, 1)
    read.on_eof(Range(3, 1))  # the file ends at 3 after all
    assert read.done and read.stop == 3
    assert read.result() == b"abc"  # bytes past the EOF are not the file's


def test_nothing_is_asked_past_an_eof() -> None:
    read = RangeRead(0, 100, 10)
    first = read.next_range()
    assert first is not None
    read.on_eof(first)
    assert read.next_range() is None and read.done and read.result() == b""


def test_a_lost_reply_leaves_nothing_owed_and_a_put_back_is_asked_first() -> None:
    read = RangeRead(0, 8, 4)
    rng = read.next_range()
    assert rng is not None
    read.put_back(rng)
    assert read.next_range() == rng
    read.on_lost(rng)
    assert read.outstanding == 0


def test_an_overlong_reply_is_refused() -> None:
    read = RangeRead(0, 4, 4)
    rng = read.next_range()
    assert rng is not None
    with pytest.raises(ValueError):
        read.on_data(rng, b"12345")


@pytest.mark.parametrize(
    ("ranges", "expected"),
    [
        ([], []),
        ([(5, 0)], []),
        ([(10, 5), (0, 3)], [Range(0, 3), Range(10, 5)]),
        ([(0, 5), (3, 5), (8, 2)], [Range(0, 10)]),  # overlapping, then touching
        ([(0, 100), (10, 5)], [Range(0, 100)]),  # contained
        ([(20, 5), (0, 5), (22, 10)], [Range(0, 5), Range(20, 12)]),
    ],
)
def test_spans_merge_what_overlaps_or_touches(
    ranges: list[tuple[int, int]], expected: list[Range]
) -> None:
    assert spans(ranges) == expected


def test_a_negative_range_is_refused() -> None:
    with pytest.raises(ValueError):
        spans([(-1, 4)])
    with pytest.raises(ValueError):
        spans([(0, -4)])


@settings(max_examples=30, deadline=None)
@given(
    size=st.integers(0, 300),
    ranges=st.lists(st.tuples(st.integers(0, 350), st.integers(0, 120)), max_size=8),
    block=st.integers(8, 64),
    data=st.data(),
)
def test_any_ranges_read_from_any_server_come_back_as_pread_would(
    size: int, ranges: list[tuple[int, int]], block: int, data: st.DataObject
) -> None:
    """Replies in any order and of any length from 1 to asked; EOF at ``size``."""
    content = bytes(i % 251 for i in range(size))
    covered = []
    for span in spans(ranges):
        read = RangeRead(span.offset, span.length, block)
        owed: list[Range] = []
        while not read.done:
            while (rng := read.next_range()) is not None:
                owed.append(rng)
            rng = owed.pop(data.draw(st.integers(0, len(owed) - 1)))
            if rng.offset >= size:
                read.on_eof(rng)
                continue
            most = min(rng.length, size - rng.offset)
            got = data.draw(st.integers(1, most))
            read.on_data(rng, content[rng.offset : rng.offset + got])
        covered.append((span, read.result()))
    assert cut(ranges, covered) == [content[o : o + n] for o, n in ranges]
