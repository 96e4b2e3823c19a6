"""Progress accounting: the rate over a moving window, the ETA, and when to report.

Pure (the clock is an argument): ``transfer/progress.py`` reads a transfer's
``Counts`` on a timer and asks ``ProgressMeter.report`` whether a report is
due and what it says. The meter, not the transfers, keeps the promises the
public ``Progress`` makes: done counts never go backwards, at most one report
per ``INTERVAL`` (always the first, and the final one), one final report.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .stats import Progress

# Seconds the rate is averaged over: long enough that one slow round trip or a
# pause for a directory listing does not make it jump, short enough that it
# follows a link that changes speed (rclone averages its transfer rates over a
# similar few seconds).
RATE_WINDOW = 3.0
# At most 10 reports a second: a terminal line redrawn faster only flickers,
# and a user's callback costs the loop each time.
INTERVAL = 0.1
# Nothing moved: still one report a second, so a stalled transfer's rate is
# seen falling instead of frozen at its last value.
IDLE_INTERVAL = 1.0
# Paths named in ``Progress.current``: a tree has hundreds of small files in
# flight; a line (or a user) can show a few.
MAX_CURRENT = 4


@dataclass(frozen=True, slots=True)
class Counts:
    """What a transfer has done, read at one moment (no rate, no time)."""

    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int
    scan_done: bool
    current: tuple[str, ...] = ()
    # Of bytes_done, those counted without moving now (kept by ``resume``):
    # the rate leaves them out, or a resumed copy would start at a false speed.
    bytes_kept: int = 0


@dataclass
class ProgressMeter:
    """The reports of one transfer, from its counts read now and then."""

    started: float
    window: float = RATE_WINDOW
    interval: float = INTERVAL
    idle_interval: float = IDLE_INTERVAL
    finished: bool = False
    _samples: deque[tuple[float, int]] = field(default_factory=deque)
    _bytes_done: int = 0  # the most reported: never less from here on
    _files_done: int = 0
    _last_at: float | None = None
    _last: Counts | None = None

    def rate(self, now: float, moved: int) -> float:
        """Bytes/s over the last ``window`` seconds, ``moved`` (bytes moved so far) sampled now."""
        samples = self._samples
        samples.append((now, moved))
        # Keep one sample at or before the window's start, so the rate spans it.
        while len(samples) > 2 and now - samples[1][0] >= self.window:
            samples.popleft()
        then, moved_then = samples[0]
        return (moved - moved_then) / (now - then) if now > then else 0.0

    def report(self, now: float, counts: Counts, *, final: bool = False) -> Progress | None:
        """The report due now, or None: too soon after the last one, or nothing changed
        for less than ``idle_interval``, or the final report was made already.

        ``final``: the transfer ended; always reported (once), with empty ``current``
        and ``scan_done`` set: nothing more will be found.
        """
        if self.finished:
            return None
        bytes_done = self._bytes_done = max(self._bytes_done, counts.bytes_done)
        files_done = self._files_done = max(self._files_done, counts.files_done)
        rate = self.rate(now, max(0, bytes_done - counts.bytes_kept))
        if not final and self._last_at is not None:
            since = now - self._last_at
            if since < self.interval or (counts == self._last and since < self.idle_interval):
                return None
        self._last_at, self._last = now, counts
        self.finished = final
        scan_done = counts.scan_done or final
        bytes_total = max(counts.bytes_total, bytes_done)
        return Progress(
            files_done=files_done,
            files_total=max(counts.files_total, files_done),
            bytes_done=bytes_done,
            bytes_total=bytes_total,
            scan_done=scan_done,
            rate=rate,
            eta=eta(bytes_total - bytes_done, rate) if scan_done else None,
            current=() if final else counts.current[-MAX_CURRENT:],
            elapsed=max(0.0, now - self.started),
            finished=final,
        )


def eta(left: int, rate: float) -> float | None:
    """Seconds to move ``left`` bytes at ``rate``; None when nothing moves."""
    if left <= 0:
        return 0.0
    return left / rate if rate > 0 else None
