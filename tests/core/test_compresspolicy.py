"""The Compression auto policy as a table: compressibility x link rate x zlib rate -> route."""

from __future__ import annotations

import os

import pytest

from sshpipe.core.compresspolicy import (
    Measured,
    Route,
    ZlibCost,
    decide,
    ratio_of,
    route_by_name,
)

ZLIB_37 = ZlibCost(compress=37e6, decompress=300e6)  # the CPU
MB = 1e6


@pytest.mark.parametrize(
    ("ratio", "link", "cost", "remaining", "expected"),
    [
        (5.5, 2.5 * MB, ZLIB_37, None, Route.COMPRESSED),  # 20 Mbit/s, CSV: link-bound
        (5.5, 58 * MB, ZLIB_37, None, Route.PLAIN),  # 1 Gbit/s: zlib-bound
        (1.0, 2.5 * MB, ZLIB_37, None, Route.PLAIN),  # random data
        (1.1, 2.5 * MB, ZLIB_37, None, Route.PLAIN),  # barely shrinks
        (1.2, 2.5 * MB, ZLIB_37, None, Route.PLAIN),  # gain under ENTER_GAIN
        (5.5, 30 * MB, ZLIB_37, None, Route.PLAIN),  # gain 1.23: not enough
        (5.5, 2.5 * MB, ZlibCost(compress=2e6, decompress=9e6), None, Route.PLAIN),  # slow CPU
        (5.5, 2.5 * MB, ZLIB_37, 200_000, Route.PLAIN),  # too little left to repay set-up
        (5.5, 2.5 * MB, ZLIB_37, 20_000_000, Route.COMPRESSED),
        (None, 2.5 * MB, ZLIB_37, None, Route.PLAIN),  # not sampled yet
        (5.5, None, ZLIB_37, None, Route.PLAIN),  # not measured yet
    ],
)
def test_from_plain(
    ratio: float | None, link: float | None, cost: ZlibCost, remaining: int | None, expected: Route
) -> None:
    measured = Measured(ratio=ratio, link_rate=link, rtt=0.04, remaining=remaining)
    decision = decide(Route.PLAIN, measured, cost)
    assert decision.route is expected, decision.reason


C, P = Route.COMPRESSED, Route.PLAIN


@pytest.mark.parametrize(
    ("achieved", "ratio", "link", "mean", "switches", "expected", "retest"),
    [
        # no rate yet: stays
        (None, 5.5, 2.5 * MB, None, 1, C, False),
        # paid off: the link carried 2.2 of 2.5
        (12 * MB, 5.5, 2.5 * MB, None, 1, C, False),
        # within LEAVE_SHARE of plain: not flipped
        (2.4 * MB, 1.5, 2.5 * MB, None, 1, C, False),
        # the server's zlib was the bottleneck: back, for good
        (1.5 * MB, 5.5, 2.5 * MB, None, 1, P, False),
        # moved thrice already: stays (hysteresis)
        (1.5 * MB, 5.5, 2.5 * MB, None, 3, C, False),
        # against the lower of the chosen rate and the plain stretch's mean (an
        # upload's train read 4.7 MB/s on a 2.5 MB/s link) ...
        (4.0 * MB, 1.5, 4.7 * MB, 2.5 * MB, 1, C, False),
        # ... and against 4.7 alone it is a loss
        (4.0 * MB, 1.5, 4.7 * MB, None, 1, P, False),
        # 1 Gbit/s under load: plain read 5.4 MB/s, compressed ran 9.5 at ratio
        # 4.16, the link carrying 2.3 (under half): re-test plain, though the
        # plain stretch's mean (1.9) was lower still
        (9.5 * MB, 4.16, 5.4 * MB, 1.9 * MB, 1, P, True),
        # 20 Mbit/s get: 2.76 plain, 11.1 compressed, the link full (2.7): stays
        (11.1 * MB, 4.16, 2.76 * MB, 1.6 * MB, 1, C, False),
        # the re-test is once: compressed again after it, it stays
        (9.5 * MB, 4.16, 5.4 * MB, 1.9 * MB, 3, C, False),
    ],
)
def test_from_compressed(
    achieved: float | None,
    ratio: float,
    link: float,
    mean: float | None,
    switches: int,
    expected: Route,
    retest: bool,
) -> None:
    measured = Measured(
        ratio=ratio, link_rate=link, rtt=0.04, compressed_rate=achieved, plain_mean=mean
    )
    decision = decide(Route.COMPRESSED, measured, ZLIB_37, switches=switches)
    assert (decision.route, decision.retest) == (expected, retest), decision.reason


@pytest.mark.parametrize(
    ("fresh", "switches", "retested", "expected"),
    [
        (60 * MB, 2, True, Route.PLAIN),  # 1 Gbit/s afresh: plain wins, for good
        (9.0 * MB, 2, True, Route.PLAIN),  # compressed 9.5 not 1.25x better: plain
        (2.5 * MB, 2, True, Route.COMPRESSED),  # a thin link after all: compress again
        (None, 2, True, Route.PLAIN),  # not measured afresh yet: stays
        (2.5 * MB, 2, False, Route.PLAIN),  # back for good (no re-test): never again
        (2.5 * MB, 3, True, Route.PLAIN),  # moved thrice: never again
    ],
)
def test_after_retest(fresh: float | None, switches: int, retested: bool, expected: Route) -> None:
    measured = Measured(
        ratio=4.16, link_rate=fresh, rtt=0.02, compressed_rate=9.5 * MB, retested=retested
    )
    decision = decide(Route.PLAIN, measured, ZLIB_37, switches=switches)
    assert decision.route is expected, decision.reason
    assert decision.route is expected, decision.reason


@pytest.mark.parametrize(
    ("link", "cpu_per_byte", "upload", "expected"),
    [
        (20 * MB, 1 / (20 * MB), True, Route.PLAIN),  # CPU-bound already: zlib only adds
        (20 * MB, 1 / (20 * MB), False, Route.PLAIN),  # inflating is cheap, the server's zlib not
        (2.5 * MB, 1 / (100 * MB), True, Route.COMPRESSED),  # link-bound: CPU to spare
        (2.5 * MB, 1 / (100 * MB), False, Route.COMPRESSED),
    ],
)
def test_the_cpu_already_spent_counts(
    link: float, cpu_per_byte: float, upload: bool, expected: Route
) -> None:
    measured = Measured(
        ratio=4.4, link_rate=link, rtt=0.02, cpu_per_byte=cpu_per_byte, upload=upload
    )
    cost = ZlibCost(compress=30e6, decompress=240e6)
    decision = decide(Route.PLAIN, measured, cost)
    assert decision.route is expected, decision.reason


def test_a_ready_connection_costs_no_set_up() -> None:
    measured = Measured(ratio=5.5, link_rate=2.5 * MB, rtt=0.04, remaining=200_000, ready=True)
    assert decide(Route.PLAIN, measured, ZLIB_37).route is Route.COMPRESSED


def test_no_third_move_from_plain() -> None:
    measured = Measured(ratio=5.5, link_rate=2.5 * MB, rtt=0.04)
    assert decide(Route.PLAIN, measured, ZLIB_37, switches=2).route is Route.PLAIN


def test_ratio_of_text_and_noise() -> None:
    text = b"".join(b"%d,2026-12-02,host%d,ok\n" % (i, i % 89) for i in range(8000))
    text_ratio, noise_ratio = ratio_of([text]), ratio_of([os.urandom(len(text))])
    assert text_ratio is not None and text_ratio > 3
    assert noise_ratio is not None and noise_ratio < 1.01
    assert ratio_of([]) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [("a.gz", Route.PLAIN), ("b.MP4", Route.PLAIN), ("c.csv", None), ("Makefile", None)],
)
def test_route_by_name(name: str, expected: Route | None) -> None:
    assert route_by_name(name) is expected
