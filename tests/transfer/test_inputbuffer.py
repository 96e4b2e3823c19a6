"""The receive buffer that keeps each read as it came (``asyncssh_patches.inputbuffer``).

Every operation is checked against the ``bytes`` asyncssh would have held;
the real connections run it in tests/integration/connect/test_asyncssh_patches.py.
"""

from __future__ import annotations

import random

import pytest

from sshpipe.transport.asyncssh_patches.inputbuffer import InputBuffer


def test_a_packet_inside_one_read_is_a_view_of_that_read() -> None:
    read = bytes(range(200)) * 10
    buf = InputBuffer()
    buf += read
    buf.consume(100)
    view = buf.front(300)
    assert view.obj is read  # no copy
    assert bytes(view) == read[100:400]


def test_a_packet_across_reads_is_joined_from_what_it_needs_alone() -> None:
    first, second = b"a" * 1000, b"b" * 5000
    buf = InputBuffer()
    buf += first
    buf += second
    buf.consume(900)
    view = buf.front(300)  # 100 bytes of the first read, 200 of the second
    assert bytes(view) == b"a" * 100 + b"b" * 200
    assert len(view.obj) == 300  # type: ignore[arg-type]  # the join: those bytes only
    buf.consume(300)
    after = buf.front(1000)
    assert after.obj is second  # the rest of the second read is still read in place
    assert bytes(after) == b"b" * 1000


def test_what_asyncssh_does_with_its_buffer_matches_bytes() -> None:
    """``+=``, len, truth, ``[:n]``, ``[a:b]``, ``[n:]`` and ``find``, at random."""
    rng = random.Random(7)
    ours = InputBuffer(b"SSH-2.0-x\r\n")
    stock = b"SSH-2.0-x\r\n"
    assert ours.find(b"\n", 0, 255) == stock.find(b"\n", 0, 255)
    for _ in range(2000):
        action = rng.randrange(5)
        if action == 0:
            data = rng.randbytes(rng.randrange(0, 3000))
            ours += data if rng.random() < 0.8 else bytearray(data)
            stock += data
        elif action == 1:
            n = rng.randrange(0, len(stock) + 50)
            assert ours[:n] == stock[:n]
        elif action == 2:
            a = rng.randrange(0, len(stock) + 10)
            b = rng.randrange(0, len(stock) + 10)
            assert ours[a:b] == stock[a:b]
        elif action == 3:
            n = rng.randrange(0, len(stock) // 3 + 2)
            returned = ours[n:]
            assert returned is ours
            stock = stock[n:]
        else:
            n = rng.randrange(0, len(stock) + 10)
            assert bytes(ours.front(n)) == stock[:n]
        assert len(ours) == len(stock) and bool(ours) == bool(stock)
    assert ours.find(b"\x00\x01") == stock.find(b"\x00\x01")


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, None), (0, 5), (0, 12), (3, 9), (0, 100), (2, -3), (-6, None), (-15, 12), (9, 4)],
)
def test_find_is_bytes_find_over_what_is_buffered(start: int, end: int | None) -> None:
    stock = b"SSH-2.0-x\r\nrest\n"
    ours = InputBuffer(stock[:7])
    ours += stock[7:]
    for sub in (b"\n", b"SSH", b"rest", b"nope"):
        assert ours.find(sub, start, end) == stock.find(sub, start, end)


def test_a_mutable_read_is_copied_as_it_may_change() -> None:
    data = bytearray(b"x" * 100)
    buf = InputBuffer()
    buf += data
    data[:] = b"y" * 100
    assert buf[:100] == b"x" * 100


def test_reading_backwards_is_refused() -> None:
    buf = InputBuffer(b"abc")
    with pytest.raises(ValueError):
        buf[::-1]
