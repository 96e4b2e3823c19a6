"""Compression auto's probe train: a WAN link's rate from a file's first replies.

A few blocks are asked for at once while a file's route is undecided; the
spacing of their replies is the bottleneck's rate (packet-train dispersion:
Jacobson's pathchar, Dovrolis et al. 2004), known within one RTT plus the
blocks' time. Without it the flow controller's first guess (1 Gbit/s x RTT:
5 MB at 40 ms) went out on the plain connection before anything was known:
2 s of a 20 Mbit/s link. ``transfer.compressswitch`` holds the file to the
train and asks the policy with its rate.
"""

from __future__ import annotations

from ..core.compresspolicy import ZlibCost

__all__ = ["TRAIN_BLOCK", "TRAIN_BLOCKS", "FreshRate", "ProbeTrain"]

# Blocks asked for at once: the first is sampled for the ratio, the spacing of
# the others is the rate.
TRAIN_BLOCKS = 3
# Their length: short, because the train goes plain whatever the data. Three of
# sshd's 255 KiB blocks held a 20 Mbit/s link 0.3 s before anything could go
# compressed (-C had moved 3 MB by then); three of 64 KiB take 77 ms there and
# are still 2 SSH packets each, so their spacing is the link's.
TRAIN_BLOCK = 64 * 1024
# The train's rate decides alone while link x ratio stays under this share of
# zlib's rate (``ProbeTrain.trusted``).
TRUSTED_SHARE = 0.5
# The event loop's CPU over the train's wall time above which its spacing may
# be our own work (a key exchange, a sampled block), not the link's.
BUSY_SHARE = 0.5
# Seconds (and RTTs) of plain afresh before a re-test is judged (``FreshRate``):
# the plain lanes take over at the compressed stretch's pipe, no ramp to wait for.
RETEST_AFTER = 0.3
RETEST_RTTS = 8


class ProbeTrain:
    """The replies of one file's train, and the link rate they show.

    Two readings, the lower kept: the spacing (bytes after the first reply
    over the time they took) and the whole train (every byte over the time
    from sending it, less one RTT). A first reply handled late (the loop busy)
    makes the spacing read high: at 20 Mbit/s a 2-block train read 2.5x the
    link; the whole train's time does not depend on it. Both read low only if
    the loop was busy at the last reply, which ``calm`` tells.
    """

    def __init__(self) -> None:
        self._began: tuple[float, float] | None = None  # (time, loop CPU) when it left
        self._first: float | None = None
        self._bytes = 0  # delivered after the first reply
        self._all = 0  # delivered, the first reply's too
        self._replies = 0
        self._busy = 0.0  # seconds of our own sampling since the first reply
        self.rate: float | None = None  # payload bytes/s, once every reply is in
        self.calm = True  # the loop was mostly idle while it ran

    @property
    def running(self) -> bool:
        """Its first reply came and its rate is not known yet."""
        return self._first is not None and self.rate is None

    def begin(self, now: float, cpu: float) -> None:
        """Its requests leave now; ``cpu``: the event loop thread's CPU seconds."""
        if self._began is None:
            self._began = (now, cpu)

    def busy(self, seconds: float) -> None:
        """The loop spent ``seconds`` on our zlib: they delay the next reply's time,
        not the link (at 1 Gbit/s the replies are 2 ms apart, and 5 ms of zlib on
        the first one read the link as 16 MB/s, which compression then slowed)."""
        if self.running:
            self._busy += seconds

    def reply(self, now: float, delivered: int, *, rtt: float, cpu: float) -> None:
        """A reply of ``delivered`` bytes came at ``now`` (``rtt``: the link's least;
        ``cpu``: the loop thread's CPU seconds)."""
        if self.rate is not None or not delivered:
            return
        self._replies += 1
        self._all += delivered
        if self._first is None:
            self._first = now
            return
        self._bytes += delivered
        span = now - self._first - self._busy
        if self._replies < TRAIN_BLOCKS or span <= 0:
            return
        rate = self._bytes / span
        if self._began is not None:
            began, cpu_began = self._began
            whole = now - began - rtt - self._busy
            if whole > 0:
                rate = min(rate, self._all / whole)
            wall = now - began
            self.calm = wall > 0 and cpu - cpu_began - self._busy <= BUSY_SHARE * wall
        self.rate = rate

    def trusted(self, ratio: float, cost: ZlibCost) -> bool:
        """Its rate decides alone where compression could only be link-bound.

        Its few blocks tell neither our CPU per byte (the compressed log-in's
        and zlib's CPU dominate them) nor a fast link's rate well (replies 2 ms
        apart); where link x ratio nears zlib's rate both matter, and the flow
        controller's rounds decide instead (at 1 Gbit/s a train read 35-900 MB/s).
        Nor does a train the loop was busy through.
        """
        assert self.rate is not None
        limit = TRUSTED_SHARE * min(cost.compress, cost.decompress)
        return self.calm and self.rate * ratio < limit


class FreshRate:
    """Plain's rate measured afresh after a compressed stretch (the policy's re-test,
    ``core.compresspolicy.RETEST_SHARE``): plain bytes from its first plain reply on."""

    def __init__(self) -> None:
        self.on = False  # under way
        self._since: tuple[float, int] | None = None  # (time, plain bytes) at its first reply

    def begin(self) -> None:
        self.on, self._since = True, None

    def reply(self, now: float, plain: int) -> None:
        """A plain reply came: ``plain`` payload bytes delivered plain so far, this one's too."""
        if self.on and self._since is None:
            self._since = (now, plain)

    def rate(self, now: float, plain: int, rtt: float) -> float | None:
        """Payload bytes/s plain since its first reply, once long enough (then it is over)."""
        if not self.on or self._since is None:
            return None
        began, before = self._since
        elapsed = now - began
        if elapsed < max(RETEST_AFTER, RETEST_RTTS * rtt):
            return None
        self.on = False
        return (plain - before) / elapsed
