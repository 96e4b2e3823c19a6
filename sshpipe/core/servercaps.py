"""What a server turned out to allow, learned by trying, and the rules that learn it (pure).

A server states some limits (``limits@openssh.com``); most others are found
only when the server refuses: an OPEN past its handle table, a request past
the block it takes whole, READs past the number it answers, a WRITE out of
order. Each refusal lowers one cap here for the rest of the run; every
channel of the same server shares one ``ServerCaps`` (the pool's), so the
lesson is paid once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import codec
from .quirks import STANDARD, Quirks

# Handles per channel when the server states none: Green End's sftpserver has a
# 128-slot table and crashes past it; half leaves room for its other users.
DEFAULT_HANDLES_PER_CHANNEL = 64
# The most handles we keep open on one channel, whatever the server states:
# a tree has no use for more, and each costs the server a descriptor.
MAX_HANDLES_PER_CHANNEL = 128

# Blocks tried, largest first, on a server that states no limits: OpenSSH's
# 255 KiB first (the most any common server takes), down to the 32 KiB every
# server must take (filexfer-02 §3).
PROBE_BLOCKS = (261120, 131072, 65536, 32768)
FLOOR_BLOCK = PROBE_BLOCKS[-1]

# What a server refusing every SETSTAT answers one (``ServerCaps.refused_setstat``):
# OP_UNSUPPORTED (AWS Transfer), PERMISSION_DENIED (Azure), a bare FAILURE.
SETSTAT_REFUSALS = (codec.FX_OP_UNSUPPORTED, codec.FX_PERMISSION_DENIED, codec.FX_FAILURE)
# What ``adapt`` notes of each quirk learned at run time (said once, as a warning).
SETSTAT_REFUSED = "times and modes are not set (the server refuses SETSTAT)"
OPEN_SPLIT = "files are opened, then truncated apart (the server refuses CREAT|TRUNC with WRITE)"
SYMLINK_REFUSED = "symlinks are skipped (the server refuses SYMLINK)"

# Requests per channel a stall never takes us below (``after_stall``).
MIN_REQUESTS_AFTER_STALL = 8
# Seconds within which the stalls of several channels count as one.
STALL_INCIDENT = 5.0


@dataclass(slots=True)
class ServerCaps:
    """Caps one server was found to impose (None: none found), shared by its channels.

    Attributes:
        handles: handles one channel may hold open (an OPEN was refused past it).
        read_block, write_block: the READ/WRITE length the server took whole,
            once probed on a server that states no limits.
        requests: requests one channel may have in flight (the server stalled past it).
        channels: channels one connection sets up (it left the next one's set-up
            unanswered while it answered the others).
        sequential_writes: the server refused a WRITE that was not at the end of
            the file: uploads go in order on one channel.
        no_setstat: the server refused a SETSTAT or FSETSTAT of a file already
            written: times and modes are not set (``setstat_off``).
        split_open: the server refused an OPEN with CREAT|TRUNC and READ|WRITE
            and took it split (``quirks.split_opens``): later ones go split.
        no_symlinks: the server refused a SYMLINK: links are skipped.
        quirks: the cloud profile in force (``core.quirks``): from the banner,
            or forced by ``TransferConfig.server_profile``; set by the pool
            when the first channel is open.
        adapted: what the client changed for this server, one line each, in
            the order met (``adapt``): the profile's changes, and each quirk
            learned at run time. ``-v`` logs each once; ``--json`` lists them.
    """

    handles: int | None = None
    read_block: int | None = None
    write_block: int | None = None
    requests: int | None = None
    channels: int | None = None
    sequential_writes: bool = False
    no_setstat: bool = False
    split_open: bool = False
    no_symlinks: bool = False
    quirks: Quirks = STANDARD
    adapted: list[str] = field(default_factory=list)
    # The stall being learned from (``stalled``).
    _stall_at: float | None = field(default=None, repr=False)
    _before_stall: int | None = field(default=None, repr=False)
    _most_owed: int = field(default=0, repr=False)

    def stalled(self, outstanding: int, now: float, owed_since: float | None = None) -> None:
        """A channel of the server left ``outstanding`` requests unanswered too long.

        The channels of a connection stall together: those within
        ``STALL_INCIDENT`` seconds are one stall, judged by the most any of
        them owed, from the cap in force before it (not cut once per channel).
        A channel owing only since the last stall (``owed_since``: a
        reconnect's, asking under the cap that stall set) stalls anew: with a
        short stall timeout, the next attempt's stall comes within the window.
        """
        last = self._stall_at
        fresh = owed_since is not None and last is not None and owed_since >= last
        if self._stall_at is None or now - self._stall_at > STALL_INCIDENT or fresh:
            self._before_stall = self.requests
            self._most_owed = 0
        self._stall_at = now
        self._most_owed = max(self._most_owed, outstanding)
        before = self._before_stall or self._most_owed
        self.requests = after_stall(self._most_owed, before)

    def channel_unanswered(self, opened: int) -> None:
        """A connection left the set-up of its channel number ``opened + 1`` unanswered.

        Only from a connection that answered meanwhile: one that answered
        nothing is dead, which teaches nothing of the server. Never below one:
        a connection always tries its first channel.
        """
        self.channels = max(1, min(self.channels or opened, opened))

    def adapt(self, change: str) -> bool:
        """Note one thing done differently for this server; True the first time it is said."""
        if change in self.adapted:
            return False
        self.adapted.append(change)
        return True

    @property
    def setstat_off(self) -> bool:
        """No SETSTAT or FSETSTAT is sent: the profile says so, or one was refused."""
        return self.no_setstat or self.quirks.no_setstat

    @property
    def opens_split(self) -> bool:
        """An OPEN to write is sent split (``quirks.split_opens``)."""
        return self.split_open or self.quirks.split_open

    @property
    def symlinks_off(self) -> bool:
        """No SYMLINK is sent: links are skipped (or followed with ``-L``)."""
        return self.no_symlinks or self.quirks.no_symlinks

    @property
    def in_order(self) -> bool:
        """Uploads are written in file order on one channel."""
        return self.sequential_writes or self.quirks.sequential_writes

    def refused_setstat(self, status: int | None) -> bool:
        """Whether a SETSTAT answered ``status`` is the server refusing them all.

        What a server that takes no attributes answers: OP_UNSUPPORTED,
        PERMISSION_DENIED, or a bare FAILURE (to an attribute set on a file
        just written, nothing else explains one). Learned then, and noted once.
        """
        if status not in SETSTAT_REFUSALS:
            return False
        self.no_setstat = True
        return True

    def refused_symlink(self, status: int | None) -> bool:
        """Whether a SYMLINK answered ``status`` is the server making none (learned then).

        OP_UNSUPPORTED only: a bare FAILURE is also what a name taken answers.
        """
        if status != codec.FX_OP_UNSUPPORTED:
            return False
        self.no_symlinks = True
        return True

    def learned(self) -> dict[str, object]:
        """What was found, for ``--json`` and ``-v`` (only what is set)."""
        found: dict[str, object] = {}
        for name in ("handles", "read_block", "write_block", "requests", "channels"):
            value = getattr(self, name)
            if value is not None:
                found[name] = value
        for flag in ("sequential_writes", "no_setstat", "split_open", "no_symlinks"):
            if getattr(self, flag):
                found[flag] = True
        return found


def handle_cap(stated: int, learned: int | None) -> int:
    """Handles we keep open on one channel: half the server's stated limit, or a guess.

    ``stated`` is ``max_open_handles`` from limits@openssh.com (0: none stated).
    """
    cap = DEFAULT_HANDLES_PER_CHANNEL if stated <= 0 else max(1, stated // 2)
    cap = min(cap, MAX_HANDLES_PER_CHANNEL)
    return cap if learned is None else min(cap, learned)


def after_handle_refusal(held: int) -> int | None:
    """The cap an OPEN refused with a generic failure teaches, ``held`` handles being open.

    None when no other handle was open: the server refused this file, not
    one more handle, and the failure is the file's.
    """
    return held if held >= 1 else None


def after_stall(outstanding: int, current: int) -> int:
    """Requests per channel after the server went silent with ``outstanding`` owed.

    A quarter of what it left unanswered, down to a power of two (servers'
    caps are round numbers: answering only the first 32 prefetched reads is
    one seen in the field), never above the cap in force: met after one stall
    from 128. A stall is also what a dead link looks like, so the first cut
    stops at a floor that still fills a link (8 x 255 KiB per channel). A
    stall again at or below the floor is the server's: its cap is lower
    still (paramiko-based servers answer 4 outstanding reads), and each
    stall there halves the requests, down to one.
    """
    if current <= MIN_REQUESTS_AFTER_STALL:
        return max(1, current // 2)
    quarter = min(current, outstanding) // 4
    if quarter <= MIN_REQUESTS_AFTER_STALL:
        return MIN_REQUESTS_AFTER_STALL
    return 1 << (quarter.bit_length() - 1)


def probe_next(asked: int, returned: int | None) -> int:
    """The block to use after a probe of ``asked`` bytes came back ``returned`` long.

    A whole reply keeps ``asked``; a short one (not at EOF) the largest probe
    block it covers; a failure (``returned`` None) the floor: a server that
    refuses one size is not tried at the next, each try could cost a session.
    """
    if returned is None:
        return FLOOR_BLOCK
    if returned >= asked:
        return asked
    covered = [block for block in PROBE_BLOCKS if block <= returned]
    return covered[0] if covered else FLOOR_BLOCK
