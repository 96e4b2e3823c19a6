"""Routing one file's requests between the plain and the compressed connection.

``Compression auto``: a file starts plain. Its data is sampled (a put: the
local file's blocks before its first WRITE; a get: its first replies) and, on
a WAN, its first requests are a short probe train (``probetrain``) measuring
the link. Data that may shrink readies the compressed connection and the
file's channels there beside the plain OPEN, and after the train nothing
more goes plain until the policy (``core.compresspolicy``) has spoken. On
"compress" the plain lanes drain (``RouteLanes``; no byte is sent twice) and
the controller goes on from rate x ratio; after a few round trips the rate
achieved is judged, and the file may go back (``MAX_SWITCHES``). On a LAN
(RTT under ``EAGER_RTT``) a file stays plain without a look at its data.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ..core.compresspolicy import (
    MAX_SWITCHES,
    MIN_RATIO,
    SAMPLE_BYTES,
    Decision,
    Measured,
    Ratio,
    Route,
    ZlibCost,
    compressed_rate_estimate,
    decide,
)
from ..core.errors import SSHPipeError
from ..core.flowcontrol import FlowController
from ..core.text import printable
from ..transport.compressroute import EAGER_RTT, RoutedLease
from ..transport.sftp import SFTPSession
from .lanes import Lane
from .probetrain import TRAIN_BLOCK, TRAIN_BLOCKS, FreshRate, ProbeTrain
from .pump import Pump
from .routelanes import RouteLanes

logger = logging.getLogger("sshpipe.compress")

# Seconds compressed before the achieved rate is judged: enough rounds for
# the controller's new startup (a few RTTs) at any RTT sshpipe meets.
_JUDGE_AFTER = 1.0
_JUDGE_RTTS = 10
# What incompressible data is weighed with when zlib was never probed: its
# ratio alone decides (below MIN_RATIO), so the rates do not matter.
_ANY_COST = ZlibCost(compress=1.0, decompress=1.0)
# Rounds (about an RTT each) after which the best one's rate is the link's.
_KNOWN_ROUNDS = 6
# Sampled bytes from which a get's ratio is trusted: the probe train's (waiting
# for SAMPLE_BYTES held it a reply longer), and a first guess from a first
# reply's 32 KiB, enough to ready the connection.
_JUDGED_AT = 192 * 1024
_GUESSED_AT = 32 * 1024
# CPU per byte is counted from this many bytes: over a train's few, it is the
# compressed log-in's and zlib's, not the transfer's.
_CPU_AFTER = 2 * 1024 * 1024
# The longest a file's plain lanes are held (nothing new asked for) while the
# compressed connection comes up, in RTTs and at least a second: then they go on.
_HOLD_RTTS = 30
_HOLD_AT_LEAST = 1.0


class Switch:
    """One file's route, decided from its first blocks and the measured link."""

    def __init__(
        self, lease: RoutedLease, cost: ZlibCost | None, *, ratio: float | None = None
    ) -> None:
        self.lease = lease
        # zlib's rates here: probed (in the mover) only once a file shrinks, so
        # random data and a first file's start never wait for the probe.
        self.cost = cost
        self._probe = False  # started
        self._probe_task: asyncio.Task[None] | None = None
        # The compressed log-in and this file's channels there (before the pump runs).
        self._connect_task: asyncio.Task[list[SFTPSession]] | None = None
        self._widen_task: asyncio.Task[None] | None = None
        self.route = Route.PLAIN
        self.switches = 0
        # The sample's counts as its blocks go by (none of them is kept).
        self._sample = Ratio()
        self.ratio = ratio  # a put's, sampled from the local file before its first WRITE
        self.link_rate: float | None = None
        self.compressed_rate: float | None = None
        self.reason = "not decided: the file ended first"
        self.delivered = 0
        self.compressed_bytes = 0
        self.lanes = RouteLanes(lease.is_compressed)
        self._pending: Decision | None = None
        plain = self.plain_whatever_its_data(lease)
        self._decided_plain = plain is not None
        if plain is not None:
            self.reason = plain
        elif ratio is not None and ratio < MIN_RATIO:
            self._decided_plain = True
            self.reason = f"stays plain: incompressible (zlib ratio {ratio:.2f})"
        # A file that may go compressed (so on a WAN) starts with the probe
        # train and, once its data is known to shrink (a put's sample, a get's
        # first reply, an earlier file's), is opened on a compressed channel,
        # its lane parked (cap 0): the move is then instant. Opened on the
        # policy's word, the log-in and the OPEN's round trips queued behind
        # the file's own data.
        self._wan = not self._decided_plain
        self._warm = False  # a parked compressed lane is wanted (``run`` opens it)
        self._warm_asked = False
        self._weighed_at_start = False  # weighed before its first request: no train
        self._moving = False
        self.used = False  # some of its requests were routed compressed
        self._moved_at = 0.0
        self._first_reply = 0.0
        self._cpu_at_first = 0.0  # this process's CPU seconds at the first reply
        self._plain_mean: float | None = None  # payload bytes/s plain until the move
        self.fresh = FreshRate()  # plain measured afresh (the policy's re-test)
        # The probe train: its byte cap (None: not capped), and its replies' times.
        self.cap: int | None = None
        self.train = ProbeTrain()
        # (time, delivered, controller rounds) from which the controller's rounds
        # measure the link: the start without a train, else the train's untrusted end.
        self._measured_since: tuple[float, int, int] | None = None
        self._first_compressed: float | None = None  # the first compressed reply's time
        self.started_compressed: float | None = None  # the first ever (for the report)
        self.last_compressed = 0.0
        self._bytes_at_move = 0
        self.wake = asyncio.Event()
        # Data that shrinks on a WAN: after the train, nothing more is asked for
        # on the plain lanes until the policy has spoken and, if it said
        # compress, the compressed lanes took over. At 20 Mbit/s a plain block
        # kept in flight queued each of the compressed log-in's round trips
        # behind 100 ms of data (its key exchange took 8 RTTs, not 2).
        self.holding = False
        self._hold_timer: asyncio.TimerHandle | None = None
        self._pump: Pump | None = None
        self.group: asyncio.TaskGroup | None = None  # ``switching``'s
        self._task: asyncio.Task[None] | None = None

    @staticmethod
    def plain_whatever_its_data(lease: RoutedLease) -> str | None:
        """Why the file stays plain without a look at its data, or None if it may not.

        On a LAN (RTT under ``EAGER_RTT``): compression gains ~5 % at 100 Mbit/s
        and halves gigabit (the project's seed figures), and a LAN's rate read
        in its first milliseconds is no guide (a loopback put read 7.2 MB/s
        and went compressed on a link carrying 300).
        """
        if lease.route.offered is False:
            return "off: the server offers no compression"
        if lease.hint is Route.PLAIN:
            return "stays plain: its name says compressed already"
        if lease.rtt < EAGER_RTT:
            return f"stays plain: a LAN (RTT {lease.rtt * 1000:.1f} ms)"
        return None

    def attach(self, group: asyncio.TaskGroup) -> None:
        """The TaskGroup its mover and probe run in (``switching``'s).

        A put whose sample shrinks (or any file after one that shrank) starts
        the compressed log-in here, beside the plain OPEN.
        """
        self.group = group
        shrinks = self.ratio is not None and self.ratio >= MIN_RATIO
        if self._wan and (shrinks or self.lease.route.shrank):
            self._ask_warm()
        elif self._wan and self.lease.route.early:
            # A get whose name does not say compressed, its connection logged in
            # beside the plain one: opened there beside the probe train, not
            # after its first reply (zlib is probed only if the data shrinks).
            self._ask_warm(probe=False)
        if shrinks:
            self.lease.route.shrank = True
            if self.cost is None:
                self._start_probe()

    def _ask_warm(self, *, probe: bool = True) -> None:
        """Ready the compressed connection, and the file on it (once): the data shrinks
        (``probe``: zlib's rates measured beside it), or may."""
        if self._warm_asked or self.group is None or not self._wan:
            return
        self._warm_asked = self._warm = True
        self._connect_task = self.group.create_task(self._open_compressed())
        if self.cost is None and probe:
            self._start_probe()  # beside the log-in, not after the ratio
        self.wake.set()

    async def _open_compressed(self) -> list[SFTPSession]:
        """The compressed log-in, then this file's channels there, not yet routed to:
        opened as the file starts, beside its train, not on the policy's word (the
        file's OPEN on them waits for the pump: a put's temp file is made plain)."""
        await self.lease.route.connect()
        try:
            return await self.lease.prepare()
        except SSHPipeError:
            return []  # the move sees what is missing

    def holds(self, pump: Pump) -> bool:
        """No new request now: the train is out (or not needed) and the compressed
        route is coming."""
        return self.holding and pump.requests >= (0 if self._weighed_at_start else TRAIN_BLOCKS)

    def _hold(self, pump: Pump) -> None:
        if self.holding or self._decided_plain:
            return
        self.holding = True
        wait = max(_HOLD_AT_LEAST, _HOLD_RTTS * pump.controller.min_rtt)
        self._hold_timer = asyncio.get_running_loop().call_later(wait, self._uncap, pump)

    def start(self, pump: Pump) -> None:
        """The pump runs: replies feed the switch, and its mover waits for a decision."""
        pump.switch = self
        self._pump = pump
        if self._wan:  # a WAN, and the file may go compressed: the probe train first
            self.cap = TRAIN_BLOCKS * min(TRAIN_BLOCK, pump.sizing.block)
            self.train.begin(time.monotonic(), time.thread_time())
            if self._warm_asked and self.ratio is not None and self.ratio >= MIN_RATIO:
                # A put's sample shrank: the train, then nothing plain; no train if an
                # earlier file measured the link (each train sent 0.8 MB plain).
                self._weighed_at_start = self.lease.route.link_rate is not None
                self._hold(pump)
                if self._weighed_at_start:
                    self._weigh(pump, time.monotonic())
            pump.resync()
        self.wake.set()  # the warm-up, if asked for before the pump ran
        if self.group is not None:
            self._task = self.group.create_task(self.run(pump))

    async def stop(self) -> None:
        """No move is under way after this returns (before the handles close)."""
        # The compressed log-in too: a short file is not held up by one it did not need.
        running = (self._task, self._probe_task, self._connect_task, self._widen_task)
        tasks = [t for t in running if t is not None]
        self._task = self._probe_task = self._connect_task = self._widen_task = None
        self._let_go()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    @property
    def train_block(self) -> int | None:
        """The probe train's request length while it (or the hold after it) lasts."""
        return TRAIN_BLOCK if self.cap is not None else None

    @property
    def idle(self) -> set[SFTPSession]:
        """Compressed channels the file is open on that no request was routed to."""
        return self.lanes.idle

    @property
    def sampling(self) -> bool:
        """Its blocks are still wanted for the ratio (not once decided without it)."""
        return self.ratio is None and not self._decided_plain

    def feed(self, chunks: list[bytes | memoryview] | bytes) -> None:
        """Blocks of the file as they arrive (a get) or leave (a put)."""
        began = time.perf_counter()
        try:
            self._feed([chunks] if isinstance(chunks, bytes) else chunks)
        finally:
            self.train.busy(time.perf_counter() - began)
        if self.ratio is not None and self._pump is not None:
            # Its reply was weighed before its bytes were sampled: weighed again
            # now, or a held file waited for the hold's end (1.3 s of a tree's
            # text file, once zlib's rates were known and no probe ended to weigh it).
            self._weigh(self._pump, time.monotonic())

    def _feed(self, pieces: list[bytes | memoryview] | list[bytes]) -> None:
        sample = self._sample
        for piece in pieces:
            sample.add(piece[: SAMPLE_BYTES - sample.raw])
        if not (self._warm_asked and self._probe) and sample.raw >= _GUESSED_AT:
            guess = sample.value
            if guess is not None and guess >= MIN_RATIO:
                self._ask_warm()
                if self.cost is None:
                    self._start_probe()
        if sample.raw >= min(SAMPLE_BYTES, _JUDGED_AT):
            self.ratio = sample.value
            if self.ratio is not None and self.ratio >= MIN_RATIO:
                self.lease.route.shrank = True
                if self.cost is None:
                    self._start_probe()
                if self._warm_asked and self.cap is not None and self._pump is not None:
                    self._hold(self._pump)

    def on_sample(self, pump: Pump, lane: Lane, delivered: int, now: float) -> None:
        """A reply came (``Pump._sample``): maybe time to ask the policy."""
        if not self.delivered:
            self._first_reply = now
            self._cpu_at_first = time.process_time()
            if not self._wan:  # no train: the controller measures from the first reply
                self._measured_since = (now, 0, pump.controller.rounds)
        self.delivered += delivered
        if self.train.rate is None:  # its replies only: no clock read per reply after it
            self.train.reply(now, delivered, rtt=pump.controller.min_rtt, cpu=time.thread_time())
        if self.cap is not None and self._decided_plain:
            self._uncap(pump)
        if self.lanes.is_compressed(lane.sftp) and delivered:
            if self._first_compressed is None:
                # Judged from its first reply: until then the plain lanes' requests
                # issued before the move (the first guess's, seconds of a thin
                # link) held the byte budget.
                self._first_compressed = now
                self.started_compressed = self.started_compressed or now
                self._bytes_at_move = self.compressed_bytes
            self.compressed_bytes += delivered
            self.last_compressed = now
        elif self.route is Route.PLAIN and delivered:
            self.fresh.reply(now, self.delivered - self.compressed_bytes)
        self._weigh(pump, now)

    def _weigh(self, pump: Pump, now: float) -> None:
        """Ask the policy, if what it needs is known; carry out what it says."""
        if self._pending is not None or self._moving:
            return
        ctrl = pump.controller
        if self.fresh.on:
            fresh = self.fresh.rate(now, self.delivered - self.compressed_bytes, ctrl.min_rtt)
            if fresh is None:
                return
            measured = Measured(
                ratio=self.ratio,
                link_rate=fresh,
                rtt=ctrl.min_rtt,
                compressed_rate=self.compressed_rate,
                retested=True,
            )
        elif self.route is Route.PLAIN:
            if self._decided_plain or self.ratio is None:
                return
            if self.cost is None:
                if self.ratio >= MIN_RATIO:
                    return  # the probe is under way: weighed when it ends
                self.cost = _ANY_COST  # incompressible: zlib's speed cannot matter
            if self.ratio < MIN_RATIO:
                pass  # judged by its ratio alone, at once: the train is let go now
            elif self.train.rate is not None and self.train.trusted(self.ratio, self.cost):
                self.link_rate = self.lease.route.link_rate = self.train.rate
            elif self._measured_since is not None and self._link_known(ctrl):
                # The better of the best round's rate and the mean since the first
                # reply. Too high is the safe error (the best round read 5 MB/s on
                # a 2.5 MB/s link: replies come in bursts; the policy's margin
                # still compresses there); too low is not (an upload's mean read
                # 1.3 MB/s at 1 Gbit/s while it ramped up, and went compressed).
                began, before, _ = self._measured_since
                mean = (self.delivered - before) / max(now - began, 1e-6)
                rate = max(ctrl.max_rate, mean)
                self.link_rate = self.lease.route.link_rate = rate
            elif self.lease.route.link_rate is not None:
                self.link_rate = self.lease.route.link_rate  # an earlier file's: weighed now
            else:
                if self.train.rate is not None and self._measured_since is None:
                    # The controller measures it, at full speed, from a fresh start:
                    # the held rounds entered "steady" at 8 MB/s on a 1 Gbit/s link.
                    self._measured_since = (now, self.delivered, ctrl.rounds)
                    ctrl.restart(now)
                    self._uncap(pump)
                return
            size = ctrl.limits.size
            remaining = None if size is None else max(0, size - self.delivered)
            cpu = time.process_time() - self._cpu_at_first
            measured = Measured(
                ratio=self.ratio,
                link_rate=self.link_rate,
                rtt=ctrl.min_rtt,
                remaining=remaining,
                ready=bool(self.lanes.idle),
                # Over a train's few blocks the CPU is the log-in's and zlib's: not a rate.
                cpu_per_byte=cpu / self.delivered
                if cpu > 0 and self.delivered >= _CPU_AFTER
                else None,
                upload=pump.handles.write,
            )
        else:
            if self._first_compressed is None or self.switches != 1:
                return
            elapsed = now - self._first_compressed
            if elapsed < max(_JUDGE_AFTER, _JUDGE_RTTS * ctrl.min_rtt):
                return
            self.compressed_rate = (self.compressed_bytes - self._bytes_at_move) / elapsed
            measured = Measured(
                ratio=self.ratio,
                link_rate=self.link_rate,
                rtt=ctrl.min_rtt,
                compressed_rate=self.compressed_rate,
                plain_mean=self._plain_mean,
            )
        assert self.cost is not None  # set above for plain, before any move for compressed
        decision = decide(self.route, measured, self.cost, switches=self.switches)
        self._log(pump, decision)
        if decision.route is not self.route:
            self._pending = decision
            if decision.retest:
                self.fresh.begin()
            self.wake.set()
            if self.cap is not None:
                self._hold(pump)  # until the compressed lanes take over
        elif self.route is Route.PLAIN:
            self._decided_plain = True  # once: a file is not weighed again and again
            self._uncap(pump)
        else:
            self.switches = MAX_SWITCHES  # judged compressed and kept: no more moves

    def _start_probe(self) -> None:
        """zlib's rates measured beside the mover (which may be opening a connection)."""
        if self._probe or self.group is None:
            return
        self._probe = True

        async def probe() -> None:
            self.cost = await self.lease.route.cost()
            if self._pump is not None:  # a held pump has no reply coming to weigh it at
                self._weigh(self._pump, time.monotonic())

        self._probe_task = self.group.create_task(probe())

    def _link_known(self, ctrl: FlowController) -> bool:
        """The controller has seen the link's rate since ``_measured_since``: steady, or
        rounds enough of a full pipe (an upload at 20 Mbit/s stayed in startup
        for all its 8 MiB, the first guess filling the link from the first round)."""
        assert self._measured_since is not None
        rounds = ctrl.rounds - self._measured_since[2]
        steady = ctrl.phase == "steady" and rounds > 0
        return ctrl.max_rate > 0 and (steady or rounds >= _KNOWN_ROUNDS)

    def _let_go(self) -> None:
        self.holding = False
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None

    def _uncap(self, pump: Pump) -> None:
        """The controller's budget again: no train, no hold."""
        held = self.holding
        self._let_go()
        if self.cap is not None or held:
            self.cap = None
            pump.resync()

    def _log(self, pump: Pump, decision: Decision) -> None:
        self.reason = decision.reason
        logger.info("%s: compression auto: %s", printable(pump.handles.path), decision.reason)

    async def run(self, pump: Pump) -> None:
        """Carry out the moves the policy asks for, while the pump runs."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self._warm:
                self._warm = False
                task = self._connect_task
                if task is not None:  # the log-in, or its cancellation
                    await asyncio.wait([task])
                if task is not None and not task.cancelled() and not self._decided_plain:
                    with contextlib.suppress(SSHPipeError):  # the move sees what is missing
                        await self.lanes.park(pump, task.result())
            decision, self._pending = self._pending, None
            if decision is None:
                continue
            self._moving = True
            try:
                await self._move(pump, decision.route is Route.COMPRESSED)
            except SSHPipeError as exc:  # the file goes on where it is
                self.reason = f"stays {self.route.value}: {exc}"
                logger.info("compression auto: %s", self.reason)
                self._decided_plain = True
                self.fresh.on = False
                self.switches = MAX_SWITCHES
            finally:
                self._moving = False
                self._uncap(pump)  # moved (or not): the controller's budget again

    async def _move(self, pump: Pump, compressed: bool) -> None:
        want = max(1, sum(1 for lane in pump.handles.lanes if lane.cap > 0))
        # Onto the lanes parked there at once, the others opened beside: a put
        # at 20 Mbit/s waited 0.34 s (channel, init, OPEN) for two more.
        parked = len(self.lanes.idle) if compressed else 0
        fresh = await self.lease.move(parked or want, compressed=compressed)
        if fresh is None:
            self.reason = "stays plain: the server offers no compression"
            self._decided_plain = True
            return
        await self.lanes.park(pump, fresh)
        self.lanes.route(pump, compressed=compressed)
        self.route = Route.COMPRESSED if compressed else Route.PLAIN
        if not compressed and not self.fresh.on:
            self._decided_plain = True  # back for good: not weighed again
        self.used = self.used or compressed
        self.switches += 1
        self._moved_at, self._first_compressed = time.monotonic(), None
        if compressed and self._moved_at > self._first_reply and self._first_reply:
            self._plain_mean = (self.delivered - self.compressed_bytes) / (
                self._moved_at - self._first_reply
            )
        if compressed and self.ratio is not None and self.link_rate and self.cost is not None:
            # The compressed lanes start from the measured state, not a new ramp;
            # no CPU term: the target only sizes what is in flight.
            expected = compressed_rate_estimate(self.link_rate, self.ratio, self.cost)
            pump.controller.carry_on(self._moved_at, rate=expected)
        pump.add_lane(pump.handles.lanes[-1])
        pump.fill()
        if compressed and want > parked > 0 and self.group is not None:
            widen = self.lanes.widen(pump, self.lease, want - parked)
            self._widen_task = self.group.create_task(widen)
        logger.info(
            "%s: compression auto: %d lane(s) now %s, after %d bytes",
            printable(pump.handles.path),
            sum(1 for lane in pump.handles.lanes if lane.cap > 0),
            self.route.value,
            self.delivered,
        )
