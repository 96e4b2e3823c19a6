"""A transfer's sizes (pure): block size, lane cap, channel capacity, request cap;
and what a READ's reply means (``classify_read``)."""

from __future__ import annotations

import pytest

from sshpipe.core import codec
from sshpipe.core.errors import ProtocolError
from sshpipe.core.readplan import EOF, Range, classify_read
from sshpipe.core.sizing import (
    FALLBACK_BLOCK_SIZE,
    MAX_AUTO_BLOCK_SIZE,
    UNKNOWN_WINDOW,
    block_size,
    channel_capacity,
    lane_cap,
    sizing,
)
from sshpipe.core.untrusted import MIN_BLOCK_SIZE

KiB = 1024
OPENSSH = codec.Limits(
    max_packet_len=256 * KiB, max_read_len=255 * KiB, max_write_len=255 * KiB, max_open_handles=0
)


@pytest.mark.parametrize(
    ("configured", "limits", "write", "expected"),
    [
        (64 * KiB, OPENSSH, False, 64 * KiB),  # the user's choice wins
        (None, None, False, FALLBACK_BLOCK_SIZE),  # no limits@openssh.com
        (None, OPENSSH, False, 255 * KiB),
        (None, codec.Limits(0, 4096 * KiB, 1024 * KiB, 0), True, MAX_AUTO_BLOCK_SIZE),
        (None, codec.Limits(64 * KiB, 0, 0, 0), False, 63 * KiB),  # under the packet length
        (None, codec.Limits(0, 100, 100, 0), True, MIN_BLOCK_SIZE),  # not believed below 4 KiB
    ],
)
def test_block_size(
    configured: int | None, limits: codec.Limits | None, write: bool, expected: int
) -> None:
    assert block_size(configured, limits, write=write) == expected


def test_lane_caps_hold_our_window_or_one_and_a_half_of_the_servers() -> None:
    assert lane_cap(4 * 1024 * KiB, write=False) == 4 * 1024 * KiB
    assert lane_cap(2 * 1024 * KiB, write=True) == 3 * 1024 * KiB
    assert lane_cap(0, write=False) == UNKNOWN_WINDOW


def test_channel_capacity_is_the_window_within_the_channels_requests() -> None:
    args = {"requests": 64, "block": 32 * KiB, "default_window": 15 * 1024 * KiB}
    assert channel_capacity(1024 * KiB, write=False, **args) == 1024 * KiB
    assert (
        channel_capacity(0, write=False, **args) == 64 * 32 * KiB
    )  # 15 MiB window, 2 MiB of requests
    assert channel_capacity(1024 * KiB, write=True, **args) == 1280 * KiB


def test_requests_are_per_channel_and_the_total_has_its_own_name() -> None:
    sizes = sizing(
        configured_block=None,
        requests=16,
        default_window=15 * 1024 * KiB,
        limits=OPENSSH,
        window=0,
        write=False,
    )
    assert (sizes.block, sizes.requests) == (255 * KiB, 16)
    assert [sizes.request_cap(lanes) for lanes in (0, 1, 4)] == [16, 16, 64]


RNG = Range(4096, 1000)


@pytest.mark.parametrize(
    ("reply", "meaning"),
    [
        (codec.Data(1, [b"x" * 1000], 1000), "data"),
        (codec.Data(1, [b"x"], 1), "data"),  # a short read: data, the plan asks for the rest
        (codec.Status(1, codec.FX_EOF, ""), "eof"),
        (codec.Status(1, codec.FX_FAILURE, "no"), "status"),
        (codec.Data(1, [b""], 0), "protocol"),
        (codec.Data(1, [b"x" * 1001], 1001), "protocol"),
        (codec.Handle(1, b"h"), "protocol"),
        (ConnectionError("cut"), "exception"),
    ],
)
def test_classify_read(reply: codec.Reply | BaseException, meaning: str) -> None:
    outcome = classify_read("/f", RNG, reply)
    if meaning == "data":
        assert outcome is reply
    elif meaning == "eof":
        assert outcome is EOF
    elif meaning in ("status", "exception"):
        assert outcome is reply
    else:
        assert isinstance(outcome, ProtocolError) and "/f" in str(outcome)
