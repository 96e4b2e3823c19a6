"""The mux master's splice takes its own reply out of the server's stream, wherever it falls."""

from __future__ import annotations

import struct

import pytest

from sshpipe.core import codec
from sshpipe.transport.muxsplice import Splice

OURS = 0xFFFFFFFF


def _packet(ptype: int, body: bytes) -> bytes:
    return struct.pack(">IB", len(body) + 1, ptype) + body


def _status(request_id: int) -> bytes:
    # id, code OK, empty message and language tag (filexfer-02 §7)
    return _packet(codec.FXP_STATUS, struct.pack(">IIII", request_id, 0, 0, 0))


def _stream() -> tuple[bytes, bytes, bytes]:
    before = _status(7)
    ours = _packet(codec.FXP_EXTENDED_REPLY, struct.pack(">I", OURS) + b"limits")
    after = _status(0) + _status(1)
    return before, ours, after


@pytest.mark.parametrize("chunk", [1, 3, 9, 17, 1000])
async def test_our_reply_is_taken_out_whatever_the_chunks(chunk: int) -> None:
    before, ours, after = _stream()
    splice = Splice(1024, frozenset())
    taken: list[bytes] = []
    splice.expect_reply(OURS, taken.append)
    stream = before + ours + after
    for at in range(0, len(stream), chunk):
        splice.data_received(stream[at : at + chunk], None)
    assert bytes(splice.buffer) == before + after
    assert taken == [ours]


async def test_after_our_reply_the_stream_passes_untouched() -> None:
    _, ours, _ = _stream()
    splice = Splice(1024, frozenset())
    taken: list[bytes] = []
    splice.expect_reply(OURS, taken.append)
    splice.data_received(ours, None)
    splice.data_received(ours, None)  # the same id again is the client's business now
    assert bytes(splice.buffer) == ours
    assert taken == [ours]
