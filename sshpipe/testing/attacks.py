"""A malicious SFTP server: every attack of sshpipe's threat model, each under its own directory.

The server is asyncssh's ``SFTPServer``, chrooted at the served root like the
embedded one. It serves the real files there, plus *planted* entries: names,
links, modes and answers no honest server would give. A test points the
client at one directory and checks what it must: nothing written outside the
destination (the ``Scenario.victim`` directory stays as it was), nothing the
user did not ask for, no control character on the terminal, bounded memory,
the documented exit code.

=================  ==================================================================
directory          attack
=================  ==================================================================
``/gcol``          ``a``, a link to the victim directory, then ``x/a``, a directory
                   (mode 07777) holding ``pwned.txt``: a glob or a tree that created
                   the link and then wrote through it would land in the victim
``/resume``        ``.big.sshpipe.partial`` and ``.big.sshpipe.journal`` listed as
                   links into the victim, beside the real ``big``
``/inplace``       ``big`` listed as a link into the victim; once ``Scenario.flipped``,
                   as the real file (``--inplace`` run twice)
``/glob``          besides real ``*.txt`` files: ``x/.bashrc``, ``z/../../escape.txt``,
                   ``y/evil.txt``, ``s/.ssh``
``/suid``          ``tool`` (mode 07777), ``dir`` (07777) holding ``inner`` (06755)
``/esc``           names, a STATUS message (``denied``) and REALPATH text (``loop``)
                   full of terminal escapes (``Disconnecting``: a DISCONNECT reason)
``/endless``       a READDIR that never ends (entries of ``Scenario.endless_kind``)
``/silent``        an OPEN never answered
``/slow``          every request answered after ``Scenario.delay`` seconds
``/nullink``       a link whose text holds a NUL, beside a real file
``/huge``          ``f``, a file of 1 TiB (zeros, made up as they are read)
``/lying``         a RENAME (and posix-rename) that answers OK and does nothing
``/unlinking``     a RENAME (and posix-rename) that answers OK, removes the old name
                   and leaves the new one as it was (a file of the same size there
                   passes a look at the size alone)
``/deep``          a chain of directories ``d/d/d/...`` without end
``/wide``          every directory holds ``Scenario.width`` directories, without end
``/globwide``      ``Scenario.globwide`` directories of ``Scenario.width`` fifos, each
                   name ``Scenario.name_length`` long: a glob ``*/*`` over all of them
``/longnames``     a READDIR that never ends, of names ``Scenario.name_length`` long
                   shaped like sshpipe's temporary files (left out, so only remembered)
``/realpath``      ``a`` and ``b``, links to the directory they are in (``.``), whose
                   REALPATH answers a new path each time: a loop ``-L`` cannot see
``/unresolved``    ``sub/up``, a real link to ``..``, and a REALPATH that resolves no
                   link (it answers the path asked): an honest loop, hidden from it
=================  ==================================================================

Everything under the last five is made up as it is asked for: nothing of it is
on disk, and a tree there has no end.

``Disconnecting`` is an SSH server that says goodbye with escapes at once;
``endless_output`` is a process factory whose exec and shell print without end
(``--verify``'s ``sha256sum``, a tree's ``sync``); ``garbled_output`` one whose
exec exits 0 having printed no hash (a ``sha256sum`` that cannot be read).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import posixpath
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

MARKER = b"SSHPIPE-ATTACK-MARKER:"
ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b31m\rsshpipe: fake line\n"  # OSC, CSI, C1 CSI, CR, LF
ESCAPED_NAMES = (b"\x1b]0;title\x07.txt", b"c1\xc2\x9b31mred.txt", b"cr\rlf\n.txt")
# The real files each attack directory holds beside what it plants.
REAL_FILES: dict[str, bytes] = {
    "resume/big": bytes(range(256)) * (12 * 1024),  # 3 MiB: the single-file engine
    "inplace/big": b"the real big file\n" * 1000,
    "glob/a.txt": b"a real file\n",
    "glob/b.txt": b"another real file\n",
    "suid/tool": b"#!/bin/sh\necho tool\n",
    "suid/dir/inner": b"inner\n",
    "esc/plain.txt": b"plain\n",
    "nullink/ok.txt": b"an ordinary file\n",
    "lying/.keep": b"",
    "unlinking/.keep": b"",
    "silent/f": b"never served\n",
    "slow/f": b"served late\n",
}


@dataclass
class Fake:
    """A planted entry: its kind ("file", "dir", "link", "fifo"), mode, link text, bytes."""

    kind: str
    mode: int = 0o644
    target: bytes = b""
    data: bytes = MARKER
    zeros: int = 0  # a file of this many zero bytes instead of ``data``

    def attrs(self) -> asyncssh.SFTPAttrs:
        kinds = {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "link": stat.S_IFLNK}
        size = (self.zeros or len(self.data)) if self.kind == "file" else len(self.target)
        return asyncssh.SFTPAttrs(
            permissions=kinds.get(self.kind, stat.S_IFIFO) | self.mode,
            size=size,
            uid=os.getuid(),
            gid=os.getgid(),
            atime=1_000_000_000,
            mtime=1_000_000_000,
        )


@dataclass
class Scenario:
    """What the attacks aim at, and the switches a test turns between runs.

    Attributes:
        victim: a directory outside every destination: links point into it.
        flipped: ``/inplace`` lists the real file instead of the link.
        endless_kind: what ``/endless`` lists: "fifo" (skipped, so the listing
            streams at full speed) or "file".
        delay: seconds ``/slow`` waits before each answer.
        width: entries of each directory of ``/wide``, and of ``/globwide``'s.
        globwide: directories of ``/globwide``.
        name_length: bytes of each name of ``/globwide``'s and ``/longnames``.
        requests: every path the client asked about, in order.
        realpaths: REALPATHs answered under ``/realpath`` (each a new path).
    """

    victim: Path
    flipped: bool = False
    endless_kind: str = "fifo"
    delay: float = 30.0
    width: int = 100_000
    globwide: int = 1_000
    name_length: int = 1_900
    requests: list[bytes] = field(default_factory=list)
    realpaths: int = 0

    def planted(self) -> dict[bytes, dict[bytes, Fake]]:
        """Directory -> the entries planted in it (by name; a real file of that name is hidden)."""
        victim = os.fsencode(self.victim)
        return {
            b"/gcol": {b"a": Fake("link", target=victim), b"x/a": Fake("dir", 0o7777)},
            b"/gcol/x/a": {b"pwned.txt": Fake("file", 0o7777)},
            b"/resume": {
                b".big.sshpipe.partial": Fake("link", target=victim + b"/partial"),
                b".big.sshpipe.journal": Fake("link", target=victim + b"/journal"),
            },
            b"/inplace": {} if self.flipped else {b"big": Fake("link", target=victim + b"/f")},
            b"/glob": {
                b"x/.bashrc": Fake("file"),
                b"z/../../escape.txt": Fake("file"),
                b"y/evil.txt": Fake("file"),
                b"s/.ssh": Fake("dir"),
            },
            b"/suid": {
                b"tool": Fake("file", 0o7777, data=REAL_FILES["suid/tool"]),
                b"dir": Fake("dir", 0o7777),
            },
            b"/suid/dir": {b"inner": Fake("file", 0o6755, data=REAL_FILES["suid/dir/inner"])},
            b"/esc": {name: Fake("file") for name in ESCAPED_NAMES} | {b"loop": Fake("dir")},
            b"/nullink": {b"l": Fake("link", target=b"tar\x00get")},
            b"/huge": {b"f": Fake("file", zeros=1 << 40)},
        }


def populate(root: Path) -> None:
    """Write the real files the attack directories serve beside what they plant."""
    for rel, data in REAL_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (root / "suid" / "dir").chmod(0o755)
    made_up = [os.fsdecode(top) for top in _MADE_UP]
    for directory in ("gcol", "endless", "latin1", "esc/loop", "huge", *made_up):
        (root / directory).mkdir(exist_ok=True)  # nothing real in them
    (root / "latin1" / os.fsdecode(b"caf\xe9.txt")).write_bytes(b"latin-1 name\n")
    (root / "unresolved" / "sub").mkdir(parents=True, exist_ok=True)
    (root / "unresolved" / "sub" / "f.txt").write_bytes(b"in the loop\n")
    if not (root / "unresolved" / "sub" / "up").is_symlink():
        (root / "unresolved" / "sub" / "up").symlink_to("..")


class AttackServer(asyncssh.SFTPServer):
    """Serves ``root`` as "/", with the planted entries of ``scenario`` on top."""

    def __init__(self, chan: asyncssh.SSHServerChannel[bytes], root: Path, scenario: Scenario):
        super().__init__(chan, chroot=os.fsencode(root))
        self.scenario = scenario
        self._planted = scenario.planted()

    def _fake(self, path: bytes) -> Fake | None:
        """The planted entry at ``path``, as a client that believed the listing would ask."""
        path = b"/" + path.lstrip(b"/")
        for directory, entries in self._planted.items():
            for name, fake in entries.items():
                if posixpath.join(directory, name) == path:
                    return fake
        return None

    async def _answer(self, path: bytes) -> None:
        """Every request: recorded; the silent and slow ones held."""
        self.scenario.requests.append(path)
        if path.startswith(b"/slow"):
            await asyncio.sleep(self.scenario.delay)

    # -- listings ---------------------------------------------------------------

    async def scandir(self, path: bytes) -> AsyncIterator[asyncssh.SFTPName]:
        await self._answer(path)
        where = posixpath.normpath(b"/" + path.lstrip(b"/"))
        if where == b"/endless":
            async for endless in self._endless():
                yield endless
            return
        made_up = _made_up(where)
        if made_up is not None:
            async for entry in self._made_up_listing(made_up, where):
                yield entry
            return
        planted = self._planted.get(where, {})
        if where == b"/gcol/x/a":
            for dot in (b".", b".."):
                yield asyncssh.SFTPName(dot, attrs=Fake("dir", 0o755).attrs())
        else:
            async for entry in super().scandir(path):
                if entry.filename not in planted:
                    yield entry
        for name, fake in planted.items():
            yield asyncssh.SFTPName(name, attrs=fake.attrs())

    async def _endless(self) -> AsyncIterator[asyncssh.SFTPName]:
        for dot in (b".", b".."):
            yield asyncssh.SFTPName(dot, attrs=Fake("dir", 0o755).attrs())
        # One attrs object and a longname of our own: asyncssh would otherwise
        # look the uid and gid up for every entry, which was most of the time
        # a million entries took.
        attrs = Fake(self.scenario.endless_kind).attrs()
        count = 0
        while True:
            count += 1
            name = f"{count:012d}.dat".encode()
            yield asyncssh.SFTPName(name, longname=b"p--------- 1 0 0 0 " + name, attrs=attrs)

    async def _made_up_listing(
        self, made_up: bytes, where: bytes
    ) -> AsyncIterator[asyncssh.SFTPName]:
        """A listing of the trees that are made up as they are asked for."""
        for dot in (b".", b".."):
            yield _name(dot, _DIR)
        scenario = self.scenario
        if made_up == b"deep":
            yield _name(b"d", _DIR)
        elif made_up == b"wide":
            for index in range(scenario.width):
                yield _name(b"w%06d" % index, _DIR)
        elif made_up == b"globwide" and where == b"/globwide":
            for index in range(scenario.globwide):
                yield _name(b"g%03d" % index, _DIR)
        elif made_up == b"globwide":  # names no other directory has: all land
            filler = b"n" * max(1, scenario.name_length - 13)
            which = posixpath.basename(where)
            for index in range(scenario.width):
                yield _name(b"%s%06d%s" % (which, index, filler), _FIFO)
        elif made_up == b"longnames":
            filler = b"x" * max(1, scenario.name_length - 30)
            count = 0
            while True:
                count += 1
                yield _name(b".%012d%s.sshpipe.partial" % (count, filler), _FILE)
        elif made_up == b"realpath":
            for name in (b"a", b"b"):
                yield _name(name, _LINK)

    # -- attributes and links -------------------------------------------------------

    async def lstat(self, path: bytes) -> Any:
        await self._answer(path)
        made_up = _made_up_attrs(path, follow=False)
        if made_up is not None:
            return made_up
        fake = self._fake(path)
        return fake.attrs() if fake is not None else super().lstat(path)

    async def stat(self, path: bytes) -> Any:
        await self._answer(path)
        made_up = _made_up_attrs(path, follow=True)
        if made_up is not None:
            return made_up
        fake = self._fake(path)
        if fake is not None and fake.kind == "link":
            return Fake("dir", 0o755).attrs()  # "followed": the victim is a directory
        return fake.attrs() if fake is not None else super().stat(path)

    async def readlink(self, path: bytes) -> bytes:
        await self._answer(path)
        if _made_up(posixpath.normpath(b"/" + path.lstrip(b"/"))) == b"realpath":
            return b"."
        fake = self._fake(path)
        if fake is not None and fake.kind == "link":
            return fake.target
        target: bytes = await _maybe(super().readlink(path))
        return target

    async def realpath(self, path: bytes) -> bytes:
        await self._answer(path)
        where = posixpath.normpath(b"/" + path.lstrip(b"/"))
        if where in (b"/esc", b"/esc/loop"):
            return b"/" + ESCAPES.encode()  # a "loop" whose name drives the terminal
        if _made_up(where) == b"realpath":
            self.scenario.realpaths += 1  # never the same twice: no loop to see
            return b"/realpath/%d" % self.scenario.realpaths
        if where == b"/unresolved" or where.startswith(b"/unresolved/"):
            return where  # as some servers do: normalized, no link resolved
        if _made_up(where) is not None:
            return where
        real: bytes = await _maybe(super().realpath(path))
        return real

    # -- files --------------------------------------------------------------------------

    async def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        await self._answer(path)
        where = posixpath.normpath(b"/" + path.lstrip(b"/"))
        if where.startswith(b"/silent"):
            await asyncio.Event().wait()  # never answered
        if where == b"/esc/denied":
            raise asyncssh.SFTPPermissionDenied(ESCAPES)
        fake = self._fake(path)
        if fake is not None and fake.kind == "file":
            return _Memory(fake.data, fake.zeros)
        return await _maybe(super().open(path, pflags, attrs))

    def read(self, file_obj: object, offset: int, size: int) -> Any:
        if isinstance(file_obj, _Memory):
            return file_obj.read(offset, size)
        return super().read(file_obj, offset, size)

    def fstat(self, file_obj: object) -> Any:
        if isinstance(file_obj, _Memory):
            return Fake("file", data=file_obj.data, zeros=file_obj.zeros).attrs()
        return super().fstat(file_obj)

    def close(self, file_obj: object) -> Any:
        if isinstance(file_obj, _Memory):
            return None
        return super().close(file_obj)

    async def rename(self, oldpath: bytes, newpath: bytes) -> None:
        await self._answer(newpath)
        if not await self._lied(oldpath, newpath):
            await _maybe(super().rename(oldpath, newpath))

    async def posix_rename(self, oldpath: bytes, newpath: bytes) -> None:
        await self._answer(newpath)
        if not await self._lied(oldpath, newpath):
            await _maybe(super().posix_rename(oldpath, newpath))

    async def _lied(self, oldpath: bytes, newpath: bytes) -> bool:
        """Whether this rename is one to lie about (``/lying``, ``/unlinking``), having lied."""
        if newpath.startswith(b"/unlinking"):
            await _maybe(super().remove(oldpath))
            return True
        return newpath.startswith(b"/lying")


_MADE_UP = (b"deep", b"wide", b"globwide", b"longnames", b"realpath")
_DIR = Fake("dir", 0o755).attrs()
_FILE = Fake("file", data=b"").attrs()
_FIFO = Fake("fifo").attrs()
_LINK = Fake("link", 0o777, target=b".").attrs()


def _made_up(where: bytes) -> bytes | None:
    """Which made-up tree ``where`` (normalized) is in, if any."""
    top = where.lstrip(b"/").split(b"/", 1)[0]
    return top if top in _MADE_UP else None


def _made_up_attrs(path: bytes, *, follow: bool) -> asyncssh.SFTPAttrs | None:
    """Attributes in a made-up tree: every directory is one; under ``/realpath``
    the names in it are links to it (a directory, followed)."""
    where = posixpath.normpath(b"/" + path.lstrip(b"/"))
    made_up = _made_up(where)
    if made_up is None:
        return None
    if made_up == b"realpath" and where != b"/realpath" and not follow:
        return _LINK
    if made_up == b"globwide" and where.count(b"/") == 3:
        return _FIFO
    if made_up == b"longnames" and where != b"/longnames":
        return _FILE
    return _DIR


def _name(name: bytes, attrs: asyncssh.SFTPAttrs) -> asyncssh.SFTPName:
    """A made-up entry, with a longname of our own: asyncssh would look up the
    uid and gid for every one (most of the time a million entries took). One
    byte: its 128 names of 1.9 KB a READDIR fit in a reply sshpipe takes."""
    return asyncssh.SFTPName(name, longname=b"-", attrs=attrs)


@dataclass
class _Memory:
    """A planted file's contents: ``data``, or ``zeros`` zero bytes."""

    data: bytes
    zeros: int = 0

    def read(self, offset: int, size: int) -> bytes:
        if self.zeros:
            return bytes(max(0, min(size, self.zeros - offset)))
        return self.data[offset : offset + size]


async def _maybe(result: Any) -> Any:
    """asyncssh's SFTPServer methods may return a value or an awaitable."""
    return await result if inspect.isawaitable(result) else result


def attack_server(scenario: Scenario) -> Any:
    """An ``sftp_factory`` for ``embedded_server``: the attacks of ``scenario``."""

    def build(chan: asyncssh.SSHServerChannel[bytes], root: Path) -> asyncssh.SFTPServer:
        return AttackServer(chan, root, scenario)

    return build


async def endless_output(process: asyncssh.SSHServerProcess[str]) -> None:
    """Exec or shell: print without end (until the client goes)."""
    chunk = "f" * 64 + "  /endless\n" * 1000
    with contextlib.suppress(asyncssh.Error, OSError):
        while not process.channel.is_closing():
            process.stdout.write(chunk)
            await process.stdout.drain()
    process.exit(0)


async def garbled_output(process: asyncssh.SSHServerProcess[str]) -> None:
    """Exec or shell: exit 0 having printed, where a hash goes, text with escapes in it."""
    process.stdout.write(f"not a hash {ESCAPES}  the file\n")
    process.exit(0)


class Disconnecting(asyncssh.SSHServer):
    """Says goodbye once keys are exchanged, with a reason full of terminal escapes."""

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn

    def begin_auth(self, username: str) -> bool:
        self._conn.disconnect(asyncssh.DISC_BY_APPLICATION, ESCAPES)
        return True
