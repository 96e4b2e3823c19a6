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
- ``is_temporary_name``: sshpipe's own temporary and resume names, which a
  listing may not plant beside the files being copied.
- ``check_link_target``: link text is copied verbatim (as ``rsync -l``). It
  must still be something a symlink can hold. Nothing is ever written through
  a link (the local side opens every directory with O_NOFOLLOW).
- ``safe_mode``: the permissions a copy may take. There is never a
  setuid/setgid bit, and the sticky bit only on directories, as OpenSSH's
  sftp and scp do.
- the bounds below: what a server may make us hold at once.
"""

from __future__ import annotations

from .._errors import UnsafePath
from .codec import Attrs, wire
from .tempnames import is_ours

# PATH_MAX: a longer name fits no local path anyway.
MAX_NAME_BYTES = 4096
# Link text: what readlink(2) can return on Linux (PATH_MAX).
MAX_LINK_BYTES = 4096
# Entries one directory listing may hold. The names seen are kept to refuse a
# repeated one (~90 bytes each), so a million fit in ~90 MiB. A READDIR that
# never ends is stopped here, not by running out of memory.
MAX_LISTING_ENTRIES = 1 << 20
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


def safe_mode(permissions: int, *, directory: bool) -> int:
    """The permission bits a copy may take: no setuid/setgid, sticky only on a directory."""
    return permissions & (0o1777 if directory else 0o777)


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


class ListingCheck:
    """Refuses unsafe and repeated names in one directory's listing.

    A listing cut off by a dropped connection is asked again from the start:
    ``again()`` makes the names already seen pass once more, silently (the
    caller skips them), while a name twice in one attempt is still refused.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.entries = 0
        self.refused = 0
        self._seen: set[str] = set()
        self._earlier: set[str] = set()

    def again(self) -> None:
        """The listing starts over (after a reconnect)."""
        self._earlier |= self._seen
        self._seen = set()
        self.entries = 0

    def accept(self, name: str) -> bool:
        """True for a name to copy, False for one to leave out; UnsafePath for the rest.

        Left out: ``.`` and ``..`` as every server lists them, and names an
        earlier attempt of this listing already gave.

        Raises:
            UnsafePath: a name that is not one plain component, or repeated.
            UnsafePath: past MAX_LISTING_ENTRIES entries, or past
                MAX_REFUSED_PER_LISTING refused ones, with ``listing_refused``
                saying so: the rest of the listing is not read.
        """
        self.entries += 1
        if self.entries > MAX_LISTING_ENTRIES:
            why = f"more than {MAX_LISTING_ENTRIES} entries"
            raise UnsafePath(self.where, "", listing_refused=why)
        seen = self._seen
        if name in (".", ".."):  # every server lists them, once: as files again, refused
            if name in seen:
                return self._refuse(name)
            seen.add(name)
            return False
        try:
            check_name(name, self.where)
        except UnsafePath:
            return self._refuse(name)
        if name in seen:
            return self._refuse(name)  # one name, two entries: which to trust?
        seen.add(name)
        return name not in self._earlier

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
