"""SFTP servers that each impose one cap seen in the field, for the restrictive-server tests.

A restriction is an object a test builds, serves with ``restricted_server``
and reads afterwards: each counts the times its cap bit (``refused``,
``dropped``), so a test can show the cap is really there.

- ``HandleCap(n)``: at most n open handles (files and directories) per SFTP
  session; one more OPEN or OPENDIR is answered FX_FAILURE "too many open
  handles": the generic code, as real servers answer (SFTP v3 has no other).
- ``ChannelCap(n)``: at most n session channels open at once per connection;
  one more is refused as sshd refuses past MaxSessions.
- ``StallsPastOutstanding(n)``: a READ that arrives while n READs are
  outstanding (received, reply not yet sent) is never answered, as servers
  do that answer only the first of a client's prefetched reads; every reply
  leaves a round trip's worth (20 ms) late, so a burst really piles up.
- ``SequentialWritesOnly``: a WRITE anywhere but at the file's current end is
  FX_FAILURE "non-sequential write" (object-store backed servers: Azure Blob's
  SFTP endpoint).
- ``NoSetstat(status)``: SETSTAT and FSETSTAT answered OP_UNSUPPORTED (or
  ``status``), as AWS Transfer Family and Azure Blob's endpoint answer them.
- ``NoCombinedOpen``: an OPEN with CREAT|TRUNC together with READ or WRITE
  is FX_FAILURE "unsupported flags" (AWS Transfer Family).
- ``MaxWriteBlocks(n, sequential=False)``: the (n+1)-th WRITE to one handle
  is FX_FAILURE "too many blocks" (Azure Blob: 50,000 blocks a blob); with
  ``sequential``, one not at the end too, as ``SequentialWritesOnly``'s.
- ``NoSymlinks``: SYMLINK answered OP_UNSUPPORTED (Azure Blob).
- ``NoExtensions``: a bare SFTP v3 VERSION (no limits@openssh.com,
  posix-rename, fsync, statvfs, hardlink); every EXTENDED request is
  OP_UNSUPPORTED, and RENAME onto an existing name fails (filexfer-02 §6.5).
- ``DropsChannelMidTree(after, on)``: closes an SFTP channel right after a
  reply (the first of kind ``on`` from the server's ``after``-th), once; the
  connection stays up.
- ``DiesMidTree(after)``: at the ``after``-th file created, the whole server
  goes down: it stops accepting and drops every connection. A test restarts
  it with ``restricted_server(..., reuse_keys=True)`` on the same port and root.
- ``ReadOnlyMount(directory)``: everything under ``directory`` is on a
  read-only mount: an OPEN that would write, a REMOVE (even of a name that is
  not there), a RENAME, MKDIR or SETSTAT there fails with EROFS, which the
  server answers FX_FAILURE, as OpenSSH's does on a read-only bind mount.

- ``ReadOnce(stat_consumes=False)``: each file may be opened for reading once
  (IBM Sterling-style mailboxes): a second OPEN of the same path for reading
  is answered NO_SUCH_FILE, and so is a STAT or LSTAT by name of a file read;
  with ``stat_consumes``, a STAT or LSTAT by name of a file consumes it too
  (rclone's ``use_fstat``). FSTAT on the open handle is always answered.
- ``DropsIdle(seconds)``: a connection on which no SFTP request came for
  ``seconds`` is closed by the server (Azure Blob's SFTP endpoint: 4 minutes).

Caps out of reach of asyncssh's ``SFTPServer`` (extensions, directory
handles, requests waiting in the channel) are imposed by a tap in front of it
(``sshpipe.testing.tap``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import os
import posixpath
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import asyncssh

from .embedded import ChannelSFTP, EmbeddedServer, SFTPOnlySession, embedded_server
from .hostile import FaithfulLinks, Recorder
from .tap import (
    FXP_CLOSE,
    FXP_EXTENDED,
    FXP_HANDLE,
    FXP_NAME,
    FXP_OPEN,
    FXP_OPENDIR,
    FXP_READ,
    FXP_VERSION,
    Packet,
    Tap,
    TappedSession,
    corked,
)

__all__ = [
    "ChannelCap",
    "DiesMidTree",
    "DropsChannelMidTree",
    "DropsIdle",
    "HandleCap",
    "MaxWriteBlocks",
    "NoCombinedOpen",
    "NoExtensions",
    "NoSetstat",
    "NoSymlinks",
    "ReadOnce",
    "ReadOnlyMount",
    "Restriction",
    "SequentialWritesOnly",
    "StallsPastOutstanding",
    "restricted_server",
]


class _Served(FaithfulLinks):
    """asyncssh's server chrooted at the root, serving a link's text as stored.

    The stock chrooted readlink resolves a relative target against the
    server's working directory (``sshpipe.testing.hostile``): trees with
    relative links could not come back as they went.
    """

    def __init__(self, chan: Any, root: Path) -> None:
        super().__init__(chan, root, Recorder())


class Restriction:
    """One cap; this base serves the chrooted root and imposes nothing."""

    max_sessions: int | None = None  # session channels one connection may hold

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        """The SFTP server of one session."""
        return _Served(chan, root)

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        """The session channel around it (a tapped one, for caps the server cannot see)."""
        return SFTPOnlySession(sftp)

    def session_refused(self) -> None:
        """Called at each session channel refused for ``max_sessions``."""

    def started(self, server: EmbeddedServer) -> None:
        """Called once the server listens."""


@contextlib.asynccontextmanager
async def restricted_server(
    workdir: Path,
    restriction: Restriction,
    *,
    root: Path | None = None,
    port: int = 0,
    reuse_keys: bool = False,
    server_version: str | None = None,
) -> AsyncIterator[EmbeddedServer]:
    """The embedded server imposing ``restriction``, for the ``async with`` block.

    Args:
        workdir: keys and known_hosts go here (see ``embedded_server``).
        restriction: the cap to impose (``Restriction()`` imposes none).
        root: the served directory (default ``workdir/root``).
        port: 0 picks a free one; a restart passes the old one.
        reuse_keys: keep the keys a server left in ``workdir`` (a restart).
        server_version: the banner's software (``AWS_SFTP_1.1``: a cloud profile's).
    """
    async with embedded_server(
        workdir,
        root=root,
        port=port,
        reuse_keys=reuse_keys,
        sftp_factory=restriction.sftp,
        max_sessions=restriction.max_sessions,
        session_factory=restriction.session,
        session_refused=restriction.session_refused,
        server_version=server_version,
    ) as server:
        restriction.started(server)
        yield server


# -- caps on what a session may hold -----------------------------------------------


class HandleCap(Restriction):
    """At most ``n`` open handles (files and directories) per SFTP session.

    Counted in arrival order, as a server working on one request at a time
    sees them: an OPEN counts from its arrival (until its failure, if it
    fails), a CLOSE frees its handle at its arrival.
    """

    def __init__(self, n: int = 16, *, message: str = "too many open handles") -> None:
        self.n = n
        self.message = message  # the refusal's text (servers word it each their own way)
        self.refused = 0  # OPEN/OPENDIR answered FX_FAILURE with ``message``
        self.peak = 0  # most handles one session held (or was opening) at once

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, _HandleTap(self))


class _HandleTap(Tap):
    def __init__(self, cap: HandleCap) -> None:
        self.cap = cap
        self.handles: set[bytes] = set()
        self.opening: set[int] = set()  # ids of OPEN/OPENDIR not answered yet

    def request(self, session: TappedSession, packet: Packet) -> bool:
        if packet.type in (FXP_OPEN, FXP_OPENDIR):
            assert packet.id is not None
            if len(self.handles) + len(self.opening) >= self.cap.n:
                self.cap.refused += 1
                session.answer(packet.id, asyncssh.FX_FAILURE, self.cap.message)
                return False
            self.opening.add(packet.id)
            self.cap.peak = max(self.cap.peak, len(self.handles) + len(self.opening))
        elif packet.type == FXP_CLOSE:
            self.handles.discard(packet.first_string())
        return True

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        if packet.id in self.opening:
            self.opening.discard(packet.id)
            if packet.type == FXP_HANDLE:
                self.handles.add(packet.first_string())
        return packet


class ChannelCap(Restriction):
    """At most ``n`` session channels open at once on one connection (sshd's MaxSessions)."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.max_sessions = n
        self.refused = 0  # channel opens refused

    def session_refused(self) -> None:
        self.refused += 1


# -- caps on how requests may come -------------------------------------------------


class StallsPastOutstanding(Restriction):
    """A READ arriving while ``n`` READs are outstanding is never answered.

    Every reply leaves ``delay`` seconds after its request's answer was
    ready, in order (a round trip's worth of latency), and a READ counts as
    outstanding until its reply has left: a client's burst of prefetched reads
    finds the server still busy with the first ``n``, however fast the
    machine. ``delay`` bounds what the cap costs a client that keeps within
    it: n blocks per ``delay``.
    """

    def __init__(self, n: int = 32, *, delay: float = 0.02) -> None:
        self.n = n
        self.delay = delay
        self.dropped = 0  # READs never answered
        self.peak = 0  # most READs outstanding on one session

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, _StallTap(self))


class _StallTap(Tap):
    def __init__(self, cap: StallsPastOutstanding) -> None:
        self.cap = cap
        self.outstanding: set[int] = set()
        self.held: collections.deque[tuple[float, Packet]] = collections.deque()

    def request(self, session: TappedSession, packet: Packet) -> bool:
        if packet.type != FXP_READ:
            return True
        assert packet.id is not None
        if len(self.outstanding) >= self.cap.n:
            self.cap.dropped += 1
            return False
        self.outstanding.add(packet.id)
        self.cap.peak = max(self.cap.peak, len(self.outstanding))
        return True

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        loop = asyncio.get_running_loop()
        if not self.held:
            loop.call_later(self.cap.delay, self._release, session)
        self.held.append((loop.time() + self.cap.delay, packet))
        return None

    def _release(self, session: TappedSession) -> None:
        loop = asyncio.get_running_loop()
        while self.held and self.held[0][0] <= loop.time():
            packet = self.held.popleft()[1]
            if packet.id is not None:
                self.outstanding.discard(packet.id)
            session.send(packet)
        if self.held:
            loop.call_at(self.held[0][0], self._release, session)


class SequentialWritesOnly(Restriction):
    """A WRITE anywhere but at the file's current end fails: "non-sequential write"."""

    def __init__(self) -> None:
        self.refused = 0  # WRITEs answered FX_FAILURE
        self.written = 0  # WRITEs that went through

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        return _AppendOnly(chan, root, self)


class _AppendOnly(_Served):
    def __init__(self, chan: Any, root: Path, cap: SequentialWritesOnly) -> None:
        super().__init__(chan, root)
        self.cap = cap

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        end = os.fstat(file_obj.fileno()).st_size  # type: ignore[attr-defined]
        if offset != end:
            self.cap.refused += 1
            raise asyncssh.SFTPFailure("non-sequential write")
        self.cap.written += 1
        return super().write(file_obj, offset, data)


class NoSetstat(Restriction):
    """SETSTAT and FSETSTAT answered ``status`` (OP_UNSUPPORTED by default): no attribute set."""

    def __init__(self, status: int = asyncssh.FX_OP_UNSUPPORTED) -> None:
        self.status = status
        self.refused = 0  # SETSTATs and FSETSTATs refused

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        return _NoAttrs(chan, root, self)

    def refuse(self, request: str) -> None:
        self.refused += 1
        raise asyncssh.SFTPError(self.status, f"{request} not supported")


class _NoAttrs(_Served):
    def __init__(self, chan: Any, root: Path, cap: NoSetstat) -> None:
        super().__init__(chan, root)
        self.cap = cap

    def setstat(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> Any:
        self.cap.refuse("SETSTAT")

    def lsetstat(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> Any:
        self.cap.refuse("SETSTAT")

    def fsetstat(self, file_obj: object, attrs: asyncssh.SFTPAttrs) -> Any:
        self.cap.refuse("FSETSTAT")


class NoCombinedOpen(Restriction):
    """An OPEN with CREAT|TRUNC together with READ or WRITE fails: "unsupported flags"."""

    def __init__(self) -> None:
        self.refused = 0  # OPENs refused for their flags
        self.opened: list[int] = []  # the flags of every OPEN that went through

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        return _SplitOpens(chan, root, self)


_CREAT_TRUNC = asyncssh.FXF_CREAT | asyncssh.FXF_TRUNC


class _SplitOpens(_Served):
    def __init__(self, chan: Any, root: Path, cap: NoCombinedOpen) -> None:
        super().__init__(chan, root)
        self.cap = cap

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        if pflags & _CREAT_TRUNC == _CREAT_TRUNC and pflags & (
            asyncssh.FXF_READ | asyncssh.FXF_WRITE
        ):
            self.cap.refused += 1
            raise asyncssh.SFTPFailure("unsupported flags")
        file_obj = super().open(path, pflags, attrs)
        self.cap.opened.append(pflags)
        return file_obj


class MaxWriteBlocks(Restriction):
    """The (``n`` + 1)-th WRITE to one handle fails: "too many blocks".

    ``sequential``: a WRITE anywhere but at the file's end fails too, as
    ``SequentialWritesOnly``'s (Azure Blob has both).
    """

    def __init__(self, n: int = 50_000, *, sequential: bool = False) -> None:
        self.n = n
        self.sequential = sequential
        self.refused = 0  # WRITEs past the cap
        self.out_of_order = 0  # WRITEs refused for not being at the end (``sequential``)
        self.most = 0  # most WRITEs one handle took

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        return _BlockCounting(chan, root, self)


class _BlockCounting(_Served):
    def __init__(self, chan: Any, root: Path, cap: MaxWriteBlocks) -> None:
        super().__init__(chan, root)
        self.cap = cap
        self.writes: dict[int, int] = {}  # WRITEs by open file (its id, until its CLOSE)

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        count = self.writes.get(id(file_obj), 0) + 1
        end = os.fstat(file_obj.fileno()).st_size  # type: ignore[attr-defined]
        if self.cap.sequential and offset != end:
            self.cap.out_of_order += 1
            raise asyncssh.SFTPFailure("non-sequential write")
        if count > self.cap.n:
            self.cap.refused += 1
            raise asyncssh.SFTPFailure("too many blocks")
        self.writes[id(file_obj)] = count
        self.cap.most = max(self.cap.most, count)
        return super().write(file_obj, offset, data)

    def close(self, file_obj: object) -> Any:
        self.writes.pop(id(file_obj), None)
        return super().close(file_obj)


class NoSymlinks(Restriction):
    """SYMLINK answered OP_UNSUPPORTED."""

    def __init__(self) -> None:
        self.refused = 0  # SYMLINKs refused

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        return _NoLinks(chan, root, self)


class _NoLinks(_Served):
    def __init__(self, chan: Any, root: Path, cap: NoSymlinks) -> None:
        super().__init__(chan, root)
        self.cap = cap

    def symlink(self, oldpath: bytes, newpath: bytes) -> Any:
        self.cap.refused += 1
        raise asyncssh.SFTPOpUnsupported("symlinks not supported")


class NoExtensions(Restriction):
    """A bare SFTP v3 server: no extension offered, none honoured."""

    def __init__(self) -> None:
        self.refused: list[bytes] = []  # names of the EXTENDED requests answered unsupported

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, _BareTap(self))


class _BareTap(Tap):
    def __init__(self, cap: NoExtensions) -> None:
        self.cap = cap

    def request(self, session: TappedSession, packet: Packet) -> bool:
        if packet.type != FXP_EXTENDED:
            return True
        assert packet.id is not None
        self.cap.refused.append(packet.first_string())
        session.answer(packet.id, asyncssh.FX_OP_UNSUPPORTED, "Unsupported request type")
        return False

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        if packet.type == FXP_VERSION:
            return Packet(FXP_VERSION, packet.payload[:4])  # the version, no extension pairs
        return packet


# -- servers that go away mid-run ---------------------------------------------------


class DropsChannelMidTree(Restriction):
    """Closes an SFTP channel right after one of its replies, once, mid-run.

    As when a server's SFTP subsystem exits: its last reply and the channel's
    close arrive together, so the client learns of the close while it acts
    on that reply. The reply is the first, from the server's ``after``-th on
    (counted over every channel of every connection), that is of the kind
    ``on``: any reply; the status of a CLOSE (an upload renames its file at
    once); or a listing's names (a walk reads on at once). Requests still
    outstanding on the channel are never answered; the connection and its
    other channels stay.
    """

    def __init__(self, after: int = 300, *, on: Literal["any", "close", "names"] = "any") -> None:
        self.after = after
        self.on = on
        self.replies = 0  # replies sent on every session of every connection
        self.dropped = False

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, _DroppingTap(self))


class _DroppingTap(Tap):
    def __init__(self, cap: DropsChannelMidTree) -> None:
        self.cap = cap
        self.closing: set[int] = set()  # ids of CLOSE requests not answered yet

    def request(self, session: TappedSession, packet: Packet) -> bool:
        if packet.type == FXP_CLOSE:
            assert packet.id is not None
            self.closing.add(packet.id)
        return True

    def reply(self, session: TappedSession, packet: Packet) -> Packet | None:
        if packet.id is None or self.cap.dropped:
            return packet
        self.cap.replies += 1
        kind = {"any": True, "close": packet.id in self.closing, "names": packet.type == FXP_NAME}
        self.closing.discard(packet.id)
        if self.cap.replies < self.cap.after or not kind[self.cap.on]:
            return packet
        self.cap.dropped = True
        # One segment, as sshd sends a dead subsystem's last output with the close:
        # the client reads the reply and the close in one go.
        with corked(session.channel.get_extra_info("socket")):
            session.send(packet)
            session.channel.close()
        return None


class DiesMidTree(Restriction):
    """Goes down at the ``after``-th file created: stops accepting, drops every connection.

    The creating OPEN itself is never answered: its file exists, empty, as a
    crash would leave it. ``died`` is set then.
    """

    def __init__(self, after: int = 40) -> None:
        self.after = after
        self.created = 0
        self.died = asyncio.Event()
        self._listener: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()

    def started(self, server: EmbeddedServer) -> None:
        self._listener = server.listener

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        conn = chan.get_connection()
        self._connections.add(conn)
        if self.died.is_set():
            conn.abort()  # a session of a connection that got in just before the end
        return _Dying(chan, root, self)

    def die(self) -> None:
        self.died.set()
        if self._listener is not None:
            self._listener.close()
        for conn in self._connections:
            conn.abort()


class _Dying(_Served):
    """Counts the files it creates; once dead, touches nothing.

    asyncssh's handler goes on with the requests already in its channel
    after the connection is gone (their replies are lost): a dead host would
    not, so every path (``map_path``) and every write is refused then.
    """

    def __init__(self, chan: Any, root: Path, cap: DiesMidTree) -> None:
        super().__init__(chan, root)
        self.cap = cap

    def map_path(self, path: bytes) -> bytes:
        if self.cap.died.is_set():
            raise asyncssh.SFTPConnectionLost("the server is gone")
        return super().map_path(path)

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        file_obj = super().open(path, pflags, attrs)
        if pflags & asyncssh.FXF_CREAT:
            self.cap.created += 1
            if self.cap.created >= self.cap.after:
                self.cap.die()
        return file_obj

    def write(self, file_obj: object, offset: int, data: bytes) -> Any:
        if self.cap.died.is_set():
            raise asyncssh.SFTPConnectionLost("the server is gone")
        return super().write(file_obj, offset, data)


class ReadOnlyMount(Restriction):
    """``directory`` (a path as the client spells it) and below are read-only (EROFS)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory.rstrip("/").encode()
        self.refused: collections.Counter[str] = collections.Counter()  # by request

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        return _ReadOnly(chan, root, self)

    def check(self, request: str, path: bytes) -> None:
        """EROFS if ``path`` is under the directory (before the chroot maps it)."""
        if path == self.directory or path.startswith(self.directory + b"/"):
            self.refused[request] += 1
            raise OSError(errno.EROFS, "Read-only file system")


class _ReadOnly(_Served):
    def __init__(self, chan: Any, root: Path, cap: ReadOnlyMount) -> None:
        super().__init__(chan, root)
        self.cap = cap

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        if pflags & (asyncssh.FXF_WRITE | asyncssh.FXF_CREAT | asyncssh.FXF_TRUNC):
            self.cap.check("open", path)
        return super().open(path, pflags, attrs)

    def remove(self, path: bytes) -> Any:
        self.cap.check("remove", path)
        return super().remove(path)

    def rename(self, oldpath: bytes, newpath: bytes) -> Any:
        self.cap.check("rename", oldpath)
        self.cap.check("rename", newpath)
        return super().rename(oldpath, newpath)

    def posix_rename(self, oldpath: bytes, newpath: bytes) -> Any:
        self.cap.check("rename", oldpath)
        self.cap.check("rename", newpath)
        return super().posix_rename(oldpath, newpath)

    def mkdir(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> Any:
        self.cap.check("mkdir", path)
        return super().mkdir(path, attrs)

    def setstat(self, path: bytes, attrs: asyncssh.SFTPAttrs) -> Any:
        self.cap.check("setstat", path)
        return super().setstat(path, attrs)


# -- mailboxes and cloud endpoints ---------------------------------------------------


class ReadOnce(Restriction):
    """Each file may be opened for reading once; with ``stat_consumes``, a STAT by name eats it.

    A file read (or, with ``stat_consumes``, STATed by name) is consumed: an
    OPEN for reading, a STAT or an LSTAT of its path is NO_SUCH_FILE from
    then on, as the mailbox has handed it out. Paths are compared as the
    client spells them, made absolute and normalised.
    """

    def __init__(self, *, stat_consumes: bool = False) -> None:
        self.stat_consumes = stat_consumes
        self.opens: collections.Counter[bytes] = collections.Counter()  # OPENs for reading granted
        self.stats: collections.Counter[bytes] = collections.Counter()  # STAT/LSTAT of a file
        self.refused: collections.Counter[bytes] = collections.Counter()  # answered NO_SUCH_FILE
        self.consumed: set[bytes] = set()

    def sftp(self, chan: Any, root: Path) -> asyncssh.SFTPServer:
        return _ReadOnceServer(chan, root, self)

    def check(self, path: bytes) -> bytes:
        """The path's key; NO_SUCH_FILE if it was consumed."""
        key = posixpath.normpath(posixpath.join(b"/", path))
        if key in self.consumed:
            self.refused[key] += 1
            raise asyncssh.SFTPNoSuchFile("No such file (read once)")
        return key


class _ReadOnceServer(_Served):
    def __init__(self, chan: Any, root: Path, cap: ReadOnce) -> None:
        super().__init__(chan, root)
        self.cap = cap

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        if not pflags & asyncssh.FXF_READ:
            return super().open(path, pflags, attrs)
        key = self.cap.check(path)
        file_obj = super().open(path, pflags, attrs)
        self.cap.opens[key] += 1
        self.cap.consumed.add(key)
        return file_obj

    def stat(self, path: bytes) -> Any:
        return self._by_name(path, super().stat(path))

    def lstat(self, path: bytes) -> Any:
        return self._by_name(path, super().lstat(path))

    def _by_name(self, path: bytes, attrs: Any) -> Any:
        key = self.cap.check(path)
        mode = attrs.st_mode if isinstance(attrs, os.stat_result) else attrs.permissions
        if mode is not None and stat.S_ISREG(mode):
            self.cap.stats[key] += 1
            if self.cap.stat_consumes:
                self.cap.consumed.add(key)
        return attrs


class DropsIdle(Restriction):
    """A connection without an SFTP request for ``seconds`` is closed by the server."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.dropped = 0  # connections closed for idling
        self._timers: dict[asyncssh.SSHServerConnection, asyncio.TimerHandle] = {}

    def session(self, sftp: ChannelSFTP) -> SFTPOnlySession:
        return TappedSession(sftp, _IdleTap(self))

    def active(self, conn: asyncssh.SSHServerConnection) -> None:
        """A request came on ``conn``: its idle clock starts again."""
        timer = self._timers.pop(conn, None)
        if timer is not None:
            timer.cancel()
        loop = asyncio.get_running_loop()
        self._timers[conn] = loop.call_later(self.seconds, self._drop, conn)

    def _drop(self, conn: asyncssh.SSHServerConnection) -> None:
        del self._timers[conn]
        if conn.is_closed():
            return  # the client closed it first
        self.dropped += 1
        conn.close()


class _IdleTap(Tap):
    def __init__(self, cap: DropsIdle) -> None:
        self.cap = cap

    def request(self, session: TappedSession, packet: Packet) -> bool:
        self.cap.active(session.channel.get_connection())
        return True
