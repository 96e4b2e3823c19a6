"""In-process asyncssh SFTP servers for the tree tests: hostile listings, refused opens.

All of them are chrooted at the served root, like the embedded server, and are
built by factories that ``embedded_server`` takes as its ``sftp_factory``.

- ``HostileListing``: the listing of ``/hostile`` carries, beside real files,
  names a client must never turn into local paths ('../escape', 'a/b', '.' and
  '..' as regular files, a name with a NUL byte, '/tmp/x', a duplicate). Opening
  or stat-ing any of them "works" and serves ``MARKER`` bytes, so a test can
  search the disk for them had the client written them anywhere.
- ``DeniesOpen``: refuses to open one named file with "Permission denied", which
  also stops root (chmod 000 does not).
- ``FaithfulLinks``: asyncssh 2.24's chrooted ``readlink`` passes a relative
  target through ``os.path.realpath``, which resolves it against the *server
  process's* working directory, so it cannot serve a relative link's text. This
  subclass returns the link's text as stored (what OpenSSH's sftp-server does).
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import asyncssh

from .embedded import SFTPFactory
from .faults import factory

__all__ = [
    "HOSTILE_DIR",
    "HOSTILE_ENTRIES",
    "MARKER",
    "NORMAL_FILES",
    "DeniesListing",
    "DeniesOpen",
    "FaithfulLinks",
    "HostileListing",
    "Recorder",
    "denies_listing",
    "denies_open",
    "faithful_links",
    "hostile_listing",
    "populate_hostile",
]

HOSTILE_DIR = "hostile"
MARKER = b"SSHPIPE-HOSTILE-MARKER:"
# Real files of /hostile, which must still be copied.
NORMAL_FILES = {"ok1.txt": b"first ordinary file\n", "ok 2.txt": b"second ordinary file\n"}
DUPLICATE = "dup.txt"
# The entries the listing adds after the usual '.' and '..' directories and the
# real files. Each must be refused with UnsafePath. NUL: asyncssh encodes names
# as length-prefixed strings, so it sends the byte as is.
HOSTILE_ENTRIES: tuple[bytes, ...] = (
    b"../escape",
    b"a/b",
    b".",  # as a regular file, after the real '.' directory
    b"..",  # likewise
    b"bad\x00name",
    b"/tmp/x",
    DUPLICATE.encode(),  # the second time it is listed
)


class Recorder:
    """What the client asked the server about, for diagnostics."""

    def __init__(self) -> None:
        self.opened: list[bytes] = []
        self.faked: list[bytes] = []


def populate_hostile(root: Path) -> Path:
    """Create ``root/hostile`` with the real files the hostile listing mixes in."""
    directory = root / HOSTILE_DIR
    directory.mkdir(parents=True)
    for name, data in NORMAL_FILES.items():
        (directory / name).write_bytes(data)
    (directory / DUPLICATE).write_bytes(b"the real dup.txt\n")
    return directory


def _chroot(root: Path) -> bytes:
    return os.fsencode(root)


class _Chrooted(asyncssh.SFTPServer):
    def __init__(self, chan: Any, root: Path, recorder: Recorder) -> None:
        super().__init__(chan, chroot=_chroot(root))
        self.recorder = recorder


def _fake_attrs(name: bytes) -> asyncssh.SFTPAttrs:
    return asyncssh.SFTPAttrs(
        permissions=stat.S_IFREG | 0o644,
        size=len(MARKER + name),
        uid=os.getuid(),
        gid=os.getgid(),
        atime=1_000_000_000,
        mtime=1_000_000_000,
    )


class HostileListing(_Chrooted):
    """Lists hostile names in /hostile and serves MARKER for anything that does not exist."""

    def _is_fake(self, path: bytes) -> bool:
        if b"\x00" in path:
            return True
        return not os.path.lexists(self.map_path(path))

    async def scandir(self, path: bytes) -> AsyncIterator[asyncssh.SFTPName]:
        if posixpath.normpath(posixpath.join(b"/", path)) != b"/" + HOSTILE_DIR.encode():
            async for listed in super().scandir(path):
                yield listed
            return
        local = self.map_path(path)
        for dot in (b".", b".."):
            st = os.lstat(posixpath.join(local, dot))
            yield asyncssh.SFTPName(dot, attrs=asyncssh.SFTPAttrs.from_local(st))
        with os.scandir(local) as entries:
            real = sorted(entries, key=lambda e: e.name)
        for entry in real:
            st = entry.stat(follow_symlinks=False)
            yield asyncssh.SFTPName(
                os.fsencode(entry.name), attrs=asyncssh.SFTPAttrs.from_local(st)
            )
        for name in HOSTILE_ENTRIES:
            attrs = _fake_attrs(name)
            if name == DUPLICATE.encode():
                attrs = asyncssh.SFTPAttrs.from_local(os.lstat(posixpath.join(local, name)))
            yield asyncssh.SFTPName(name, attrs=attrs)

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        self.recorder.opened.append(path)
        if self._is_fake(path):
            self.recorder.faked.append(path)
            return io.BytesIO(MARKER + path)
        return super().open(path, pflags, attrs)

    def fstat(self, file_obj: object) -> Any:
        if isinstance(file_obj, io.BytesIO):
            return _fake_attrs(file_obj.getvalue()[len(MARKER) :])
        return super().fstat(file_obj)

    def lstat(self, path: bytes) -> Any:
        if self._is_fake(path):
            self.recorder.faked.append(path)
            return _fake_attrs(path)
        return super().lstat(path)

    def stat(self, path: bytes) -> Any:
        if self._is_fake(path):
            self.recorder.faked.append(path)
            return _fake_attrs(path)
        return super().stat(path)


class DeniesOpen(_Chrooted):
    """Refuses to open any file whose name contains ``denied`` (temp names included)."""

    denied = b"locked.bin"

    def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
        self.recorder.opened.append(path)
        if self.denied in posixpath.basename(path):
            raise asyncssh.SFTPPermissionDenied("Permission denied")
        return super().open(path, pflags, attrs)


class DeniesListing(_Chrooted):
    """Refuses to list any directory whose name is ``denied`` (as sshd does one it may not read)."""

    denied = b"locked"

    async def scandir(self, path: bytes) -> AsyncIterator[asyncssh.SFTPName]:
        if posixpath.basename(posixpath.normpath(path)) == self.denied:
            raise asyncssh.SFTPPermissionDenied("Permission denied")
        async for listed in super().scandir(path):
            yield listed


class FaithfulLinks(_Chrooted):
    """Serves a symlink's target text as stored (relative stays relative)."""

    def readlink(self, path: bytes) -> bytes | Awaitable[bytes]:
        target = os.readlink(self.map_path(path))
        if posixpath.isabs(target):
            return super().readlink(path)
        return target


def hostile_listing(recorder: Recorder) -> SFTPFactory:
    return factory(HostileListing, recorder)


def denies_open(recorder: Recorder, name: str = "locked.bin") -> SFTPFactory:
    return factory(DeniesOpen, recorder, denied=name.encode())


def denies_listing(recorder: Recorder, name: str = "locked") -> SFTPFactory:
    return factory(DeniesListing, recorder, denied=name.encode())


def faithful_links(recorder: Recorder | None = None) -> SFTPFactory:
    return factory(FaithfulLinks, recorder or Recorder())
