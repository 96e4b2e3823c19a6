"""What a server says is untrusted input: the gate its names pass, what may be shown, bounds.

A malicious server chooses every name, link text, mode, size and message it
sends. scp's CVE-2019-6111 let one write files the client never asked for, and
CVE-2019-6109 let its names move the terminal's cursor. Everything here is pure
(no I/O), so each rule is one function with a table of tests:

- ``check_name`` and ``ListingCheck``: a name from a listing or a glob becomes
  one plain local path component, or it is refused. That means no ``/`` and no
  NUL, not ``.``, ``..`` or empty, at most MAX_NAME_BYTES, never twice in one
  directory. The bytes are kept exact: names are decoded with
  ``surrogateescape``, so a Latin-1 name goes back to the server as it came.
- ``NameSet`` and ``NameBudget``: the names a listing has given, remembered in
  a few bytes each whatever their length, and how many all the listings open
  at once may remember together.
- ``is_temporary_name``: sshpipe's own temporary and resume names, which a
  listing may not plant beside the files being copied.
- ``check_link_target``: link text is copied verbatim (as ``rsync -l``). It
  must still be something a symlink can hold. Nothing is ever written through
  a link (the local side opens every directory with O_NOFOLLOW).
- ``safe_mode``: the permissions a copy may take. There is never a
  setuid/setgid bit, and the sticky bit only on directories, as OpenSSH's
  sftp and scp do; from a server, no write bit for others either, unless
  the user's umask lets their own files have one.
- the bounds below: what a server may make us hold at once.
"""

from __future__ import annotations

import sys
from array import array

from .codec import Attrs, wire
from .errors import UnsafePath
from .tempnames import is_ours

# PATH_MAX: a longer name fits no local path anyway.
MAX_NAME_BYTES = 4096
# Link text: what readlink(2) can return on Linux (PATH_MAX).
MAX_LINK_BYTES = 4096
# Entries one directory listing may hold. The names seen are kept to refuse a
# repeated one (``NameSet``: 8-24 bytes each), so a million fit in ~16 MiB. A
# READDIR that never ends is stopped here, not by running out of memory.
MAX_LISTING_ENTRIES = 1 << 20
# Characters of names one listing may give: the most entries, each as long as a
# name may be on Linux (NAME_MAX, 255 bytes), so no listing a real directory
# can give is refused. An endless one of 1.9 KB names stops after ~140,000
# of them instead of 2 GB.
MAX_LISTING_NAME_CHARS = MAX_LISTING_ENTRIES * 256
# Bytes the listings open at once in one tree or glob may spend remembering
# names (``NameBudget``), however many a tree has open: a listing of a million
# names takes 16 MiB at most, so three such listed at the same time fit.
MAX_NAMES_HELD_BYTES = 48 << 20
# Entries of one listing refused (unsafe or repeated names) before the rest of
# that listing is given up on: a server sending only those is not listing files.
MAX_REFUSED_PER_LISTING = 1000
# Failures and skipped paths a tree lists one by one; past these it counts them.
MAX_LISTED_FAILURES = 1000
# Bytes of output read from a command beyond what it can legitimately print
# (see ``command_output_cap``).
COMMAND_OUTPUT_SLACK = 4096
# The smallest block a server's limits@openssh.com may make us use. filexfer-02
# §3 has every server take 34,000-byte packets; a stated 1,000 made sshpipe
# crawl with 1-byte reads.
MIN_BLOCK_SIZE = 4096
# Requests a server may send unasked (GLOBAL_REQUEST, CHANNEL_OPEN), as a token
# bucket: UNASKED_BURST at once, then UNASKED_RATE a second. sshd sends one
# hostkeys-00@openssh.com after the log-in and a keepalive@openssh.com each
# ClientAliveInterval (a second at the least); sshpipe asks for no forwarding, so
# no CHANNEL_OPEN is honest. Past it the connection is dropped as a flood:
# answering 256 KiB of them held the event loop 0.3 s of CPU (2.6 s on a loaded
# two-core machine), and a server that stops reading piles the answers up.
UNASKED_BURST = 1024
UNASKED_RATE = 64.0


def check_name(name: str, where: str) -> str:
    """``name`` itself if it is a single, plain path component, else UnsafePath.

    Args:
        name: a name from the server (decoded with surrogateescape).
        where: the remote directory it came from, for the message.
    """
    if name in ("", ".", "..") or "/" in name or "\x00" in name or _too_long(name, MAX_NAME_BYTES):
        raise UnsafePath(where, name)
    return name


def _too_long(text: str, limit: int) -> bool:
    """More than ``limit`` bytes on the wire; a character is at most 4, so most need no encoding."""
    return len(text) > limit // 4 and len(wire(text)) > limit


def is_temporary_name(name: str) -> bool:
    """Whether ``name`` is one sshpipe gives its own partial files and journals
    (``core.tempnames``: long names hashed to fit NAME_MAX are of the same shapes)."""
    return is_ours(name)


def check_link_target(target: str, where: str) -> str:
    """``target`` if a symlink can hold it (no NUL, not empty, not too long), else UnsafePath."""
    if not target or "\x00" in target or _too_long(target, MAX_LINK_BYTES):
        raise UnsafePath(where, target, what="link target")
    return target


def safe_mode(permissions: int, *, directory: bool, others_write: bool = True) -> int:
    """The permission bits a copy may take: no setuid/setgid, sticky only on a directory.

    ``others_write`` False: nor the write bit for others. ``-p`` of a
    server's 0777 file or 1777 directory would otherwise give every local
    user a way to change what was copied (a script later run, a directory on
    a path). scp -p, sftp -p and rsync -p keep it, trusting the server; a
    download here does not trust it, and keeps it only where the user's
    umask would let the user's own files have it (``others_may_write``).
    """
    kept = (0o1777 if directory else 0o777) & ~(0 if others_write else 0o002)
    return permissions & kept


def others_may_write(umask: int) -> bool:
    """Whether a copy may keep a server's write bit for others, under this umask."""
    return not umask & 0o002


def kept_mode(existing: Attrs | None, mode: int) -> int | None:
    """The permissions a copy written under a temporary name must take so that the
    regular file it replaces keeps its own; None when there is nothing to change.

    ``sftp put`` and ``scp`` write over an existing file in place, so it keeps its
    mode; renaming a new file over it would give it the source's, and a 0600
    secret copied from a 0644 file would become world-readable. Setuid and setgid
    are dropped, as a write by its owner makes the kernel drop them.
    """
    if existing is None or existing.permissions is None or existing.kind != "file":
        return None
    wanted = safe_mode(existing.permissions, directory=False)
    return None if wanted == mode & 0o7777 else wanted


def _wide_key_of(name: str) -> int:
    """Where Python's hash has 32 bits, far too few for a million names: two of them."""
    key = (hash(name) & 0xFFFF_FFFF) << 32 | (hash("\x00" + name) & 0xFFFF_FFFF)
    return key - (1 << 64) if key >> 63 else key  # the table holds signed 64-bit keys


# A name's key is Python's own hash of it (SipHash, keyed per process), where it
# has 64 bits; else two of them (``_wide_key_of``).
_NARROW_HASH = sys.hash_info.width < 64


class NameSet:
    """Names seen, each remembered as a 64-bit keyed hash in one flat table.

    8-24 bytes a name whatever its length, where a ``set`` of str took ~100
    for a 16-character name and a 1.9 KB name its whole length. Two names
    share a hash once in ~10^7 listings of a million (the key is this
    process's secret, so a server cannot aim at one): the second is then
    taken for a repeat of the first.
    """

    __slots__ = ("_mask", "_table", "count", "grows_at")

    def __init__(self) -> None:
        self._table = array("q", bytes(8 * 64))  # open addressing; 0 is a free slot
        self._mask = 63
        # At most half full: a new name looks at 2.5 slots on average.
        self.grows_at = 32  # the count past which the table doubles
        self.count = 0

    def __repr__(self) -> str:
        return f"<NameSet {self.count} names in {len(self._table)} slots>"

    def __len__(self) -> int:
        return self.count

    def __contains__(self, name: str) -> bool:
        key = (_wide_key_of(name) if _NARROW_HASH else hash(name)) | 1  # odd: never 0
        table, mask = self._table, self._mask
        index = (key >> 1) & mask
        while slot := table[index]:
            if slot == key:
                return True
            index = (index + 1) & mask
        return False

    def add(self, name: str) -> bool:
        """Remember ``name``; False if it was there already."""
        # Inline, not a helper: a listing of a million names calls it a million times.
        key = (_wide_key_of(name) if _NARROW_HASH else hash(name)) | 1
        table, mask = self._table, self._mask
        index = (key >> 1) & mask
        while slot := table[index]:
            if slot == key:
                return False
            index = (index + 1) & mask
        table[index] = key
        self.count += 1
        if self.count > self.grows_at:
            self._grow()
        return True

    def update(self, other: NameSet) -> None:
        for key in other._table:
            if key:
                self._insert(key)

    def nbytes(self) -> int:
        return len(self._table) * self._table.itemsize

    def _insert(self, key: int) -> None:
        table, mask = self._table, self._mask
        index = (key >> 1) & mask
        while slot := table[index]:
            if slot == key:
                return
            index = (index + 1) & mask
        table[index] = key
        self.count += 1
        if self.count > self.grows_at:
            self._grow()

    def _grow(self) -> None:
        old = self._table
        size = 2 * len(old)
        table = array("q", bytes(8 * size))
        mask = size - 1
        for key in old:
            if key:
                index = (key >> 1) & mask
                while table[index]:
                    index = (index + 1) & mask
                table[index] = key
        self._table, self._mask, self.grows_at = table, mask, size // 2


class NameBudget:
    """The bytes the listings open at once may spend remembering names, together.

    Each listing charges its ``NameSet``'s table as it grows, and gives it
    back when it ends (``ListingCheck.close``). A tree has many listings open
    (one per scanner, and those a scanner went down through): each is
    bounded on its own, and all of them together here.
    """

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_NAMES_HELD_BYTES if limit is None else limit
        self.held = 0

    def __repr__(self) -> str:
        return f"<NameBudget {self.held}/{self.limit}>"


class ListingCheck:
    """Refuses unsafe and repeated names in one directory's listing, and endless listings.

    A listing cut off by a dropped connection is asked again from the start:
    ``again()`` makes the names already seen pass once more, silently (the
    caller skips them), while a name twice in one attempt is still refused.
    ``close()`` when the listing ends gives its names back to ``budget``.
    """

    def __init__(self, where: str, budget: NameBudget | None = None) -> None:
        self.where = where
        self.entries = 0
        self.refused = 0
        self.chars = 0
        self._budget = budget if budget is not None else NameBudget()
        self._charged = 0  # bytes of ``_seen`` (and ``_earlier``) the budget holds for it
        self._seen = NameSet()
        self._earlier: NameSet | None = None
        self._grown_at = 0
        self._charge()

    def __repr__(self) -> str:
        return f"<ListingCheck {self.where!r} entries={self.entries} chars={self.chars}>"

    def again(self) -> None:
        """The listing starts over (after a reconnect)."""
        if self._earlier is None:
            self._earlier = NameSet()
        self._earlier.update(self._seen)
        self._seen = NameSet()
        self.entries = 0
        self.chars = 0
        self._charge()

    def close(self) -> None:
        """The listing is over: its names no longer count against the budget."""
        self._budget.held -= self._charged
        self._charged = 0
        self._seen = NameSet()
        self._earlier = None

    def accept(self, name: str) -> bool:
        """True for a name to copy, False for one to leave out; UnsafePath for the rest.

        Left out: ``.`` and ``..`` as every server lists them, and names an
        earlier attempt of this listing already gave.

        Raises:
            UnsafePath: a name that is not one plain component, or repeated.
            UnsafePath: past MAX_LISTING_ENTRIES entries, MAX_LISTING_NAME_CHARS
                characters of names, MAX_REFUSED_PER_LISTING refused ones, or
                with the budget's names all held, with ``listing_refused``
                saying so: the rest of the listing is not read.
        """
        self.entries += 1
        self.chars += len(name)
        if self.entries > MAX_LISTING_ENTRIES:
            self._give_up(f"more than {MAX_LISTING_ENTRIES} entries")
        if self.chars > MAX_LISTING_NAME_CHARS:
            self._give_up(f"more than {MAX_LISTING_NAME_CHARS >> 20} MiB of names")
        if name in (".", ".."):  # every server lists them, once: as files again, refused
            if not self._remember(name):
                return self._refuse(name)
            return False
        try:
            check_name(name, self.where)
        except UnsafePath:
            return self._refuse(name)
        # ``_remember``, inline: a listing of a million names passes here a million times.
        seen = self._seen
        if not seen.add(name):
            return self._refuse(name)  # one name, two entries: which to trust?
        if seen.count > self._grown_at:  # its table just grew
            self._charge()
        return self._earlier is None or name not in self._earlier

    def _remember(self, name: str) -> bool:
        """False for a name this attempt gave already."""
        if not self._seen.add(name):
            return False
        if self._seen.count > self._grown_at:
            self._charge()
        return True

    def _charge(self) -> None:
        """Charge the budget for what the tables take now (they only grow, until ``close``)."""
        seen, earlier = self._seen, self._earlier
        self._grown_at = seen.grows_at
        now = seen.nbytes() + (earlier.nbytes() if earlier is not None else 0)
        budget = self._budget
        if now > self._charged and budget.held + now - self._charged > budget.limit:
            limit = budget.limit >> 20
            self._give_up(f"the listings open at once hold {limit} MiB of names")
        budget.held += now - self._charged
        self._charged = now

    def _give_up(self, why: str) -> None:
        raise UnsafePath(self.where, "", listing_refused=why)

    def _refuse(self, name: str) -> bool:
        self.refused += 1
        if self.refused > MAX_REFUSED_PER_LISTING:
            why = f"more than {MAX_REFUSED_PER_LISTING} unsafe names"
            raise UnsafePath(self.where, name, listing_refused=why)
        raise UnsafePath(self.where, name)


# The slowest a server is assumed to read a file for a command (sha256sum):
# a single SD card or an old disk; the timeout allows for it on top of the
# stall timeout.
MIN_COMMAND_READ_RATE = 10_000_000


def command_timeout(stall_timeout: float, reads: int = 0) -> float:
    """Seconds a command may run silently: the stall timeout, plus reading ``reads`` bytes."""
    return stall_timeout + reads / MIN_COMMAND_READ_RATE


def command_output_cap(lines: int, text_bytes: int) -> int:
    """Most bytes a command may print: ``lines`` lines of hash and name, plus slack.

    ``text_bytes``: the bytes of the names it prints. GNU tools may escape each
    byte of a name as two (a backslash before it), hence the factor of two.
    """
    return COMMAND_OUTPUT_SLACK + lines * 70 + 2 * text_bytes
