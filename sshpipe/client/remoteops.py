"""Remote file operations on :class:`sshpipe.Client`: ls, stat, remove, mkdir, rename, copy.

Each lends one channel from the client's pool (as ``glob`` does), a light
lease (a channel a remote file holds open is shared, not a new one opened),
and runs ``transport.remoteops`` on it; ``copy`` without the server's copy-data takes
two, one streaming the source in, one writing the copy. The transfers are in
``_client``; this is the part of the client an fsspec filesystem maps onto
(``_ls``, ``_info``, ``_rm``, ``_mkdir``, ``_mv``, ``_cp_file``, ``checksum``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import TYPE_CHECKING, Any, Literal, overload

from ..core.checkfile import DIGEST_SIZES
from ..core.codec import FX_OP_UNSUPPORTED, AttrsReply
from ..core.errors import RemoteError, RemoteIsADirectory, RemoteNotFound, UsageError
from ..core.paths import StrPath, fspath
from ..core.remotestat import RemoteStat, remote_stat
from .base import ClientBase, imported

if TYPE_CHECKING:
    from ..transport.sftp import SFTPSession
    from .remotefile import RemoteFile


class RemoteOps(ClientBase):
    """The remote file operations of :class:`sshpipe.Client` (see there)."""

    @contextlib.asynccontextmanager
    async def _channel(self) -> AsyncIterator[SFTPSession]:
        """A channel for a few requests: shared with a remote file held open, if any."""
        pool = await self._ready()
        async with pool.lease(self._spec(self.config), light=True) as lease:
            yield lease.channels[0]

    @overload
    def open(self) -> Coroutine[Any, Any, None]: ...

    @overload
    def open(
        self, path: StrPath, mode: str = "rb", *, read_ahead: int | None = None
    ) -> RemoteFile: ...

    def open(
        self, path: StrPath | None = None, mode: str = "rb", *, read_ahead: int | None = None
    ) -> RemoteFile | Coroutine[Any, Any, None]:
        """A remote file for random access: ``async with sp.open(path) as f:``.

        Or ``f = await sp.open(path)`` and, when done, ``await f.aclose()``.
        The file holds a channel of the pool (shared with other open files and
        metadata requests) until it is closed. Without a
        path, ``await sp.open()`` connects and authenticates (as ``async
        with sp`` does; a transfer does it too).

        Args:
            path: the remote file.
            mode: "rb" read; "wb" write (created, or truncated); "xb" write a
                new file (``RemoteExists`` if there is one); "ab" write on at
                its end (created if missing).
            read_ahead: most bytes ``read`` asks for past what it was asked
                (None: 8 MiB; 0: none). It starts at a block and grows while
                reads are sequential, and drops to nothing on a seek.

        Returns:
            The :class:`RemoteFile`, opened when awaited or entered.

        Raises (when opened):
            RemoteNotFound, RemoteIsADirectory, RemotePermissionDenied,
            RemoteExists ("xb"), RemoteError; UsageError: an unknown mode.
            Connecting: ConnectError, AuthenticationError, HostKeyError;
            ClosedError: the client was closed.
        """
        if path is None:
            return self._connect()
        from .remotefile import RemoteFile

        return RemoteFile(self._ready, fspath(path), mode, self.config, read_ahead)

    @overload
    async def ls(self, path: StrPath, *, detail: Literal[False] = False) -> list[str]: ...

    @overload
    async def ls(self, path: StrPath, *, detail: Literal[True]) -> list[RemoteStat]: ...

    @overload
    async def ls(self, path: StrPath, *, detail: bool) -> list[str] | list[RemoteStat]: ...

    async def ls(self, path: StrPath, *, detail: bool = False) -> list[str] | list[RemoteStat]:
        """The entries of a remote directory, sorted by name (never ``.`` or ``..``).

        The READDIRs are pipelined. Names come from the server and are checked
        as a tree's are: one that is not a single plain component (a ``/``
        in it, ``..``) or comes twice fails the listing.

        Args:
            path: a remote directory.
            detail: give a :class:`RemoteStat` per entry (its ``path`` is
                ``path/name``; a symlink is ``"symlink"``: a listing does not
                follow links) instead of names.

        Returns:
            Names, or RemoteStats, sorted by name.

        Raises:
            RemoteNotFound: no such directory. RemoteError: not a directory
            ("not a directory"), or unreadable. UnsafePath: a name as above.
        """
        where = fspath(path)
        from ..transport import remoteops

        async with self._channel() as sftp:
            entries = await remoteops.listing(sftp, where)
        entries.sort(key=lambda entry: entry[0])
        if not detail:
            return [name for name, _ in entries]
        return [remote_stat(remoteops.join(where, name), attrs, name) for name, attrs in entries]

    async def clean_temps(self, *, dry_run: bool = False) -> list[str]:
        """Remove the temporary files runs that are gone left on this server.

        Every upload enters its temporary file in the ledger
        (``$XDG_STATE_HOME/sshpipe/ledger/``) before the server creates it;
        a run that ended without removing it (killed, crashed, the server
        gone at the time) leaves it there for this ``user@host:port``. The
        next upload removes them too; this does it now (``sshpipe clean``).
        Only sshpipe's own temporary names are removed, regular files; a run
        still going is left alone.

        Args:
            dry_run: only find them, and change nothing.

        Returns:
            The paths removed (or, with ``dry_run``, those there), sorted.

        Raises:
            ConnectError and the like (connecting), ConnectionBroken (what is
            left stays recorded).
        """
        from .engine import ledger

        async with self._channel() as sftp:
            swept = await ledger.sweep_remote(sftp, dry_run=dry_run)
        return sorted(swept.removed)

    async def stat(self, path: StrPath) -> RemoteStat:
        """What is at a remote path, symlinks followed.

        Raises:
            RemoteNotFound: nothing there (a dangling link too). RemoteError.
        """
        return await self._stat(fspath(path), follow=True)

    async def lstat(self, path: StrPath) -> RemoteStat:
        """What is at a remote path; a symlink is described itself, not followed.

        Raises:
            RemoteNotFound: nothing there. RemoteError.
        """
        return await self._stat(fspath(path), follow=False)

    async def _stat(self, path: str, *, follow: bool) -> RemoteStat:
        from ..transport import remoteops

        async with self._channel() as sftp:
            return remote_stat(path, await remoteops.stat(sftp, path, follow=follow))

    async def exists(self, path: StrPath) -> bool:
        """Whether a remote path exists, symlinks followed (as ``os.path.exists``).

        A dangling symlink does not exist; ``lstat`` finds the link itself.

        Raises:
            RemoteError: other than not found (permission denied on a parent...).
        """
        try:
            await self.stat(path)
        except RemoteNotFound:
            return False
        return True

    async def remove(self, path: StrPath) -> None:
        """Remove a remote file or symlink (a link itself, never what it points to).

        Raises:
            RemoteNotFound: nothing there. RemoteIsADirectory: a directory
            (see :meth:`rmdir`, :meth:`rmtree`). RemoteError.
        """
        where = fspath(path)
        from ..transport import remoteops

        async with self._channel() as sftp:
            await remoteops.remove(sftp, where)

    async def rmdir(self, path: StrPath) -> None:
        """Remove an empty remote directory.

        Raises:
            RemoteNotFound: nothing there. RemoteError: not empty, or not a
            directory (SFTP v3 has no code for either: the server's own words).
        """
        where = fspath(path)
        from ..transport import remoteops

        async with self._channel() as sftp:
            await remoteops.rmdir(sftp, where)

    async def rmtree(self, path: StrPath) -> None:
        """Remove a remote directory and everything under it.

        Depth first, with up to 128 REMOVEs and RMDIRs in flight at once,
        several directories walked side by side and one listing batch held
        per level, so a huge tree costs a round trip per 128 entries and
        bounded memory. Symlinks are removed, never
        followed: what a link points to outside the tree is left alone.

        Raises:
            RemoteNotFound: nothing there. RemoteError: ``path`` is a symlink
            or not a directory; an entry could not be removed (the first error;
            the rest is left). UnsafePath: a listing named an unsafe entry.
        """
        where = fspath(path)
        await imported("sshpipe.tree.rmtree")
        from ..tree.rmtree import rmtree

        async with self._channel() as sftp:
            await rmtree(sftp, where)

    async def mkdir(
        self, path: StrPath, *, parents: bool = False, exist_ok: bool = False, mode: int = 0o777
    ) -> None:
        """Make a remote directory.

        Args:
            path: the directory to make.
            parents: make the missing directories above it too (``mkdir -p``).
            exist_ok: a directory already there is fine (anything else is not).
            mode: its permissions (the server applies its umask, as mkdir(2)).

        Raises:
            RemoteExists: something is there (a directory too, unless ``exist_ok``).
            RemoteNotFound: its parent is missing and ``parents`` is False.
            RemoteError.
        """
        where = fspath(path)
        from ..transport import remoteops

        async with self._channel() as sftp:
            await remoteops.mkdir(sftp, where, parents=parents, exist_ok=exist_ok, mode=mode)

    async def rename(self, src: StrPath, dst: StrPath, *, overwrite: bool = False) -> None:
        """Rename (move) a remote path on the same server.

        Without ``overwrite`` an existing ``dst`` is never replaced. With it,
        posix-rename@openssh.com replaces ``dst`` atomically where the server
        offers it; elsewhere the old ``dst`` (a file or link) is renamed aside
        to a temporary name, ``src`` renamed in and the old one removed (moved
        back if that rename fails): ``dst`` is missing for a moment, never lost.

        Raises:
            RemoteExists: ``dst`` exists and ``overwrite`` is False.
            RemoteNotFound: ``src`` is missing. RemoteIsADirectory: ``dst`` is
            a directory to replace and the server has no posix-rename. RemoteError.
            ProtocolError: the server said it renamed, and ``src`` is still
                there or ``dst`` still the file it replaced.
        """
        old, new = fspath(src), fspath(dst)
        from ..transport import remoteops

        async with self._channel() as sftp:
            await remoteops.rename(sftp, old, new, overwrite=overwrite)

    async def copy(self, src: StrPath, dst: StrPath) -> None:
        """Copy a remote file to another remote path, replacing what is there.

        With the server's ``copy-data`` extension (OpenSSH 9.0 and later,
        asyncssh) no byte crosses the network; otherwise the file streams
        through the client, pipelined both ways, with bounded memory. Either
        way the copy is written under a temporary name and renamed into place
        when complete. A new file takes the source's permissions; one replaced
        keeps its own, as with ``cp``.

        Raises:
            RemoteNotFound: no ``src``. RemoteIsADirectory: ``src`` or ``dst``
            is a directory. RemoteError, ConnectionBroken, ProtocolError.
        """
        source, target = fspath(src), fspath(dst)
        from ..transport import remoteops
        from ..transport.replies import quiet

        async with self._channel() as sftp:
            there = sftp.stat_request(target)  # sent with the source's STAT: no round trip more
            there.add_done_callback(quiet)
            attrs = await sftp.stat(source)
            if attrs.is_dir():
                raise RemoteIsADirectory(source, "is a directory: copy copies one file")
            found = await there
            if isinstance(found, AttrsReply) and found.attrs.is_dir():
                raise RemoteIsADirectory(target, "is a directory: copy to a file's path")
            mode = (attrs.permissions or 0o644) & 0o777
            if "copy-data" in sftp.extensions:
                try:
                    await remoteops.copy_data(sftp, source, target, attrs.size or 0, mode)
                    return
                except RemoteError as exc:
                    if exc.status != FX_OP_UNSUPPORTED:
                        raise
                    # Listed, not done: the copy goes through the client instead.
        await self._copy_through(source, target, mode)

    async def _copy_through(self, source: str, target: str, mode: int) -> None:
        from .engine import in_order, stream, upload_stream

        pool = await self._ready()
        cfg = in_order(self.config, pool.server_caps)  # a stream cannot be sent twice
        async with (
            pool.lease(self._spec(self.config)) as reading,
            contextlib.aclosing(stream(reading, source, self.config)) as pieces,
            pool.lease(self._spec(cfg)) as writing,
        ):
            await upload_stream(writing, pieces, target, cfg, mode)

    async def checksum(self, path: StrPath, algorithm: str = "sha256") -> str:
        """The server's hash of a remote file, in hex, made on the server.

        SHA-256 comes from the server's ``sha256sum`` where it runs commands,
        else (and every other algorithm) from its ``check-file`` extension
        (ProFTPD, paramiko). The file's bytes never cross the network.

        Args:
            path: a remote file.
            algorithm: "sha256", "sha512", "sha384", "sha224", "sha1" or "md5".

        Returns:
            The hex digest.

        Raises:
            HashUnavailable: the server can make this hash in neither way
            (read the file and hash it here instead). RemoteNotFound: no such
            file. RemoteIsADirectory. UsageError: an algorithm not listed above.
        """
        where = fspath(path)

        if algorithm not in DIGEST_SIZES:
            raise UsageError(f"checksum: unknown algorithm {algorithm!r}")
        from ..transport import remoteops

        async with self._channel() as sftp:
            return await remoteops.checksum(sftp, where, algorithm)
