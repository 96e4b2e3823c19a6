"""The parquet read-ahead planner (``core.parquetplan``): footers, chunks, the plan and its cap.

Tables for what one read plans, and hypothesis driving ``ColumnPrefetch``
with reads and batch endings in any order: what it holds never passes the
cap, and what it says covers a read does.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sshpipe.core.parquetplan import Chunk, ColumnPrefetch, chunks_in, footer_span

ROW_GROUPS = 4
COLUMNS = 3
SIZE = 100  # each chunk's length


def grid(row_groups: int = ROW_GROUPS, columns: int = COLUMNS, size: int = SIZE) -> list[Chunk]:
    """Row groups one after the other, each its columns in order, from offset 4."""
    return [
        Chunk(4 + (r * columns + c) * size, size, r, c)
        for r in range(row_groups)
        for c in range(columns)
    ]


def at(chunks: list[Chunk], r: int, c: int) -> Chunk:
    (chunk,) = [x for x in chunks if (x.row_group, x.column) == (r, c)]
    return chunk


@pytest.mark.parametrize(
    ("size", "offset", "data", "expected"),
    [
        (1000, 900, b"x" * 92 + (50).to_bytes(4, "little") + b"PAR1", (942, 50)),
        (1000, 990, b"xx" + (50).to_bytes(4, "little") + b"PAR1", (942, 50)),  # starts earlier
        (1000, 900, b"x" * 100, None),  # no magic
        (1001, 900, b"x" * 92 + (50).to_bytes(4, "little") + b"PAR1", None),  # not the tail
        (1000, 900, b"x" * 92 + (0).to_bytes(4, "little") + b"PAR1", None),  # empty
        (1000, 900, b"x" * 92 + (989).to_bytes(4, "little") + b"PAR1", None),  # over the head
        (1000, 996, b"PAR1", None),  # too short to say
    ],
)
def test_footer_span(size: int, offset: int, data: bytes, expected: tuple[int, int] | None) -> None:
    assert footer_span(size, offset, data) == expected


def test_chunks_in_keeps_the_sane_ones_by_offset() -> None:
    good = [Chunk(4, 10, 0, 0), Chunk(14, 10, 0, 1), Chunk(30, 5, 1, 0)]
    bad = [
        Chunk(0, 10, 2, 0),  # over the leading magic
        Chunk(36, 0, 2, 1),  # empty
        Chunk(95, 10, 2, 2),  # past the data's end
        Chunk(20, 8, 3, 0),  # overlaps the one before
        Chunk(-5, 3, 3, 1),
    ]
    assert chunks_in([*reversed(good), *bad], data_end=100) == good


def test_the_first_read_of_a_column_plans_its_other_chunks() -> None:
    chunks = grid()
    plan = ColumnPrefetch(chunks, cap=10_000)
    assert plan.on_read(0, 4).planned == []  # the magic: no chunk, nothing learned
    first = at(chunks, 0, 1)
    step = plan.on_read(first.offset, first.length)
    assert step.planned == [at(chunks, r, 1) for r in range(1, ROW_GROUPS)]
    assert step.released == []
    assert plan.learned == [1]
    assert plan.speculative == (ROW_GROUPS - 1) * SIZE
    # The next column adds its own, and a read of a planned chunk plans nothing new.
    second = at(chunks, 0, 2)
    assert plan.on_read(second.offset, second.length).planned == [
        at(chunks, r, 2) for r in range(1, ROW_GROUPS)
    ]
    assert plan.on_read(at(chunks, 2, 1).offset, SIZE).planned == []


def test_remaining_means_not_read_yet_in_any_order() -> None:
    """A reader that starts in row group 2 still gets row groups 0, 1 and 3 planned."""
    chunks = grid()
    plan = ColumnPrefetch(chunks, cap=10_000)
    assert plan.on_read(at(chunks, 2, 0).offset, SIZE).planned == [
        at(chunks, r, 0) for r in (0, 1, 3)
    ]


def test_cover_needs_every_byte_in_chunks_asked_for() -> None:
    chunks = grid()
    plan = ColumnPrefetch(chunks, cap=10_000)
    plan.on_read(at(chunks, 0, 0).offset, SIZE)
    plan.on_read(at(chunks, 0, 1).offset, SIZE)
    a, b = at(chunks, 1, 0), at(chunks, 1, 1)
    assert plan.cover(a.offset, SIZE) == [a]
    assert plan.cover(a.offset + 10, 20) == [a]
    assert plan.cover(a.offset, 2 * SIZE) == [a, b]  # two adjacent chunks, one read
    assert plan.cover(a.offset, 3 * SIZE) is None  # column 2 was never asked for
    assert plan.cover(a.offset - 1, 10) is None  # a byte of a chunk read already
    assert plan.cover(a.offset, 0) is None


def test_the_cap_plans_the_nearest_first_and_tops_up_as_chunks_are_read() -> None:
    chunks = grid()
    plan = ColumnPrefetch(chunks, cap=2 * SIZE + 50)
    step = plan.on_read(at(chunks, 0, 0).offset, SIZE)
    assert step.planned == [at(chunks, 1, 0), at(chunks, 2, 0)]
    assert plan.speculative == 2 * SIZE
    assert plan.landed(step.planned, ok=True) == step.planned
    # Column 1 learned: no room yet. Row group 1's chunk read: room for one more,
    # the nearest row group's of either column (row group 1, column 1).
    assert plan.on_read(at(chunks, 0, 1).offset, SIZE).planned == []
    step = plan.on_read(at(chunks, 1, 0).offset, SIZE)
    assert step.released == [at(chunks, 1, 0)]
    assert step.planned == [at(chunks, 1, 1)]
    assert plan.peak == 2 * SIZE


def test_a_chunk_bigger_than_the_cap_is_never_planned() -> None:
    chunks = grid(size=1000)
    plan = ColumnPrefetch(chunks, cap=999)
    assert plan.on_read(at(chunks, 0, 0).offset, 10).planned == []
    assert plan.peak == 0


def test_a_chunk_read_while_in_flight_holds_its_bytes_until_the_batch_lands() -> None:
    chunks = grid()
    plan = ColumnPrefetch(chunks, cap=10_000)
    batch = plan.on_read(at(chunks, 0, 0).offset, SIZE).planned
    plan.on_read(batch[0].offset, SIZE)  # went to the server: its bytes still come
    assert plan.speculative == 3 * SIZE
    assert plan.landed(batch, ok=True) == batch[1:]
    assert plan.speculative == 2 * SIZE


def test_a_failed_batch_is_given_up_not_asked_again() -> None:
    chunks = grid()
    plan = ColumnPrefetch(chunks, cap=10_000)
    batch = plan.on_read(at(chunks, 0, 0).offset, SIZE).planned
    assert plan.landed(batch, ok=False) == []
    assert plan.speculative == 0
    assert plan.cover(batch[0].offset, SIZE) is None
    assert plan.on_read(at(chunks, 0, 1).offset, SIZE).planned == [
        at(chunks, r, 1) for r in range(1, ROW_GROUPS)
    ]
    plan.give_up([at(chunks, 1, 1)])
    assert plan.speculative == 2 * SIZE


reads = st.lists(
    st.tuples(
        st.sampled_from(["read", "land", "fail", "give_up"]),
        st.integers(0, 4 + ROW_GROUPS * COLUMNS * SIZE + 10),
        st.integers(1, 3 * SIZE),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(reads, st.integers(0, 6 * SIZE))
def test_the_plan_never_holds_more_than_the_cap(ops: list[tuple[str, int, int]], cap: int) -> None:
    chunks = grid()
    plan = ColumnPrefetch(chunks, cap)
    flying: list[list[Chunk]] = []
    held: set[Chunk] = set()
    for op, offset, length in ops:
        if op == "read":
            covered = plan.cover(offset, length)
            if covered is not None:  # what covers a read holds all of it, contiguously
                assert covered[0].offset <= offset and covered[-1].end >= offset + length
                assert all(a.end == b.offset for a, b in pairwise(covered))
            step = plan.on_read(offset, length)
            assert set(step.released) <= held
            held -= set(step.released)
            if step.planned:
                flying.append(step.planned)
        elif op in ("land", "fail") and flying:
            held |= set(plan.landed(flying.pop(0), ok=op == "land"))
        elif op == "give_up" and held:
            gone = sorted(held)[:1]
            plan.give_up(gone)
            held -= set(gone)
        assert 0 <= plan.speculative <= cap
        assert plan.peak <= cap
    for batch in flying:
        held |= set(plan.landed(batch, ok=True))
    assert plan.speculative == sum(c.length for c in held)
