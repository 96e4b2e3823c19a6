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


@pytest.mark.parametrize(
    ("achieved", "switches", "expected"),
    [
        (None, 1, Route.COMPRESSED),  # no rate yet: stays
        (12 * MB, 1, Route.COMPRESSED),  # paid off
        (2.4 * MB, 1, Route.COMPRESSED),  # within LEAVE_SHARE of plain: not flipped
        (1.5 * MB, 1, Route.PLAIN),  # the server's zlib was the bottleneck: back, once
        (1.5 * MB, 2, Route.COMPRESSED),  # moved twice already: stays (hysteresis)
    ],
)
def test_from_compressed(achieved: float | None, switches: int, expected: Route) -> None:
    measured = Measured(ratio=5.5, link_rate=2.5 * MB, rtt=0.04, compressed_rate=achieved)
    decision = decide(Route.COMPRESSED, measured, ZLIB_37, switches=switches)
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
