"""The resume journal: which ranges of a ``.partial`` are complete, with a SHA-256 each.

A download keeps it beside its local partial file; an upload keeps it in the
user's state directory (``_putresume.py``), since the remote side has no cheap
append and the source's directory may be read-only.

Replies come back out of order, so a partial file is not a prefix: the journal
lists every range written (one JSON line each, appended by the writer after
the bytes are in the file). ``--resume`` trusts a range only if the bytes on
disk still hash to what the journal says, so a torn last line, a range whose
write did not reach the disk, or a file damaged since are asked for again.
The first line says what the copy is of (path, size, mtime): a source that
changed since is refused, saying what changed.

One copy at a time continues a partial: its journal is held under flock(2)
while the copy runs (``Journal.claim``), so a second ``--resume`` of the same
copy is refused at once, naming the first one's pid, instead of truncating
its journal and partial under it. The kernel lets go when the owner ends,
however it ends (SIGKILL too): a lock is never stale.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import stat
from typing import Any

from ..core import codec
from ..core.errors import IntegrityError, LocalError
from ..core.readback import latest_disjoint
from ..core.readplan import Range, ReadPlan
from ..core.tempnames import resume_name as fitted_resume_name
from ..core.text import printable
from ..local.dirfd import LocalFile, local_error, lstat, open_regular, remove
from ..local.writeback import Batch

logger = logging.getLogger("sshpipe.download")

VERSION = 1


def journal_name(local: LocalFile) -> LocalFile:
    return local.sibling(fitted_resume_name(local.name, "journal"))


def resume_name(local: LocalFile) -> LocalFile:
    """The partial file's name when resuming: fixed, so the next run finds it (within NAME_MAX)."""
    return local.sibling(fitted_resume_name(local.name, "partial"))


class Journal:
    """Appends the ranges a transfer completed; ``load`` reads them back for ``--resume``.

    It sits beside the destination, so it is opened as the partial file is:
    never through a link planted at its name (``open_regular``).
    """

    def __init__(self, path: LocalFile) -> None:
        self.path = path
        self._fd: int | None = None
        self._started = False

    def __repr__(self) -> str:
        return f"<Journal {self.path} open={self._fd is not None}>"

    def claim(self, shown: str) -> None:
        """Open the journal (made if missing) and hold it locked until ``close``.

        Before anything reads or writes the partial: two copies of one partial
        would each truncate the other's journal and write over its bytes.

        Raises:
            LocalError: naming ``shown``: another copy holds it (errno
                EWOULDBLOCK; its pid said where ``/proc/locks`` shows it).
        """
        if self._fd is not None:
            return
        for _ in range(3):
            try:
                fd = open_regular(self.path, write=True, append=True)
            except OSError as exc:
                raise local_error(self.path, exc) from exc
            assert fd is not None
            try:
                self._fd = fd if _locked(fd, self.path, shown) else None
            finally:
                if self._fd is None:
                    os.close(fd)
            if self._fd is not None:
                return
        raise LocalError(shown, "its resume journal keeps being replaced", errno=errno.EAGAIN)

    def start(self, header: dict[str, Any], *, append: bool) -> None:
        """Open for appending; a new journal (not ``append``) starts with ``header``."""
        try:
            if self._fd is None:
                self._fd = open_regular(self.path, write=True, append=True)
            assert self._fd is not None
            if not append:
                os.ftruncate(self._fd, 0)
                os.write(self._fd, (json.dumps({"v": VERSION, **header}) + "\n").encode())
        except OSError as exc:
            raise local_error(self.path, exc) from exc
        self._started = True

    def record(self, batch: Batch) -> None:
        """Called by the writer once these pieces are in the file."""
        entries = []
        for offset, chunks in batch:
            digest = hashlib.sha256()
            length = 0
            for chunk in chunks:
                digest.update(chunk)
                length += len(chunk)
            entries.append((offset, length, digest.hexdigest()))
        self.record_hashed(entries)

    def record_hashed(self, entries: list[tuple[int, int, str]]) -> None:
        """Append ranges already hashed: (offset, length, SHA-256 hex).

        Raises:
            OSError: the journal could not be written (the caller names it).
        """
        if self._fd is None or not entries:
            return
        lines = [
            json.dumps({"o": offset, "n": length, "h": digest})
            for offset, length, digest in entries
        ]
        os.write(self._fd, ("\n".join(lines) + "\n").encode())

    def close(self) -> None:
        """Let go of it; one claimed but never started and still empty goes (nothing in it)."""
        if self._fd is None:
            return
        if not self._started:
            with contextlib.suppress(OSError):
                if os.fstat(self._fd).st_size == 0:
                    remove(self.path)  # still ours: removed before the lock is let go
        os.close(self._fd)
        self._fd = None

    def remove(self) -> None:
        """Remove it (the copy is done), then let go: the next claim finds no journal."""
        try:
            remove(self.path)
        except OSError as exc:
            raise local_error(self.path, exc) from exc
        finally:
            self._started = True  # close() removes nothing: the name may be the next copy's
            self.close()


# What flock(2) says on a file system that has no locks to give.
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL)


def _locked(fd: int, path: LocalFile, shown: str) -> bool:
    """Lock the journal open at ``fd``; False: it is not the one ``path`` names any more.

    Raises:
        LocalError: naming ``shown``: another copy holds the lock.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise LocalError(shown, _busy(os.fstat(fd)), errno=errno.EWOULDBLOCK) from None
    except OSError as exc:
        if exc.errno not in _NO_LOCKS:
            raise local_error(path, exc) from exc
        # A file system without locks (some NFS mounts): resumed as before.
        logger.debug("%s: not locked: %s", printable(str(path)), exc)
        return True
    # The copy before us may have ended (and removed the journal) between our
    # open and our lock: the file locked must still be the one named.
    locked, named = os.fstat(fd), lstat(path)
    return named is not None and (named.st_dev, named.st_ino) == (locked.st_dev, locked.st_ino)


def holder_of(locks: str, device: int, inode: int) -> int | None:
    """The pid holding a flock(2) on the file ``device``/``inode``, from ``/proc/locks`` text.

    A line is "ID: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE START END" (the
    device numbers in hex); one waiting for a lock has "->" after its ID.
    """
    wanted = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    for line in locks.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted:
            with contextlib.suppress(ValueError):
                return int(fields[4])
    return None


def _busy(held: os.stat_result) -> str:
    """Why a journal's lock could not be had: who holds it, where Linux says."""
    try:
        with open("/proc/locks") as locks:
            pid = holder_of(locks.read(), held.st_dev, held.st_ino)
    except OSError:  # not Linux
        pid = None
    if pid == os.getpid():
        who = "another copy in this process"
    elif pid is not None and pid > 0:
        who = f"another sshpipe (pid {pid})"
    else:
        who = "another sshpipe"
    return f"{who} is resuming this copy: wait for it to end, or stop it"


# A journal longer than this is not one of ours: a range per request of a
# 4 GiB file of 32 KiB blocks is ~11 MiB of lines.
MAX_JOURNAL_BYTES = 256 * 1024 * 1024


def load(path: LocalFile) -> tuple[dict[str, Any], list[tuple[int, int, str]]] | None:
    """(header, ranges) of a journal, or None if there is none or it is not ours."""
    try:
        fd = open_regular(path, write=False)
        if fd is None:
            return None
        with open(fd, "rb") as file:
            if os.fstat(fd).st_size > MAX_JOURNAL_BYTES:
                return None
            text = file.read().decode("utf-8", "replace")
    except OSError as exc:
        raise local_error(path, exc) from exc
    lines = text.splitlines()
    try:
        header = json.loads(lines[0])
    except (IndexError, ValueError):
        return None
    if not isinstance(header, dict) or header.get("v") != VERSION:
        return None
    ranges = []
    for line in lines[1:]:
        try:  # a line torn by a kill is simply not trusted
            entry = json.loads(line)
            ranges.append((int(entry["o"]), int(entry["n"]), str(entry["h"])))
        except (ValueError, KeyError, TypeError):
            continue
    return header, ranges


def verified_ranges(partial: LocalFile, ranges: list[tuple[int, int, str]]) -> list[Range]:
    """The journal's ranges whose bytes in ``partial`` still have the recorded hash."""
    good: list[Range] = []
    try:
        fd = open_regular(partial, write=False)
    except OSError as exc:
        raise local_error(partial, exc) from exc
    if fd is None:
        return good
    try:
        for offset, length, digest in ranges:
            data = os.pread(fd, length, offset)
            if len(data) == length and hashlib.sha256(data).hexdigest() == digest:
                good.append(Range(offset, length))
    finally:
        os.close(fd)
    return good


class DownloadResume:
    """A download that may continue an earlier one: its partial file and journal."""

    def __init__(self, remote: str, local: LocalFile) -> None:
        self.remote = remote
        self.local = local
        self.partial = resume_name(local)
        self.journal = Journal(journal_name(local))
        self.kept = 0  # bytes found intact in the partial file
        # Looked at now, before the target opens (and creates) it: without its
        # partial, a journal is stale (removing the partial is how a refused
        # resume is started afresh). Only a regular file counts: a link or fifo
        # at the partial's name is not ours, and is replaced.
        info = lstat(self.partial)
        self.had_partial = info is not None and stat.S_ISREG(info.st_mode)

    def plan_for(self, attrs: codec.Attrs, block: int) -> ReadPlan:
        """The plan once the remote file's attributes are known; refuses a changed source.

        Raises:
            LocalError: another copy is resuming this one (``Journal.claim``).
            IntegrityError: the partial copy is of another file, or of this one
                as it was before it changed (saying which).
        """
        self.journal.claim(str(self.local))
        header = {"remote": self.remote, "size": attrs.size, "mtime": attrs.mtime}
        earlier = load(self.journal.path)
        if earlier is None or attrs.size is None or not self.had_partial:
            self.journal.start(header, append=False)
            return ReadPlan(block_size=block, size_hint=attrs.size)
        was, entries = earlier
        if was.get("remote") != self.remote:
            raise IntegrityError(
                self.remote,
                f"the partial copy {self.partial} is of {was.get('remote')}, "
                "not of this file: remove it, or copy without --resume",
            )
        changes = []  # SFTP v3 shows no inode or ctime: the size and mtime are all there is
        if was.get("size") != attrs.size:
            changes.append(f"its size changed from {was.get('size')} to {attrs.size} bytes")
        if was.get("mtime") != attrs.mtime:
            changes.append(f"its mtime changed from {was.get('mtime')} to {attrs.mtime}")
        if changes:
            raise IntegrityError(
                self.remote,
                f"changed since the partial copy {self.partial} was made: "
                f"{' and '.join(changes)}: remove it, or copy without --resume",
            )
        # A range written twice (a reconnect, another block size) counts once.
        have = verified_ranges(self.partial, latest_disjoint(entries, attrs.size))
        self.kept = sum(rng.length for rng in have)
        logger.info(
            "%s: resuming, %d bytes of %s kept", printable(self.remote), self.kept, attrs.size
        )
        self.journal.start(header, append=True)
        return ReadPlan.resuming(block_size=block, size=attrs.size, have=have)

    def finish(self, committed: bool) -> None:
        """After success the journal goes; after a failure it stays, for next time."""
        if committed:
            self.journal.remove()
        else:
            self.journal.close()
