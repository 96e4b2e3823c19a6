"""Flow control: how many bytes to keep in flight, and over how many channels (pure).

One SSH channel carries at most ``window / RTT`` (RFC 4254 §5.2): 2 MiB per
round trip on stock sshd's session channels, ~20 MB/s at 100 ms. For a
download the window is ours to choose (capped at 15 MiB, see below); for an
upload it is the server's and only more channels (and, past sshd's
``MaxSessions``, more connections) carry more. So the controller decides a
byte *target* from what the link shows, and the number of channels follows
from the target and what one channel can hold.

The target follows BBR's shape (Cardwell et al., 2016), measured per SFTP
request instead of per TCP segment:

- **start** at the round trip seen at set-up times 1 Gbit/s (``START_RATE``),
  never less than one block: on a LAN that is one channel, at 300 ms it is
  ~37 MB, found in one step rather than five doublings;
- **startup**: once per round (about one RTT) the target doubles if the
  delivery rate grew by a quarter or more and the link carried at least half
  the target in one round trip; it stops after three rounds without such
  growth, or at once when the RTT inflates to twice its minimum (a queue is
  building: more in flight only adds delay);
- **steady**: target = ``GAIN`` x (highest delivery rate x lowest RTT + one
  block). A reply counts only once its last byte is in, so a full pipe holds
  a block more than rate x RTT; without it, at 400 Mbit/s and 20 ms (a 255
  KiB block is 5 ms of the link) every request's RTT was 1.25 x the minimum,
  and the target, computed from the rate that target allowed, drifted down.

Rounds that could not fill the target (channels still opening, end of file,
a slow disk) are *limited* and teach nothing about the link, so they neither
grow the target nor count as a stall; a round at the channel cap is not
limited, it is all the transfer can do. The highest rate is the maximum over
the last ``RATE_WINDOW`` rounds, so a link that slows down is followed. The
target never exceeds the memory budget or the file size, nor (under a rate
limit) what the limit needs in flight. On a LAN or
loopback (min RTT under ``LAN_RTT``) the RTT of a request is mostly the
server's own queue and says little about the pipe, so there the byte budget
never falls below ``min_in_flight``; on a WAN the target alone decides, so a
slow link does not get a 16 MiB queue.

No I/O, no clock: times are arguments.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, replace
from typing import Literal

# 1 Gbit/s: what a first guess of the link assumes (TCP starts from ten
# segments; we start from one second's worth of a gigabit pipe per second of
# RTT). Too much only queues, which the RTT shows within one round.
START_RATE = 125_000_000
# Target = GAIN x bandwidth-delay product in steady state: a quarter of
# headroom for request/reply jitter, little enough to keep queues short.
GAIN = 1.25
GROWTH = 1.25  # a round "grew" if the delivery rate rose by this factor (BBR)
STALL_ROUNDS = 3  # rounds without growth that end startup (BBR)
# The RTT has inflated when a round's mean exceeds INFLATION x the minimum
# plus SLACK (the slack keeps sub-millisecond loopback noise from counting).
RTT_INFLATION = 2.0
RTT_SLACK = 0.002
# A round lasts at least this long, so loopback rounds are not single replies.
MIN_ROUND = 0.010
# A round is limited when the most bytes in flight during it stayed under
# this share of the target.
LIMITED_SHARE = 0.8
RATE_WINDOW = 10  # rounds the highest delivery rate is remembered (BBR's filter)
# Below this min RTT the link is a LAN or loopback and min_in_flight applies.
LAN_RTT = 0.005

Phase = Literal["startup", "steady"]


@dataclass(frozen=True, kw_only=True, slots=True)
class FlowLimits:
    """What the controller may not exceed, and what one channel holds.

    Attributes:
        memory_budget: most payload bytes charged at once for the transfer.
        min_in_flight: floor of the byte budget on a LAN (not of the channel count).
        channel_capacity: bytes one channel keeps in flight: our receive
            window for a download, the server's window for an upload.
        max_channels: channels the transfer may use, over all connections.
        size: bytes the transfer moves, when known (no point in more in flight).
        block: bytes per request.
        rate_limit: bytes/s the transfer may ask for (``core.ratelimit``), if
            limited: the target holds no more than that rate needs in flight.
    """

    memory_budget: int
    min_in_flight: int
    channel_capacity: int
    max_channels: int
    size: int | None = None
    block: int = 1
    rate_limit: int | None = None

    def __post_init__(self) -> None:
        if min(self.memory_budget, self.min_in_flight, self.channel_capacity, self.block) < 1:
            raise ValueError("flow limits must be positive")
        if self.max_channels < 1:
            raise ValueError("max_channels must be at least 1")


@dataclass(slots=True)
class _Round:
    start: float
    delivered: int = 0
    rtt_sum: float = 0.0
    rtt_count: int = 0
    peak_in_flight: int = 0


class FlowController:
    """The byte target and channel count of one transfer, updated per reply.

    Args:
        limits: the caps and the capacity of one channel.
        rtt0: the round trip measured at set-up (an SFTP request on an idle channel).
        now: the clock's current value (any monotonic clock, in seconds).
    """

    def __init__(self, limits: FlowLimits, *, rtt0: float, now: float) -> None:
        self.limits = limits
        self.min_rtt = max(rtt0, 1e-6)
        self.srtt = self.min_rtt
        self._rates: deque[float] = deque(maxlen=RATE_WINDOW)  # recent unlimited rounds
        self.peak_rate = 0.0  # bytes/s, best round of all (for the stats)
        self.phase: Phase = "startup"
        self.rounds = 0
        self._full_rate = 0.0  # rate to beat by GROWTH in startup
        self._stalls = 0
        self._round = _Round(start=now)
        self.target = self._cap(max(limits.block, int(self.min_rtt * START_RATE)))
        self.peak_target = self.target

    def __repr__(self) -> str:
        return (
            f"<FlowController {self.phase} round={self.rounds} target={self.target} "
            f"channels={self.channels} min_rtt={self.min_rtt * 1000:.1f}ms "
            f"srtt={self.srtt * 1000:.1f}ms rate={self.max_rate / 1e6:.1f}MB/s>"
        )

    def set_size(self, size: int | None) -> None:
        """The transfer's size became known (a download learns it after opening)."""
        self.limits = replace(self.limits, size=size)
        self.target = self._cap(self.target)

    def restart(self, now: float) -> None:
        """Rounds so far were held below the link by the caller (a probe train): forget
        their rates and start up again from at least the first guess."""
        self._rates.clear()
        self.phase, self._full_rate, self._stalls = "startup", 0.0, 0
        start = self._cap(max(self.limits.block, int(self.min_rtt * START_RATE)))
        self.target = max(self.target, start)
        self._round = _Round(start=now)

    def carry_on(self, now: float, *, rate: float) -> None:
        """The link now carries about ``rate`` payload bytes/s (it went compressed: the
        plain rate x the ratio): hold that rate's pipe at once, steady, as if measured.

        A new startup from the plain target doubled per round from a quarter of
        the pipe it needed (12 MiB at 20 Mbit/s is ~60 RTTs). The rounds that
        follow correct the estimate: steady's headroom lets a faster link show
        more, and the estimate leaves the rate filter after RATE_WINDOW rounds.
        """
        self._rates.clear()
        self._rates.append(max(rate, 1.0))
        self.phase, self._stalls = "steady", 0
        self._set_steady_target()
        self.peak_target = max(self.peak_target, self.target)
        self._round = _Round(start=now)

    @property
    def max_rate(self) -> float:
        """Bytes/s: the best of the last RATE_WINDOW rounds that were not limited."""
        return max(self._rates, default=0.0)

    @property
    def channels(self) -> int:
        """Channels needed to hold the target in flight."""
        wanted = math.ceil(self.target / self.limits.channel_capacity)
        return max(1, min(wanted, self.limits.max_channels))

    @property
    def budget(self) -> int:
        """Bytes the engine may charge at once: the target in whole blocks, rounded up.

        The engine sends whole blocks, so a budget of 1.7 blocks holds one: on
        a link slower than a block per round trip (20 Mbit/s, 40 ms, 255 KiB
        blocks: a block is 100 ms of the link) the next request then leaves
        only once the last byte of the one before is in, and the link idles a
        round trip per block (1.8 MB/s of 2.5). Rounded up, the next block is
        asked for while this one arrives. On a LAN not below the floor.
        """
        block = self.limits.block
        whole = min(-(-self.target // block) * block, self.limits.memory_budget)
        if self.min_rtt >= LAN_RTT:
            return whole
        return max(whole, min(self.limits.min_in_flight, self.limits.memory_budget))

    def on_reply(self, now: float, *, rtt: float, delivered: int, in_flight: int) -> bool:
        """Account one answered request; returns True when a round ended.

        Args:
            now: clock value when the reply arrived.
            rtt: seconds from sending the request to its reply.
            delivered: payload bytes the reply completed (read or acknowledged).
            in_flight: payload bytes outstanding just before this reply.
        """
        rnd = self._round
        rnd.delivered += delivered
        rnd.peak_in_flight = max(rnd.peak_in_flight, in_flight)
        if rtt > 0:
            rnd.rtt_sum += rtt
            rnd.rtt_count += 1
            self.min_rtt = min(self.min_rtt, rtt)
            self.srtt += (rtt - self.srtt) / 8  # RFC 6298's alpha
        elapsed = now - rnd.start
        if elapsed < max(self.min_rtt, MIN_ROUND) or rnd.rtt_count == 0:
            return False
        self._end_round(rnd, elapsed)
        self._round = _Round(start=now)
        return True

    def _end_round(self, rnd: _Round, elapsed: float) -> None:
        self.rounds += 1
        rate = rnd.delivered / elapsed
        mean_rtt = rnd.rtt_sum / rnd.rtt_count
        limits = self.limits
        reachable = min(self.target, limits.max_channels * limits.channel_capacity)
        # The engine sends whole blocks: a target of 1.7 blocks holds one. Without
        # this, every round under a target below two blocks looked limited, no
        # rate was learned and the target never grew again (seen after sharing
        # a link with three other files: 0.9 MB/s on a 125 MB/s link).
        reachable = max(limits.block, reachable // limits.block * limits.block)
        limited = rnd.peak_in_flight < LIMITED_SHARE * reachable
        self.peak_rate = max(self.peak_rate, rate)
        inflated = mean_rtt > RTT_INFLATION * self.min_rtt + RTT_SLACK
        if not limited or inflated:  # a queue building is a full pipe, limited or not
            self._rates.append(rate)
        if self.phase == "startup":
            if inflated:
                self._enter_steady()
            elif not limited:
                if rate > 0 and rate >= GROWTH * self._full_rate:
                    self._full_rate = rate
                    self._stalls = 0
                    # Double only when the link carried at least half the target
                    # per round trip: a round whose replies were still on their
                    # way (new channels just added) shows a low rate, not a full pipe.
                    if rate * self.min_rtt >= self.target / 2:
                        self.target = self._cap(self.target * 2)
                else:
                    self._stalls += 1
                    if self._stalls >= STALL_ROUNDS:
                        self._enter_steady()
        else:
            self._set_steady_target()
        self.peak_target = max(self.peak_target, self.target)

    def _enter_steady(self) -> None:
        self.phase = "steady"
        self._set_steady_target()

    def _set_steady_target(self) -> None:
        if self.max_rate > 0:
            pipe = self.max_rate * self.min_rtt + self.limits.block
            self.target = self._cap(int(GAIN * pipe))

    def _cap(self, target: int) -> int:
        limits = self.limits
        ceiling = limits.memory_budget
        if limits.size is not None:
            ceiling = min(ceiling, max(limits.size, 1))
        if limits.rate_limit is not None:
            # A limited transfer needs the limit's pipe and no more: the steady
            # target's formula at the limit. Its rounds then fill the target
            # (not "limited"), learn the limit as the link's rate and settle
            # there; the bucket, not the target, keeps the rate. Without the
            # cap the first guess (1 Gbit/s x RTT) opened channels for nothing.
            pipe = limits.rate_limit * self.min_rtt + 2 * limits.block
            ceiling = min(ceiling, int(GAIN * pipe))
        return max(1, min(target, ceiling))
