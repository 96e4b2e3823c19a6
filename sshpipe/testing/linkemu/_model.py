"""The link model of one direction, and the link's configuration (pure).

No sockets, no event loop, no clock: every method that needs the time takes
``now`` (seconds on any monotonic clock), so the proxy drives it with
``loop.time()`` and the tests drive it with a table of numbers.

One direction is a serializing bottleneck followed by a fixed propagation
delay, the textbook picture of a WAN path (and what ``tc netem delay rate
limit`` builds)::

    source ──► bottleneck queue ──► serializer (rate) ──► delay (rtt/2) ──► receiver

A chunk of ``n`` bytes arriving at ``now`` finishes serialization at
``t_s = max(now, previous t_s) + n * 8 / rate`` and is delivered at
``t_s + rtt / 2``. The queue is the bytes not yet serialized; the proxy reads
from its source only while that backlog is at most ``queue`` bytes, which is
how a full bottleneck pushes back on the sender without dropping anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: Smallest default bottleneck queue. One BDP is the classic router sizing rule,
#: but a tiny BDP (fast local links) would leave the proxy no slack for its own
#: scheduling jitter: 1 MiB is 8 ms at 1 Gbit/s, several timer ticks.
MIN_DEFAULT_QUEUE = 1 << 20

#: With an unlimited rate nothing is ever serialized, so only this cap bounds
#: the bytes held in the delay line. 64 MiB is four times the largest SSH window
#: sshpipe opens by default (16 MiB): the emulator never limits an SSH transfer.
UNLIMITED_RATE_IN_FLIGHT = 64 << 20

#: Headroom of the in-flight cap over what a receiver that keeps up can make us
#: hold (one read past the queue limit, deliveries a few timer ticks late).
#: The cap exists to bound memory when the receiver is slower than the link.
_IN_FLIGHT_HEADROOM = 1 << 20
_LATE_SECONDS = 0.01


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkSpec:
    """The emulated link, the same in both directions.

    Example: ``LinkSpec(rtt=0.1, rate=1e9)`` is a 1 Gbit/s path with 100 ms
    round trip and a one-BDP (12.5 MB) queue per direction.

    Attributes:
        rtt: round-trip time in seconds; each direction delays ``rtt / 2``.
        rate: bits per second per direction; ``None`` is unlimited.
        queue: bytes of bottleneck queue per direction; ``None`` is one
            bandwidth-delay product (``rate * rtt / 8``), at least 1 MiB.

    Raises:
        ValueError: a negative or non-finite rtt, a rate or queue below one.
    """

    rtt: float = 0.0
    rate: float | None = None
    queue: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rtt) and self.rtt >= 0):
            raise ValueError(f"rtt must be a finite number of seconds >= 0, not {self.rtt!r}")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate >= 1):
            raise ValueError(f"rate must be at least 1 bit per second or None, not {self.rate!r}")
        if self.queue is not None and (
            isinstance(self.queue, bool) or not isinstance(self.queue, int) or self.queue < 1
        ):
            raise ValueError(
                f"queue must be a whole number of bytes >= 1 or None, not {self.queue!r}"
            )

    @property
    def queue_bytes(self) -> int:
        """The bottleneck queue per direction, with the default resolved."""
        if self.queue is not None:
            return self.queue
        if self.rate is None:
            return MIN_DEFAULT_QUEUE
        return max(MIN_DEFAULT_QUEUE, math.ceil(self.rate * self.rtt / 8))


@dataclass(frozen=True, kw_only=True, slots=True)
class LinkStats:
    """Counters of a link emulator since ``start()``.

    Attributes:
        bytes_up: bytes delivered client -> target.
        bytes_down: bytes delivered target -> client.
        connections: client connections accepted.
        active: proxied connections still open.
        cpu_seconds: ``time.process_time()`` spent by the whole process; it is
            the emulator's own cost only when it runs alone (the CLI).
        wall_seconds: time since ``start()``.
        peak_buffered: most bytes one direction of one connection held at once
            (queued, propagating, or waiting for a paused receiver).
    """

    bytes_up: int
    bytes_down: int
    connections: int
    active: int
    cpu_seconds: float
    wall_seconds: float
    peak_buffered: int = 0


class LinkModel:
    """One direction of the link: the serializer, its queue, the delay, and flow control.

    The queue is tracked as a fluid: ``backlog(now)`` is the bytes not yet
    serialized, a chunk in the middle of serialization counting for the part
    still to go. That keeps every operation O(1) with no per-chunk state; the
    chunks themselves live in the proxy's delay line.

    Besides the queue, the model counts ``undelivered`` bytes (admitted, not yet
    handed to the receiver) against ``in_flight_limit``. With a receiver that
    keeps up that count never exceeds the queue plus ``rate * delay``; the cap
    only bites when the receiver is slower than the link, where it bounds the
    memory the delay line can take.

    Args:
        rate: bits per second; ``None`` is unlimited (serialization takes no time).
        delay: one-way propagation delay in seconds (``rtt / 2``).
        queue: bottleneck queue in bytes; reading pauses above it.
    """

    __slots__ = (
        "_bytes_per_second",
        "_last_delivery",
        "_queued",
        "_since",
        "_stalled_until",
        "delay",
        "in_flight_limit",
        "in_flight_resume",
        "peak_undelivered",
        "queue",
        "resume_level",
        "undelivered",
    )

    def __init__(self, *, rate: float | None, delay: float, queue: int) -> None:
        if rate is not None and rate <= 0:
            raise ValueError("rate must be positive or None")
        if delay < 0 or queue < 1:
            raise ValueError("delay must be >= 0 and queue >= 1")
        self._bytes_per_second = None if rate is None else rate / 8
        self.delay = delay
        self.queue = queue
        # Hysteresis: resume reading only once a quarter of the queue has
        # drained, so a source sending faster than the link toggles reading
        # (an epoll_ctl each way) every queue/4 bytes, not on every read.
        self.resume_level = queue - max(1, queue // 4)
        if rate is None:
            in_flight = UNLIMITED_RATE_IN_FLIGHT
        else:
            in_flight = round(rate / 8 * (delay + _LATE_SECONDS))
        self.in_flight_limit = queue + in_flight + _IN_FLIGHT_HEADROOM
        self.in_flight_resume = self.in_flight_limit - (queue - self.resume_level)
        self.undelivered = 0
        self.peak_undelivered = 0
        # The backlog was _queued bytes at time _since; it drains at the rate
        # from max(_since, _stalled_until) on.
        self._queued = 0.0
        self._since = 0.0
        self._stalled_until = -math.inf
        self._last_delivery = -math.inf

    @classmethod
    def from_spec(cls, spec: LinkSpec) -> LinkModel:
        return cls(rate=spec.rate, delay=spec.rtt / 2, queue=spec.queue_bytes)

    def __repr__(self) -> str:
        return (
            f"<LinkModel rate={self.rate!r} delay={self.delay} queue={self.queue} "
            f"undelivered={self.undelivered}>"
        )

    @property
    def rate(self) -> float | None:
        """Bits per second, ``None`` for unlimited."""
        return None if self._bytes_per_second is None else self._bytes_per_second * 8

    @property
    def stalled_until(self) -> float:
        """Nothing is serialized or delivered before this time (``-inf`` if never stalled)."""
        return self._stalled_until

    def _remaining(self, now: float) -> float:
        if self._bytes_per_second is None:
            return self._queued if now < self._stalled_until else 0.0
        start = max(self._since, self._stalled_until)
        if now <= start:
            return self._queued
        return max(0.0, self._queued - (now - start) * self._bytes_per_second)

    def backlog(self, now: float) -> int:
        """Bytes admitted but not yet serialized onto the link at ``now``."""
        return round(self._remaining(now))

    def admit(self, now: float, nbytes: int) -> float:
        """A chunk of ``nbytes`` arrives at ``now``; returns the time it is delivered.

        ``nbytes`` may be 0 (an end of stream travels like an empty chunk: it
        arrives after everything queued before it, one delay later).
        """
        queued = self._remaining(now) + nbytes
        self._queued = queued
        self._since = now
        start = max(now, self._stalled_until)
        serialized = (
            start if self._bytes_per_second is None else start + queued / self._bytes_per_second
        )
        self.undelivered += nbytes
        self.peak_undelivered = max(self.peak_undelivered, self.undelivered)
        # FIFO even where floats round the other way (an empty chunk after a
        # long one came out 1e-12 s early: hypothesis found it).
        self._last_delivery = max(serialized + self.delay, self._last_delivery)
        return self._last_delivery

    def delivered(self, nbytes: int) -> None:
        """``nbytes`` admitted earlier were handed to the receiver."""
        self.undelivered -= nbytes

    def stall(self, now: float, seconds: float) -> None:
        """Freeze the serializer from ``now`` for ``seconds``: the queue fills and does not drain.

        Overlapping stalls end at the latest of their ends.
        """
        self._queued = self._remaining(now)
        self._since = now
        self._stalled_until = max(self._stalled_until, now + seconds)

    def reading_allowed(self, now: float, *, reading: bool) -> bool:
        """Whether the source may be read at ``now``, given whether it is being read now.

        Reading stops when the backlog exceeds the queue (or the bytes held
        exceed the in-flight cap) and starts again only below the lower
        resume levels.
        """
        if reading:
            return self._remaining(now) <= self.queue and self.undelivered <= self.in_flight_limit
        return (
            self._remaining(now) <= self.resume_level and self.undelivered <= self.in_flight_resume
        )

    def resume_time(self, now: float) -> float | None:
        """When the backlog drains to the resume level; ``None`` if it already has.

        The in-flight cap has no such time: it is freed by deliveries, which
        the proxy sees as they happen.
        """
        if self._remaining(now) <= self.resume_level:
            return None
        if self._bytes_per_second is None:
            return self._stalled_until
        start = max(self._since, self._stalled_until)
        return start + (self._queued - self.resume_level) / self._bytes_per_second
