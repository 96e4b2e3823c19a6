"""A transfer's set-up, phase by phase: where the time before the first byte went.

The floor for one file is about nine round trips (TCP 1, key exchange 2,
log-in 1, channel open and subsystem 2, SFTP INIT 1, OPEN 1, first READ 1): a phase that takes
more than its share shows where a round trip is lost. Phases are recorded as
seconds, and reported in round trips of the RTT measured at set-up (the SFTP
INIT's, one round trip on an idle channel).

Names, in the order they happen (a reused channel has none of the first five):

- ``connect``: the TCP connection;
- ``key_exchange``: version strings and key exchange, to the log-in's start;
- ``auth``: the log-in;
- ``channel``: the SSH channel opened and the ``sftp`` subsystem started;
- ``sftp_init``: INIT / VERSION;
- ``open``: the file opened (and its size learned, the server's limits with it);
- ``first_data``: the first READ answered with data, or WRITE acknowledged;
- ``commit`` (get): the local file made durable and renamed into place;
- ``fsync_close`` and ``rename`` (put): the server's fsync and CLOSE, the rename.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .stats import SetupPhase

CONNECTION_PHASES = ("connect", "key_exchange", "auth")


@dataclass(slots=True)
class Timeline:
    """Phases recorded as they end: each runs from the previous mark to its own."""

    last: float
    phases: list[tuple[str, float]] = field(default_factory=list)

    def mark(self, name: str, now: float) -> None:
        self.phases.append((name, max(0.0, now - self.last)))
        self.last = now

    def add(self, name: str, seconds: float) -> None:
        """A phase timed elsewhere (it does not move ``last``)."""
        self.phases.append((name, max(0.0, seconds)))


def in_round_trips(phases: list[tuple[str, float]], rtt: float) -> tuple[SetupPhase, ...]:
    """The phases with their length in round trips (0 when the RTT is unknown)."""
    return tuple(
        SetupPhase(name=name, seconds=seconds, round_trips=seconds / rtt if rtt > 0 else 0.0)
        for name, seconds in phases
    )


def describe(phases: tuple[SetupPhase, ...]) -> str:
    """One log line: ``connect 0.001 s (0.0 RTT), key_exchange ...``."""
    return ", ".join(f"{p.name} {p.seconds:.3f} s ({p.round_trips:.1f} RTT)" for p in phases)
