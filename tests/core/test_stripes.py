"""Who copies which bytes when worker processes share a file (``core.stripes``)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sshpipe.core.readplan import Range, missing
from sshpipe.core.stripes import ALIGN, others, stripes, worker_count

MiB = 1 << 20


@pytest.mark.parametrize(
    ("owed", "workers", "expected"),
    [
        ([Range(0, 10 * MiB)], 2, [[Range(0, 5 * MiB)], [Range(5 * MiB, 5 * MiB)]]),
        # 9.5 MiB: each share rounds up to whole MiB, the last takes the rest.
        (
            [Range(0, 9 * MiB + MiB // 2)],
            2,
            [[Range(0, 5 * MiB)], [Range(5 * MiB, 4 * MiB + MiB // 2)]],
        ),
        # Fewer pieces than workers: fewer parts, never an empty one.
        ([Range(0, MiB + 1)], 4, [[Range(0, MiB)], [Range(MiB, 1)]]),
        # A resume's gaps: a part may hold several.
        (
            [Range(0, MiB), Range(3 * MiB, MiB), Range(8 * MiB, 2 * MiB)],
            2,
            [[Range(0, MiB), Range(3 * MiB, MiB)], [Range(8 * MiB, 2 * MiB)]],
        ),
        ([], 3, []),
    ],
)
def test_stripes_table(owed: list[Range], workers: int, expected: list[list[Range]]) -> None:
    assert stripes(owed, workers) == expected


@given(
    st.lists(st.tuples(st.integers(0, 64 * MiB), st.integers(1, 8 * MiB)), max_size=8),
    st.integers(1, 16),
)
def test_stripes_cover_what_is_owed_once(pairs: list[tuple[int, int]], workers: int) -> None:
    size = 80 * MiB
    owed = missing(size, [Range(offset, length) for offset, length in pairs])
    parts = stripes(owed, workers)
    assert len(parts) <= workers
    assert all(part for part in parts)
    flat = [rng for part in parts for rng in part]
    assert sum(rng.length for rng in flat) == sum(rng.length for rng in owed)
    assert missing(size, flat) == missing(size, owed)  # same union
    assert all(a.end <= b.offset for a, b in itertools.pairwise(flat))  # disjoint
    # A cut that splits one of the owed ranges falls on ALIGN.
    for part in parts[1:]:
        cut = part[0].offset
        if any(rng.offset < cut < rng.end for rng in owed):
            assert cut % ALIGN == 0, (cut, owed)


def test_others_is_what_a_worker_counts_as_had() -> None:
    assert others(10, [Range(2, 3)]) == [Range(0, 2), Range(5, 5)]
    assert others(10, [Range(0, 10)]) == []


@pytest.mark.parametrize(
    ("requested", "size", "expected"),
    [
        (None, 10 << 30, 1),  # auto: one process (no measured win yet)
        (2, 10 * MiB, 2),  # forced: as asked
        (8, 3 * MiB, 3),  # never more than the file has pieces
        (4, 0, 1),  # nothing to share
        (4, None, 1),  # size unknown
    ],
)
def test_worker_count(requested: int | None, size: int | None, expected: int) -> None:
    assert worker_count(requested, size=size) == expected


def test_stripes_refuses_no_workers() -> None:
    with pytest.raises(ValueError):
        stripes([Range(0, 1)], 0)
