"""The caps a server is found to impose, and the rules that learn them: tables."""

from __future__ import annotations

import pytest

from sshpipe.core.servercaps import (
    FLOOR_BLOCK,
    ServerCaps,
    after_handle_refusal,
    after_stall,
    handle_cap,
    probe_next,
)


@pytest.mark.parametrize(
    ("stated", "learned", "cap"),
    [
        (0, None, 64),  # none stated: under Green End's 128-slot table
        (0, 16, 16),
        (1024, None, 128),  # half of what is stated, at most 128
        (100, None, 50),
        (1, None, 1),
        (1024, 10, 10),
    ],
)
def test_handle_cap(stated: int, learned: int | None, cap: int) -> None:
    assert handle_cap(stated, learned) == cap


@pytest.mark.parametrize(("held", "cap"), [(0, None), (1, 1), (15, 15)])
def test_a_refused_open_teaches_a_cap_only_when_others_were_open(
    held: int, cap: int | None
) -> None:
    assert after_handle_refusal(held) == cap


@pytest.mark.parametrize(
    ("outstanding", "current", "requests"),
    [
        (128, 128, 32),
        (154, 154, 32),
        (64, 64, 16),
        (300, 128, 32),
        (1, 9, 8),
        (1, 8, 4),  # stalled again at the floor: the server's cap is lower
        (8, 8, 4),
        (4, 4, 2),
        (1, 1, 1),
        (20, 128, 8),
        (100, 100, 16),
        (100, 40, 8),
    ],
)
def test_after_stall(outstanding: int, current: int, requests: int) -> None:
    assert after_stall(outstanding, current) == requests


@pytest.mark.parametrize(
    ("asked", "returned", "block"),
    [
        (261120, 261120, 261120),  # whole
        (261120, 1 << 20, 261120),
        (261120, 100000, 65536),  # short: the largest probe block it covers
        (261120, 131072, 131072),
        (261120, 20000, FLOOR_BLOCK),
        (261120, None, FLOOR_BLOCK),  # refused: the floor, no second try
    ],
)
def test_probe_next(asked: int, returned: int | None, block: int) -> None:
    assert probe_next(asked, returned) == block


def test_learned_shows_only_what_was_found() -> None:
    caps = ServerCaps()
    assert caps.learned() == {}
    caps.handles, caps.read_block, caps.sequential_writes = 16, 65536, True
    assert caps.learned() == {"handles": 16, "read_block": 65536, "sequential_writes": True}


def test_the_channels_of_one_stall_cut_once_by_the_most_owed() -> None:
    caps = ServerCaps()
    for owed, now in ((33, 10.0), (154, 10.01), (83, 10.02)):
        caps.stalled(owed, now)
    assert caps.requests == 32  # 154 // 4, once: not 154 -> 38 -> 9
    caps.stalled(40, 20.0)  # a later stall, with 32 in force: it is cut again
    assert caps.requests == 8


def test_a_stall_of_a_channel_opened_after_the_last_one_cuts_again() -> None:
    """A reconnect's channel, stalling within the incident's window (a short stall timeout)."""
    caps = ServerCaps()
    caps.stalled(124, 10.0, owed_since=9.0)
    assert caps.requests == 16
    caps.stalled(30, 10.01, owed_since=9.0)  # another channel of the same stall
    assert caps.requests == 16
    caps.stalled(16, 11.5, owed_since=10.2)  # the next attempt's, asking 16 at once
    assert caps.requests == 8
    caps.stalled(8, 12.8, owed_since=11.6)
    assert caps.requests == 4


@pytest.mark.parametrize(
    ("unanswered", "channels"),
    [
        ([1], 1),  # the second channel of a connection never set up
        ([3], 3),
        ([3, 1], 1),  # the lowest seen holds
        ([1, 3], 1),
        ([0], 1),  # even its first: a connection still tries one
    ],
)
def test_a_set_up_left_unanswered_caps_the_channels_per_connection(
    unanswered: list[int], channels: int
) -> None:
    caps = ServerCaps()
    for opened in unanswered:
        caps.channel_unanswered(opened)
    assert caps.channels == channels
    assert caps.learned() == {"channels": channels}
