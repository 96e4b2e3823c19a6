"""The read-ahead policy (``core.readahead``): grows with a sequential run, drops on a seek."""

from __future__ import annotations

import pytest

from sshpipe.core.readahead import ReadAhead

KiB = 1024


@pytest.mark.parametrize(
    ("reads", "windows"),
    [
        # Sequential from 0: a block at first, then as much as was read so far.
        ([(0, 64), (64, 64), (128, 128), (256, 256), (512, 512)], [100, 100, 128, 256, 512]),
        # Capped by the maximum.
        ([(0, 600), (600, 600), (1200, 600)], [100, 600, 1000]),
        # A seek reads nothing ahead; going on from there grows again.
        ([(0, 300), (5000, 10), (5010, 10), (5020, 200)], [100, 0, 100, 100]),
        # A read that starts where the last ended is sequential whatever its size.
        ([(0, 1), (1, 1), (2, 1)], [100, 100, 100]),
        # The first read elsewhere than 0 is a seek.
        ([(7, 50)], [0]),
    ],
)
def test_the_window_follows_the_pattern(reads: list[tuple[int, int]], windows: list[int]) -> None:
    policy = ReadAhead(minimum=100, maximum=1000)
    assert [policy.on_read(offset, length) for offset, length in reads] == windows
    assert policy.peak == max(windows)


def test_a_seek_heavy_pattern_stays_at_nothing() -> None:
    policy = ReadAhead(minimum=256 * KiB, maximum=8 * 1024 * KiB)
    for offset in range(100):
        policy.on_read(offset * 977 * KiB % (50 * 1024 * KiB), 4 * KiB)
    assert policy.peak <= 256 * KiB and policy.seeks >= 99


def test_a_short_read_at_the_end_keeps_the_next_one_sequential() -> None:
    policy = ReadAhead(minimum=100, maximum=1000)
    policy.on_read(0, 500)
    policy.ended(300)  # the file had 300 bytes
    assert policy.on_read(300, 500) == 500 and policy.seeks == 0


def test_no_read_ahead_at_all() -> None:
    policy = ReadAhead(minimum=100, maximum=0)
    assert [policy.on_read(o, 10) for o in (0, 10, 20)] == [0, 0, 0]


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        ReadAhead(minimum=-1, maximum=10)
