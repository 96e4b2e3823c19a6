"""How one file's transfer is shared by worker processes: who copies which bytes.

Each worker gets one contiguous stripe of what is owed (the whole file, or a
resumed copy's gaps), cut at ``ALIGN`` so no READ or WRITE straddles two
workers and each worker's server-side reads stay sequential (the server's
read-ahead works per handle). A worker's plan is then the ordinary one of a
resumed copy: everything outside its stripe counts as already there.
"""

from __future__ import annotations

from .readplan import Range, missing

# Stripe boundaries fall on a multiple of this: every block size sshpipe uses
# (32 KiB to 256 KiB) divides it, so a stripe is whole blocks but its last.
ALIGN = 1 << 20


def stripes(owed: list[Range], workers: int) -> list[list[Range]]:
    """``owed`` (sorted, disjoint) split into at most ``workers`` parts of equal bytes.

    Every part is non-empty; their union is ``owed``. A cut inside one of
    ``owed``'s ranges falls on a multiple of ``ALIGN`` (a part may then be
    up to ``ALIGN`` over its share).
    """
    if workers < 1:
        raise ValueError("workers must be 1 or more")
    total = sum(rng.length for rng in owed)
    if total == 0:
        return []
    share = -(-total // workers)
    share = -(-share // ALIGN) * ALIGN
    parts: list[list[Range]] = []
    current: list[Range] = []
    room = share
    for rng in owed:
        offset, left = rng.offset, rng.length
        while left > 0:
            take = min(left, room)
            if take < left:  # a cut inside this range: at the next ALIGN of the file
                take = min(left, -(-(offset + take) // ALIGN) * ALIGN - offset)
            current.append(Range(offset, take))
            offset, left, room = offset + take, left - take, room - take
            if room <= 0:
                parts.append(current)
                current, room = [], share
    if current:
        parts.append(current)
    return parts


def others(size: int, mine: list[Range]) -> list[Range]:
    """The ranges of ``[0, size)`` outside ``mine``: what a worker's plan counts as had."""
    return missing(size, mine)


def worker_count(requested: int | None, *, size: int | None) -> int:
    """How many processes copy one file of ``size`` bytes.

    ``requested``: ``--workers N``, as asked but never more than the file has
    ``ALIGN`` pieces. None is "auto": 1. On loopback (README, "Worker
    processes") a second process lost to one on 2 cores, with the client on
    one core or both: each costs an interpreter, imports and a log-in (~0.5
    CPU-s), and sshd's side is as busy as the client's. A rule of idle cores
    and a measured rate goes here once a machine shows a win.
    """
    if size is None or size <= 0:
        return 1
    if requested is None:
        return 1
    return max(1, min(requested, -(-size // ALIGN)))
