"""The destination of a download, reached by directory descriptors: never through a symlink.

The names under a download's destination come from the server, and a server
may be hostile. It can list ``a`` as a symlink to ``/etc`` and then ``a/x`` as
a directory, or list a link beside a file on one run and a file on the next.
So nothing under the destination is ever looked up by path. The directory the
user named (``DirRoot``) is opened once, following links, since it is theirs.
Below it each directory is opened one component at a time with
``O_NOFOLLOW | O_DIRECTORY``, and every create, open, rename, link, chmod and
utime is relative to such a descriptor (``dir_fd=``). A symlink anywhere below
the root is never followed, whoever planted it and whenever: refused where a
directory is expected, replaced where a file is written.

Descriptors are cached per directory (``DirRoot.directory``). A tree may have
more directories than a process may hold descriptors, so idle ones are closed
past ``IDLE_DESCRIPTORS``. One in use, in any thread, is never closed: closing
a descriptor under a running write could let its number be reused for
another file.

A root may carry the book of temporary files (``core.tempbook``): each one
``create`` makes under it is entered there first, by its absolute path with
no link in it, and leaves when it is renamed (``replace``) or removed, so a
run killed meanwhile leaves a record the next one sweeps (``remove_ours``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from ..core.errors import LocalError, LocalNoSpace
from ..core.tempbook import TempBook
from ..core.tempnames import is_temp_name
from ..core.tempnames import temp_name as _temp_name

IDLE_DESCRIPTORS = 64  # directory descriptors kept open while unused
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def local_error(
    path: str | os.PathLike[str], exc: OSError, offset: int | None = None
) -> LocalError:
    """The LocalError for an OS error on ``path`` (LocalNoSpace for a full disk)."""
    reason = exc.strerror or str(exc)
    cls = LocalNoSpace if exc.errno in (errno.ENOSPC, errno.EDQUOT) else LocalError
    return cls(os.fspath(path), reason, offset=offset, errno=exc.errno)


class DirRoot:
    """The directory the user named, held open, and descriptors of the ones under it.

    Args:
        path: a directory of the user's (a symlink to one is followed).
        temps: where the temporary files made under it are entered (``create``).

    Raises:
        LocalError: it is missing, not a directory, or not readable.
    """

    def __init__(self, path: str, *, temps: TempBook | None = None) -> None:
        self.path = path
        self.temps = temps
        self._real: str | None = None  # its absolute path, no link in it (``real``)
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise local_error(path, exc) from exc
        self._lock = threading.Lock()
        self._open: dict[tuple[str, ...], list[int]] = {}  # parts -> [descriptor, users]
        self._idle: OrderedDict[tuple[str, ...], None] = OrderedDict()  # least recent first

    def __repr__(self) -> str:
        return f"<DirRoot {self.path} open={len(self._open)} idle={len(self._idle)}>"

    @property
    def top(self) -> LocalDir:
        return LocalDir(self, ())

    @contextlib.contextmanager
    def directory(self, parts: tuple[str, ...]) -> Iterator[int]:
        """A descriptor of the directory ``parts`` below the root, for the block's duration.

        Raises:
            LocalError: a component is missing, a symlink, or not a directory.
        """
        fd = self._acquire(parts)
        try:
            yield fd
        finally:
            self._release(parts)

    def _acquire(self, parts: tuple[str, ...]) -> int:
        if self._fd is None:
            raise LocalError(self.path, "closed")
        if not parts:
            return self._fd
        with self._lock:
            entry = self._open.get(parts)
            if entry is not None:
                entry[1] += 1
                self._idle.pop(parts, None)
                return entry[0]
        fd = self._walk(parts)  # outside the lock: other threads keep going meanwhile
        with self._lock:
            entry = self._open.get(parts)
            if entry is not None:  # another thread opened it meanwhile
                os.close(fd)
                entry[1] += 1
                self._idle.pop(parts, None)
                return entry[0]
            self._open[parts] = [fd, 1]
            return fd

    def _release(self, parts: tuple[str, ...]) -> None:
        if not parts:
            return
        with self._lock:
            entry = self._open[parts]
            entry[1] -= 1
            if entry[1]:
                return
            self._idle[parts] = None
            while len(self._idle) > IDLE_DESCRIPTORS:
                oldest, _ = self._idle.popitem(last=False)
                os.close(self._open.pop(oldest)[0])

    def _walk(self, parts: tuple[str, ...]) -> int:
        """Open ``parts`` from the root, one component at a time, following no link."""
        assert self._fd is not None
        fd = self._fd
        for depth, name in enumerate(parts):
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _not_a_directory(self.join(parts[: depth + 1]), exc) from exc
            finally:
                if fd != self._fd:
                    os.close(fd)
            fd = child
        return fd

    def join(self, parts: tuple[str, ...]) -> str:
        """The path of ``parts``, for messages (never used to reach the file)."""
        return os.path.join(self.path, *parts)

    @property
    def real(self) -> str:
        """The directory held open, as an absolute path with no link in it (the ledger's).

        Asked of the descriptor itself where /proc shows it: the path the user
        named may point elsewhere by now.
        """
        if self._real is None:
            try:
                self._real = os.readlink(f"/proc/self/fd/{self._fd}")
            except OSError:
                self._real = os.path.realpath(self.path)
        return self._real

    def close(self) -> None:
        """Close every descriptor; twice is fine."""
        with self._lock:
            for fd, _ in self._open.values():
                os.close(fd)
            self._open.clear()
            self._idle.clear()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _not_a_directory(path: str, exc: OSError) -> LocalError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        # O_NOFOLLOW on a symlink: ELOOP; O_DIRECTORY on a file: ENOTDIR.
        return LocalError(path, "exists and is not a directory (a symlink is never followed here)")
    return local_error(path, exc)


@dataclass(frozen=True, slots=True)
class LocalDir:
    """A directory at ``parts`` below a root: what every local operation is relative to."""

    root: DirRoot
    parts: tuple[str, ...]

    def __str__(self) -> str:
        return self.root.join(self.parts)

    def child(self, name: str) -> LocalDir:
        return LocalDir(self.root, (*self.parts, name))

    def file(self, name: str) -> LocalFile:
        return LocalFile(self, name)

    def descriptor(self) -> contextlib.AbstractContextManager[int]:
        return self.root.directory(self.parts)


@dataclass(frozen=True, slots=True)
class LocalFile:
    """A name in a LocalDir: a file to write, or its temporary and resume files."""

    dir: LocalDir
    name: str

    def __str__(self) -> str:
        return os.path.join(str(self.dir), self.name)

    def __fspath__(self) -> str:
        return str(self)

    def sibling(self, name: str) -> LocalFile:
        return LocalFile(self.dir, name)

    @property
    def real(self) -> str:
        """Its absolute path, no link in it: how the ledger names it (``remove_ours``)."""
        return "/".join((self.dir.root.real.rstrip("/"), *self.dir.parts, self.name))


def temp_name(name: str) -> str:
    """``.NAME.sshpipe-XXXXXX.partial`` (within NAME_MAX): hidden, ours, never a final name."""
    return _temp_name(name, secrets.token_hex(3))


# -- operations, each relative to a directory descriptor ------------------------------------


def make_dir(parent: LocalDir, name: str, mode: int = 0o700) -> bool:
    """Create ``parent/name`` (private until its mode is set); True if it existed.

    Raises:
        LocalError: something that is not a directory is there (a symlink to
            one included: entering it could write outside the destination).
    """
    path = os.path.join(str(parent), name)
    with parent.descriptor() as fd:
        try:
            os.mkdir(name, mode, dir_fd=fd)
            return False
        except FileExistsError:
            pass
        except OSError as exc:
            raise local_error(path, exc) from exc
        info = _lstat(fd, name, path)
    if stat.S_ISDIR(info.st_mode):
        return True
    kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a directory"
    raise LocalError(path, f"exists and is {kind}; a directory was expected")


def _lstat(fd: int, name: str, path: str) -> os.stat_result:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except OSError as exc:
        raise local_error(path, exc) from exc


def lstat(file: LocalFile) -> os.stat_result | None:
    """What is at ``file`` (a link itself, not what it points to); None if nothing."""
    with file.dir.descriptor() as fd:
        try:
            return os.stat(file.name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise local_error(file, exc) from exc


def create(file: LocalFile, mode: int) -> int:
    """A new temporary file at ``file``, opened for writing; it must not exist yet (``O_EXCL``).

    Entered in its root's book of temporary files before it is made: a run
    killed from here on leaves it recorded.
    """
    with _creating(file), file.dir.descriptor() as fd:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(file.name, flags, mode & 0o7777, dir_fd=fd)


@contextlib.contextmanager
def _creating(file: LocalFile) -> Iterator[None]:
    """The book's entry for a temporary file made inside the block (made if it returns)."""
    temps = file.dir.root.temps
    if temps is None:
        yield
        return
    key = file.real
    temps.add(key)  # recorded before the create: a run killed in it leaves it listed
    try:
        yield
    except BaseException:
        temps.settle(key)  # EXCL: nothing of ours is there
        raise
    temps.adopt(key)


def _gone(file: LocalFile) -> None:
    """``file`` is no longer there: its entry in the book, if any, is closed."""
    temps = file.dir.root.temps
    if temps is not None:
        temps.gone(file.real)


def open_regular(
    file: LocalFile, *, write: bool, mode: int = 0o600, append: bool = False
) -> int | None:
    """Open the regular file at ``file`` for reading or writing, never through a link.

    With ``write`` it is created if missing, and anything else found there
    (a symlink, a fifo) is removed first and replaced by a new file: it is a
    name sshpipe writes, so what is there is not followed but replaced, as
    the rename of a finished copy would. Without ``write``, a missing or
    non-regular file gives None. ``O_NONBLOCK`` keeps a planted fifo from
    blocking the open.

    Raises:
        OSError: as the open, the unlink or the fstat raise it (the caller
            names the path); a directory there is never removed.
    """
    access = (os.O_WRONLY | (os.O_APPEND if append else 0)) if write else os.O_RDONLY
    flags = access | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    with file.dir.descriptor() as dir_fd:
        for _ in range(2):
            try:
                fd = os.open(file.name, flags | (os.O_CREAT if write else 0), mode, dir_fd=dir_fd)
            except FileNotFoundError:
                if not write:
                    return None
                raise
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENXIO):
                    raise
                fd = -1  # a symlink (ELOOP) or a fifo with no reader (ENXIO)
            if fd >= 0:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.set_blocking(fd, True)
                    return fd
                os.close(fd)
            if not write:
                return None
            os.unlink(file.name, dir_fd=dir_fd)  # a directory raises: it is not replaced
        raise FileExistsError(errno.EEXIST, "could not replace what was there", str(file))


def replace(source: LocalFile, target: LocalFile) -> None:
    """Rename ``source`` over ``target`` (both names in the same directory)."""
    assert source.dir == target.dir
    with source.dir.descriptor() as fd:
        os.replace(source.name, target.name, src_dir_fd=fd, dst_dir_fd=fd)
    _gone(source)


def remove(file: LocalFile) -> None:
    """Remove ``file`` if it is there (a link itself, never what it points to)."""
    with file.dir.descriptor() as fd, contextlib.suppress(FileNotFoundError):
        os.unlink(file.name, dir_fd=fd)
    _gone(file)


def make_link(file: LocalFile, target: str) -> None:
    """Make ``file`` a symlink to ``target``, replacing a file or link there atomically."""
    temp = file.sibling(temp_name(file.name))
    try:
        with _creating(temp), file.dir.descriptor() as fd:
            os.symlink(target, temp.name, dir_fd=fd)
        replace(temp, file)
    except OSError as exc:
        with contextlib.suppress(OSError):
            remove(temp)
        raise local_error(file, exc) from exc


def set_fd_attrs(fd: int, mode: int | None, times: tuple[int, int] | None) -> None:
    if mode is not None:
        os.fchmod(fd, mode)
    if times is not None:
        os.utime(fd, times)


def set_dir_attrs(directory: LocalDir, mode: int | None, times: tuple[int, int] | None) -> None:
    """Set a directory's mode and times through its own descriptor."""
    try:
        with directory.descriptor() as fd:
            set_fd_attrs(fd, mode, times)
    except OSError as exc:
        raise local_error(str(directory), exc) from exc


def sync_dir(directory: LocalDir) -> None:
    """Make the names in a directory durable (a rename is only there once it is)."""
    with directory.descriptor() as fd:
        os.fsync(fd)


def remove_ours(path: str, *, dry_run: bool = False) -> bool:
    """Remove one of our temporary files a dead run recorded; whether it was there.

    ``path`` is absolute, with no link in it when it was recorded. It is
    reached from ``/`` one directory at a time with ``O_NOFOLLOW``, as a
    download's destination is (a link planted on the way since is never
    followed), and only a file or link of our temporary shape is removed:
    anything else there is left alone (it is not ours). ``dry_run``: only
    say whether it is there.

    Raises:
        OSError: it could not be reached or removed (permission denied...):
            it may be there still.
    """
    head, name = os.path.split(path)
    if not os.path.isabs(path) or "\x00" in path or not is_temp_name(name):
        return False  # not a name we make: never touched
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in [p for p in head.split("/") if p]:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                return False
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    return False  # a link or a file on the way now: not ours to follow
                raise
            os.close(fd)
            fd = child
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
            return False
        if not dry_run:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                return False
        return True
    finally:
        os.close(fd)
