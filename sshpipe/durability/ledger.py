"""The ledger of temporary files: what each run created, kept where a killed run leaves it.

Every temporary file sshpipe makes (``.NAME.sshpipe-XXXXXX.partial``, on the
server for an upload, on this machine for a download) is entered in a book
(``core.tempbook``) before the request that creates it goes out, and leaves
it once renamed into place or removed. Each book appends its entries as they
come (``+``) and go (``-``) to a record of its own, a file in
``$XDG_STATE_HOME/sshpipe/ledger/`` (0700): one per client for the server it
reaches, one per process for the local disk. Its owner holds an ``flock`` on
it while it lives; no two processes ever write one record.

A record whose lock can be taken belongs to a run that is gone (it ended,
was killed, crashed): what it still lists may be on disk. The next run to the
same place sweeps it (``sweep_remote`` at a client's first upload to that
``user@host:port``, ``sweep_local`` at its first download), and so does
``python -m sshpipe clean``. A sweep removes only names of our temporary
shape, regular files (a link is not followed), and counts a file found
missing as done; a record is removed once nothing in it is pending. A sweep
never fails the command that runs it: an entry that cannot be a path (a
NUL in it, another shape) is dropped at once, one the server keeps refusing
to remove is given up after ``MAX_FAILED_SWEEPS`` runs, and a lost
connection leaves the rest for the next.

A record costs one unbuffered append per file, before its create: the
entry, and with it the closing lines of the files gone since (a closing line
lost with a killed run costs its sweep one LSTAT that finds nothing). With
the book, 18 us of CPU per file on a loaded 2-core VM (13 of them the
record's). It is rewritten with its live entries alone once it has grown
past ``COMPACT_AT`` bytes, so a tree of a million files keeps it small.

The end of a client (``report_left``) says, in one line, what it could not
remove: the files whose OPEN was answered (there, for sure) and, apart, those
whose OPEN or REMOVE went out unanswered (maybe there): what the server
holds is between the two counts, and all of them are in the record.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import posixpath
import re
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from ..core import codec
from ..core.errors import SSHPipeError
from ..core.tempbook import TempBook
from ..core.tempnames import is_temp_name
from ..core.untrusted import ListingCheck
from ..local.dirfd import LocalDir, remove_ours
from ..transport.pool import ChannelPool
from ..transport.remotefs import read_dir
from ..transport.remoteplace import remove_quietly
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession
from .putresume import state_dir

logger = logging.getLogger("sshpipe.temps")

VERSION = 1
# A record is rewritten with its live entries alone once this many bytes were
# appended to it and they are mostly closed entries: ~10,000 files' worth.
COMPACT_AT = 1 << 20
# Sweeps (by runs apart) a server may refuse one REMOVE before the entry is
# dropped: a directory made read-only stays so, and the record must not grow
# for ever. A lost connection does not count.
MAX_FAILED_SWEEPS = 3
# Names the one line of what was left shows; ``clean --dry-run`` lists them all.
SHOWN = 5
# Requests a sweep keeps in flight on its channel.
_SWEEP_BATCH = 64
# Bytes of "-" lines held for the next write at most (~1,000 files' worth).
_DROPS_HELD = 64 * 1024

_RECORD = re.compile(r"(remote|local)-([0-9a-f]{16})-[0-9a-f]{12}\.ledger")
# Printable ASCII but " and \\: written into a JSON string as it is.
_PLAIN = re.compile(r"[ !#-\[\]-~]*")


def _digest(place: str) -> str:
    return hashlib.sha256(place.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def ledger_dir() -> Path:
    """``$XDG_STATE_HOME/sshpipe/ledger`` (made 0700 if missing)."""
    return state_dir("ledger")


def _line(sign: str, path: str) -> bytes:
    """One JSON line; a name that is not UTF-8 (a lone surrogate) is kept as \\udcXX."""
    if _PLAIN.fullmatch(path):  # most paths: no JSON encoder (a third of a record's cost)
        return f'["{sign}", "{path}"]\n'.encode("ascii")
    return (json.dumps([sign, path]) + "\n").encode("ascii")


def _can_be_path(path: str) -> bool:
    """Whether ``path`` could name one of our temporary files at all (no NUL, our shape)."""
    return "\x00" not in path and is_temp_name(posixpath.basename(path))


# -- the records a live run writes ---------------------------------------------------------


class RecordFile:
    """One run's record of one place (``core.tempbook.Record``), made at its first entry.

    ``place``: the server's "user@host:port" (asked when the first entry
    comes: the connection is up by then), or this machine's name.

    It is made under a hidden name, locked, and only then given its own, so a
    sweep never sees it unlocked. When it cannot be written (no state
    directory, a full disk) that is said once and the run goes on: the book
    still knows its files, only a killed run's would be lost.
    """

    def __init__(self, kind: str, place: Callable[[], str]) -> None:
        self.kind = kind
        self._place = place
        self._fd: int | None = None
        self._path: Path | None = None
        self._live: dict[str, int] = {}  # path -> bytes of its "+" line
        self._live_bytes = 0
        self._written = 0
        self._failed = False
        # "-" lines not written yet: they go with the next "+" (one write per
        # file, not two). One lost with the run costs its sweep an LSTAT that
        # finds nothing: an entry is never removed on the record's word alone.
        self._drops: list[bytes] = []
        self._drops_bytes = 0

    def __repr__(self) -> str:
        return f"<RecordFile {self.kind} {self._path} live={len(self._live)}>"

    def add(self, path: str) -> None:
        if self._failed or path in self._live:
            return
        if not _can_be_path(path):
            logger.debug("not recorded, it cannot be one of our files: %r", path)
            return
        if self._fd is None and not self._open():
            return
        line = _line("+", path)
        if self._write(self._take_drops() + line):  # before its create goes out
            self._live[path] = len(line)
            self._live_bytes += len(line)
            self._compact_if_due()

    def drop(self, path: str) -> None:
        length = self._live.pop(path, None)
        if length is None or self._fd is None:
            return
        self._live_bytes -= length
        line = _line("-", path)
        self._drops.append(line)
        self._drops_bytes += len(line)
        if self._drops_bytes > _DROPS_HELD and self._write(self._take_drops()):
            self._compact_if_due()

    def close(self) -> None:
        """Let it go: removed if nothing in it is pending, else left for a sweep."""
        fd = self._fd
        if fd is None:
            return
        if not self._live and self._path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._path)
        elif self._drops:
            self._write(self._take_drops())
        os.close(fd)  # the lock goes with it
        self._fd, self._path, self._live, self._live_bytes, self._written = None, None, {}, 0, 0
        self._drops, self._drops_bytes = [], 0

    def _take_drops(self) -> bytes:
        drops, self._drops, self._drops_bytes = b"".join(self._drops), [], 0
        return drops

    @property
    def pending(self) -> int:
        return len(self._live)

    def _open(self) -> bool:
        place = self._place()
        if not place:
            return False
        try:
            self._fd, self._path = _new_record(self.kind, place, [])
        except (OSError, SSHPipeError) as exc:
            self._fail(exc)
            return False
        return True

    def _write(self, data: bytes) -> bool:
        assert self._fd is not None
        try:
            if os.write(self._fd, data) != len(data):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as exc:
            self._fail(exc)
            return False
        self._written += len(data)
        return True

    def _compact_if_due(self) -> None:
        """Past COMPACT_AT bytes, most of them closed entries: start a new record."""
        if self._written > max(COMPACT_AT, 8 * self._live_bytes):
            self._compact()

    def _compact(self) -> None:
        """Start a new record with the live entries alone; then the old one goes."""
        assert self._fd is not None and self._path is not None
        try:
            fd, path = _new_record(self.kind, self._place(), list(self._live))
        except (OSError, SSHPipeError) as exc:
            logger.debug("ledger %s not compacted: %s", self._path, exc)
            self._written = 0  # not tried again at once
            return
        with contextlib.suppress(OSError):
            os.unlink(self._path)  # still locked: no sweep could take it meanwhile
        os.close(self._fd)
        self._fd, self._path = fd, path
        self._written = sum(self._live.values())
        self._drops, self._drops_bytes = [], 0  # of entries the new record never had

    def _fail(self, exc: BaseException) -> None:
        self._failed = True
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        logger.info(
            "temporary files not recorded in the ledger (%s): a run killed now "
            "would leave them for good",
            reason,
        )


def _new_record(kind: str, place: str, paths: list[str]) -> tuple[int, Path]:
    """A new record of ``place`` holding ``paths``, locked; its descriptor and path."""
    directory = ledger_dir()
    name = f"{kind}-{_digest(place)}-{secrets.token_hex(6)}.ledger"
    hidden = directory / f".{name}.new"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(hidden, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        header = {"ledger": VERSION, "kind": kind, "place": place, "pid": os.getpid()}
        data = (json.dumps(header) + "\n").encode("ascii")
        data += b"".join(_line("+", path) for path in paths)
        if os.write(fd, data) != len(data):
            raise OSError(errno.ENOSPC, "short write")
        os.rename(hidden, directory / name)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(hidden)
        raise
    return fd, directory / name


# -- the records of runs that are gone ----------------------------------------------------


@dataclass(slots=True)
class DeadRecord:
    """A record whose run is gone, locked by us while we sweep it."""

    path: Path
    fd: int
    place: str
    pending: dict[str, int] = field(default_factory=dict)  # path -> sweeps refused so far
    keep: bool = False  # a dry run: left as it was found

    def done(self, path: str) -> None:
        """Gone (removed, missing) or dropped: out of the record."""
        if self.pending.pop(path, None) is not None:
            self._append("-", path)

    def refused(self, path: str) -> None:
        """The place refused to remove it; after ``MAX_FAILED_SWEEPS`` it is given up."""
        tries = self.pending.get(path)
        if tries is None:
            return
        if tries + 1 >= MAX_FAILED_SWEEPS:
            logger.debug("%s: refused %d times, no longer swept", path, tries + 1)
            self.done(path)
            return
        self.pending[path] = tries + 1
        self._append("?", path)

    def finish(self) -> None:
        """Removed if nothing is pending any more; the lock is let go."""
        if not self.pending and not self.keep:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        os.close(self.fd)

    def _append(self, sign: str, path: str) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, _line(sign, path))


def dead_records(kind: str, place: str | None = None) -> Iterator[DeadRecord]:
    """The records of ``kind`` (of ``place``, or all) whose runs are gone, one at a time.

    Each is locked while the caller holds it and let go (``finish``) when the
    caller asks for the next, or leaves. A record another live run holds is
    skipped; one that cannot be read is removed (nothing can ever be swept by it).
    """
    try:
        directory = ledger_dir()
        names = sorted(os.listdir(directory))
    except (OSError, SSHPipeError):
        return
    for name in names:
        match = _RECORD.fullmatch(name)
        if match is None and name.startswith(".") and name.endswith(".ledger.new"):
            _drop_unborn(directory / name)
            continue
        if match is None or match.group(1) != kind:
            continue
        if place is not None and match.group(2) != _digest(place):
            continue
        record = _take(directory / name, kind, place)
        if record is None:
            continue
        try:
            yield record
        finally:
            record.finish()


def _take(path: Path, kind: str, place: str | None) -> DeadRecord | None:
    """``path`` locked and read, if its run is gone and it is of ``place``."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None  # swept meanwhile, or not a file of ours
    return claimed(fd, path, kind, place)


def claimed(fd: int, path: Path, kind: str, place: str | None) -> DeadRecord | None:
    """The record open on ``fd``, locked and read, if its run is gone (else ``fd`` is closed)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None  # its run is alive (or another sweep has it)
    if os.fstat(fd).st_nlink == 0:
        # Its owner removed it before letting go (done with it, or a compaction
        # moved its live entries to a new record): nothing here is ours to sweep.
        os.close(fd)
        return None
    try:
        lines = _read_all(fd).split(b"\n")
        header = json.loads(lines[0])
        if not (isinstance(header, dict) and header.get("kind") == kind):
            raise ValueError("not a ledger record")
        found = str(header.get("place", ""))
    except (OSError, ValueError):
        logger.debug("%s: unreadable, removed", path)
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)
        return None
    if place is not None and found != place:
        os.close(fd)  # another place whose digest is the same
        return None
    return DeadRecord(path, fd, found, _replayed(lines[1:]))


def _drop_unborn(path: Path) -> None:
    """A record whose run was killed while making it (before its first entry): removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_nlink:
            os.unlink(path)
    except OSError:
        pass  # being made right now
    finally:
        os.close(fd)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _replayed(lines: list[bytes]) -> dict[str, int]:
    """What a record's lines leave pending: path -> sweeps that failed. A torn last
    line (the run was killed while writing it) and any line not ours are skipped."""
    pending: dict[str, int] = {}
    for raw in lines:
        try:
            sign, path = json.loads(raw)
        except (ValueError, TypeError):
            continue
        if not isinstance(path, str):
            continue
        if sign == "+":
            pending.setdefault(path, 0)
        elif sign == "-":
            pending.pop(path, None)
        elif sign == "?" and path in pending:
            pending[path] += 1
    return pending


# -- sweeping ---------------------------------------------------------------------------


@dataclass(slots=True)
class Swept:
    """What a sweep did: the paths it removed (or, dry, found), those it left pending."""

    removed: list[str] = field(default_factory=list)
    pending: int = 0


async def sweep_remote(sftp: SFTPSession, *, dry_run: bool = False) -> Swept:
    """Remove what runs gone recorded on this server (``sftp.peer``); what was removed.

    ``dry_run``: find them (an LSTAT each) and change nothing.

    Raises:
        ConnectionBroken, ClosedError: the session ended; what is left stays recorded.
    """
    swept = Swept()
    _adopt_legacy(sftp.peer)
    for record in dead_records("remote", sftp.peer):
        record.keep = dry_run
        paths = _sweepable(record)
        for start in range(0, len(paths), _SWEEP_BATCH):
            await _sweep_batch(sftp, record, paths[start : start + _SWEEP_BATCH], swept)
        swept.pending += 0 if dry_run else len(record.pending)
    return swept


def _sweepable(record: DeadRecord) -> list[str]:
    """Its pending paths that can be ours; the others are dropped (unless it is kept)."""
    paths = []
    for path in list(record.pending):
        if _can_be_path(path):
            paths.append(path)
        elif not record.keep:
            logger.debug("%r: cannot be one of our files, dropped", path)
            record.done(path)
    return paths


async def _sweep_batch(
    sftp: SFTPSession, record: DeadRecord, paths: list[str], swept: Swept
) -> None:
    """LSTAT them all, then REMOVE the regular files: two round trips for the batch."""
    doomed: list[str] = []
    for path, reply in zip(paths, await _answers(sftp, codec.FXP_LSTAT, paths), strict=True):
        if isinstance(reply, codec.AttrsReply) and reply.attrs.kind == "file":
            doomed.append(path)
        elif isinstance(reply, codec.AttrsReply) or _missing(reply):
            # Gone, or a link or directory: never ours to remove.
            if not record.keep:
                record.done(path)
        elif not record.keep:
            record.refused(path)
    if record.keep:
        swept.removed += doomed
        return
    for path, reply in zip(doomed, await _answers(sftp, codec.FXP_REMOVE, doomed), strict=True):
        if _missing(reply) or (isinstance(reply, codec.Status) and reply.code == codec.FX_OK):
            record.done(path)
            if not _missing(reply):
                swept.removed.append(path)
        else:
            logger.debug("%s: not removed (%s)", path, reply)
            record.refused(path)


def _missing(reply: codec.Reply) -> bool:
    return isinstance(reply, codec.Status) and reply.code == codec.FX_NO_SUCH_FILE


async def _answers(sftp: SFTPSession, kind: int, paths: list[str]) -> list[codec.Reply]:
    """``kind`` (LSTAT, REMOVE) of each path, all in flight at once; their answers in order.

    Raises:
        ConnectionBroken, ClosedError: the session ended (no answer is left unread).
    """
    sent = []
    for path in paths:
        future = sftp.request(partial(codec.encode_path_request, kind, path=codec.wire(path)))
        future.add_done_callback(quiet)  # if one fails first, nobody reads the others
        sent.append(future)
    return [await future for future in sent]


def sweep_local(*, dry_run: bool = False) -> Swept:
    """Remove what runs gone recorded on this machine's disks (blocking); what was removed.

    Each path is reached from ``/`` without following a link (``dirfd.remove_ours``).
    ``dry_run``: find them and change nothing.
    """
    swept = Swept()
    for record in dead_records("local", socket.gethostname()):
        record.keep = dry_run
        for path in _sweepable(record):
            try:
                removed = remove_ours(path, dry_run=dry_run)
            except OSError as exc:
                logger.debug("%s: not removed (%s)", path, exc)
                if not dry_run:
                    record.refused(path)
                continue
            if not dry_run:
                record.done(path)
            if removed:
                swept.removed.append(path)
        swept.pending += 0 if dry_run else len(record.pending)
    return swept


def pending_places() -> dict[str, int]:
    """Servers with temporary files of runs gone still recorded: "user@host:port" -> count."""
    _adopt_legacy(None)
    places: dict[str, int] = {}
    for record in dead_records("remote"):
        record.keep = True
        count = len(_sweepable(record))
        if count:
            places[record.place] = places.get(record.place, 0) + count
    return places


def _adopt_legacy(peer: str | None) -> None:
    """Records of earlier sshpipe versions (``leftover/*.json``, written only when a run
    ended): made records of runs gone, so sweeps take them; their file goes."""
    try:
        directory = ledger_dir().parent / "leftover"
        names = os.listdir(directory)
    except (OSError, SSHPipeError):
        return
    for name in names:
        path = directory / name
        try:
            with open(path, encoding="utf-8", errors="surrogateescape") as source:
                held = json.load(source)
            place = held["peer"]
            paths = [p for p in held["paths"] if isinstance(p, str) and _can_be_path(p)]
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if not isinstance(place, str) or (peer is not None and place != peer):
            continue
        try:
            fd, _ = _new_record("remote", place, paths)
        except (OSError, SSHPipeError):
            continue
        os.close(fd)  # unlocked: a record of a run gone
        with contextlib.suppress(OSError):
            os.unlink(path)


# -- what a client does at its start and end ---------------------------------------------


def record_remote(pool: ChannelPool) -> None:
    """Give the pool's book of temporary files its record (made at its first entry)."""
    pool.temps.record = RecordFile("remote", lambda: pool.peer)


async def sweep(pool: ChannelPool, sftp: SFTPSession) -> None:
    """Before a client's first upload: remove what runs gone left on this server.

    Never fails the upload: whatever goes wrong is logged (debug) and left for
    the next.
    """
    if pool.swept or not sftp.peer:
        return
    pool.swept = True
    try:
        swept = await sweep_remote(sftp)
    except SSHPipeError as exc:
        logger.debug("sweep of %s stopped: %s", sftp.peer, exc)
        return
    if swept.removed:
        logger.info("removed %d temporary file(s) an earlier run left", len(swept.removed))


def sweep_local_quietly() -> None:
    """Before a client's first download: ``sweep_local``, never failing it (blocking)."""
    try:
        swept = sweep_local()
    except (OSError, SSHPipeError) as exc:
        logger.debug("sweep of local temporary files stopped: %s", exc)
        return
    if swept.removed:
        logger.info("removed %d temporary file(s) an earlier run left", len(swept.removed))


def report_left(temps: TempBook) -> list[str]:
    """At a client's end: what it could not remove from the server, in one line; the
    files there for sure. All of it stays in the record, for a sweep; an empty one goes.

    A name with a NUL in it was never made (no server takes one): not counted.
    """
    there, maybe = ([path for path in paths if "\x00" not in path] for paths in temps.left())
    if temps.record is not None:
        temps.close()
    if not there and not maybe:
        return there
    named = there or maybe
    shown = ", ".join(named[:SHOWN])
    if len(named) > SHOWN:
        shown += f" and {len(named) - SHOWN} more"
    if there:
        count = f"{len(there)} temporary file(s) left on the server"
        if maybe:
            count += f" (and {len(maybe)} more may have been created)"
    else:
        count = f"{len(maybe)} temporary file(s) may have been left on the server"
    logger.warning("%s, removed by the next upload to it or by the clean command: %s", count, shown)
    return there


_local_lock = threading.Lock()
_local: TempBook | None = None


def local_temps() -> TempBook:
    """This process's book of local temporary files, recorded per machine (made once)."""
    global _local
    with _local_lock:
        if _local is None:
            host = socket.gethostname()
            _local = TempBook(RecordFile("local", lambda: host))
        return _local


def release_local() -> None:
    """A client ends: this process's local record goes if nothing in it is pending."""
    if _local is not None:
        _local.close_if_empty()


# -- a tree resumed into its own destination --------------------------------------------


async def sweep_dir(sftp: SFTPSession, directory: str) -> int:
    """Remove the temp files of ours in a remote ``directory``; how many there were.

    For a tree resumed into its own destination: what a run that recorded
    nothing left there (an sshpipe before the ledger, a record that could not
    be written). Only names of our temp shape that a listing may hold
    (``ListingCheck``) are removed.
    """
    check = ListingCheck(directory)
    found: list[str] = []
    async with contextlib.aclosing(read_dir(sftp, directory)) as batches:
        async for batch in batches:
            found += [
                posixpath.join(directory, name)
                for name, attrs in batch
                if check.accept(name) and attrs.kind == "file" and is_temp_name(name)
            ]
    for path in found:
        await remove_quietly(sftp, path)
    if found:
        logger.info("%s: removed %d temporary file(s) an earlier run left", directory, len(found))
    return len(found)


def sweep_local_dir(directory: LocalDir) -> int:
    """``sweep_dir`` for a local directory of a resumed download tree (blocking)."""
    removed = 0
    with directory.descriptor() as fd:
        for name in os.listdir(fd):
            if not is_temp_name(name):
                continue
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                os.unlink(name, dir_fd=fd)
                removed += 1
    if removed:
        logger.info("%s: removed %d temporary file(s) an earlier run left", directory, removed)
    return removed
