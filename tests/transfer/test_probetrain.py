"""Compression auto's probe train: the link rate from a few replies, and when to trust it.

Times are given, not measured: the train is fed what the pump would see.
"""

from __future__ import annotations

import pytest

from sshpipe.core.compresspolicy import ZlibCost
from sshpipe.transfer.probetrain import TRAIN_BLOCK, TRAIN_BLOCKS, ProbeTrain

RTT = 0.040
LINK = 2.5e6  # 20 Mbit/s, in payload bytes/s
ZLIB = ZlibCost(compress=40e6, decompress=200e6)


def run_train(
    *, link: float, late_first: float = 0.0, cpu: float = 0.0, start: float = 10.0
) -> ProbeTrain:
    """A train of TRAIN_BLOCKS blocks sent at ``start`` over a link of ``link`` B/s.

    ``late_first``: seconds the loop handled the first reply late (busy);
    ``cpu``: the loop's CPU seconds over the whole train.
    """
    train = ProbeTrain()
    train.begin(start, 0.0)
    arrivals = [start + RTT + (i + 1) * TRAIN_BLOCK / link for i in range(TRAIN_BLOCKS)]
    arrivals[0] += late_first
    for index, at in enumerate(arrivals):
        used = cpu * (index + 1) / TRAIN_BLOCKS
        train.reply(at, TRAIN_BLOCK, rtt=RTT, cpu=used)
    return train


def test_a_calm_train_reads_the_link() -> None:
    train = run_train(link=LINK)
    assert train.rate == pytest.approx(LINK, rel=0.01)
    assert train.calm
    assert train.trusted(4.0, ZLIB)  # 10 MB/s compressed: far under zlib's 40


def test_a_first_reply_handled_late_does_not_read_the_link_high() -> None:
    """The spacing alone read 2.5x high; the whole train's time keeps it right."""
    train = run_train(link=LINK, late_first=0.040)
    spacing = (TRAIN_BLOCKS - 1) * TRAIN_BLOCK / (2 * TRAIN_BLOCK / LINK - 0.040)
    assert spacing > 2 * LINK
    assert train.rate == pytest.approx(LINK, rel=0.05)


def test_a_busy_loop_makes_the_train_untrusted() -> None:
    """Replies late because the loop computed (a key exchange): not the link's time."""
    fast = 125e6
    train = ProbeTrain()
    train.begin(0.0, 0.0)
    # A 1 Gbit/s link whose replies the loop handled 60 ms late, busy all along.
    for index in range(TRAIN_BLOCKS):
        at = RTT + 0.060 + (index + 1) * TRAIN_BLOCK / fast
        train.reply(at, TRAIN_BLOCK, rtt=RTT, cpu=0.060 * (index + 1) / TRAIN_BLOCKS + 0.03)
    assert train.rate is not None and train.rate < 5e6  # read low ...
    assert not train.calm
    assert not train.trusted(1.5, ZLIB)  # ... and not believed


def test_a_fast_link_is_left_to_the_flow_controller() -> None:
    train = run_train(link=125e6)
    assert train.calm
    assert not train.trusted(4.0, ZLIB)


def test_the_rate_waits_for_every_reply() -> None:
    train = ProbeTrain()
    train.begin(0.0, 0.0)
    for index in range(TRAIN_BLOCKS - 1):
        train.reply(RTT + (index + 1) * 0.026, TRAIN_BLOCK, rtt=RTT, cpu=0.0)
        assert train.rate is None
    train.reply(1.0, 0, rtt=RTT, cpu=0.0)  # an empty reply (EOF) is not one of the train's
    assert train.rate is None
