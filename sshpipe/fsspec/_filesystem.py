"""``SSHPipeFileSystem``: an fsspec ``AsyncFileSystem`` over :class:`sshpipe.Client`.

Each method maps onto the client (``ls``, ``stat``, ``remove``, ``mkdir``,
``rename``, ``copy``, ``get``/``put``, ``stream``, ``put_stream``); bulk
get/put/copy run fsspec's own path expansion (so its semantics, checked by
its abstract suites, are fsspec's) and then hand the whole plan to the
client at once (``_bulk``): many files through the tree pipeline, one big
file through the striped engine. Errors come out as the OSErrors fsspec
users catch (``_oserrors``).
"""

from __future__ import annotations

import asyncio
import contextvars
import glob
import posixpath
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from fsspec.asyn import AsyncFileSystem, sync_wrapper
from fsspec.utils import tokenize

from ..core.config import TransferConfig
from ..core.errors import HashUnavailable, RemoteError, RemoteIsADirectory, RemoteNotFound
from . import _bulk
from ._clients import LoopClients, close_all
from ._isfile import RecentFiles, open_to_answer
from ._options import PROTOCOL, connect_options, strip_protocol, url_options
from ._oserrors import as_oserror, oserrors, translated
from ._parquet import DEFAULT_PARQUET_PREFETCH, Layouts

if TYPE_CHECKING:
    from ..client.client import Client
    from ..client.remotefile import RemoteFile
    from ..core.remotestat import RemoteStat
    from ._file import SSHPipeFile

Info = dict[str, Any]

# Directories listed at once by find/walk: each lends a channel of the
# client's pool, so this many listings are in flight where one would crawl a
# round trip per directory (sshd's MaxSessions of 10 leaves room for a transfer).
LISTINGS_IN_FLIGHT = 8

_TYPES = {"file": "file", "directory": "directory", "symlink": "link", "other": "other"}


def info_of(st: RemoteStat, name: str | None = None) -> Info:
    """fsspec's info dict of a RemoteStat (no atime: reading must not change ``ukey``)."""
    return {
        "name": name if name is not None else st.path,
        "size": st.size if st.size is not None else 0,
        "type": _TYPES[st.type],
        "mode": st.mode,
        "mtime": st.mtime,
        "uid": st.uid,
        "gid": st.gid,
        "islink": st.is_symlink(),
    }


class SSHPipeFileSystem(AsyncFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """fsspec filesystem ``sshpipe://``: SFTP through sshpipe's pipelined engine.

    ``fsspec.filesystem("sshpipe", host=HOST, port=PORT, username=USER,
    identity_files=[KEY])``: the options are :func:`sshpipe.connect`'s keyword
    arguments plus ``host``, and ``connect_early`` (default True): made by a
    synchronous caller, it logs in and opens a channel in the background at
    once (as sshfs connects in its constructor, but without waiting), so the
    first call finds them ready; False connects on the first call. The
    filesystem pickles (an unpickled copy, a Dask worker's, connects on first use),
    keeps one connection set per event loop and closes them with ``close()``
    (or when it is garbage collected): a Dask worker's threads share fsspec's
    one instance, so one client, one log-in. ``max_connections_per_host``:
    ``TransferConfig``'s, the connections the whole process holds to the
    server before its clients stop growing.
    """

    protocol: ClassVar[tuple[str, ...]] = (PROTOCOL,)
    root_marker = "/"
    # The write buffer (and an explicit fsspec cache's block): 4 MiB is one
    # pipelined burst of 64 KiB WRITEs, a round trip's worth at 50 ms and ~700 Mbit/s.
    blocksize = 4 * 1024 * 1024
    # Bytes of a parquet file's column chunks an open file reads ahead (0: none):
    # see fsspec/_parquet.py; set on an instance to change it for its files.
    parquet_prefetch = DEFAULT_PARQUET_PREFETCH

    def __init__(self, host: str, **options: Any) -> None:
        super().__init__(host, **options)
        connect_early = bool(options.pop("connect_early", True))
        self.host = host
        self._connect_kwargs = connect_options(options)
        per_host = options.get("max_connections_per_host")
        if per_host is not None:  # a storage option (Dask, pandas): TransferConfig's field
            config = self._connect_kwargs.get("config") or TransferConfig()
            self._connect_kwargs["config"] = replace(config, max_connections_per_host=per_host)
        self._clients = LoopClients(self._new_client)
        self.parquet_layouts = Layouts()  # footers parsed, for the next open of the file
        self._recent_files = RecentFiles()  # an isfile of one of them opens it (``_isfile``)
        self._new_client()  # a bad option fails here, not on first use
        weakref.finalize(self, close_all, self._clients)
        if connect_early and not self.asynchronous and not _UNPICKLING.get():
            # The log-in's round trips pass while the caller goes on (pyarrow
            # imports its dataset module, ~0.3 s) instead of at its first call.
            self._clients.warm(self.loop)

    def __reduce__(self) -> tuple[Any, ...]:
        return _unpickled, (type(self), self.storage_args, self.storage_options)

    def _new_client(self) -> Client:
        from ..client.connect import connect

        return connect(self.host, **self._connect_kwargs)

    @property
    def client(self) -> Client:
        """The running event loop's :class:`sshpipe.Client` (call from a coroutine)."""
        return self._clients.current()

    async def _close(self) -> None:
        await self._clients.aclose_current()

    def close(self) -> None:
        """Close the connections of every event loop this filesystem was used on."""
        close_all(self._clients)

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        return strip_protocol(str(path))

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        return url_options(path)

    # -- metadata --------------------------------------------------------------

    @translated
    async def _info(self, path: str, **kwargs: Any) -> Info:
        where = self._strip_protocol(path)
        info = _bulk.known(where)  # a bulk call's expansion asking again
        if info is None:
            info = info_of(await self.client.stat(where), where)
            _bulk.seen(info)
            self._recent_files.saw(info)
        return info

    async def _isfile(self, path: str) -> bool:
        """A STAT; for a path last seen as a regular file, an OPEN with it, the file
        kept for the open that usually follows (``_isfile.py``)."""
        where = self._strip_protocol(path)
        if where in self._recent_files:
            answer = await open_to_answer(self.client, where)
            if isinstance(answer, bool):
                return answer
            if answer is not None:
                self._clients.track(answer)
                self._clients.park(where, answer)
                return True
        return bool(await super()._isfile(where))

    @translated
    async def _exists(self, path: str, **kwargs: Any) -> bool:
        where = self._strip_protocol(path)
        return _bulk.known(where) is not None or await self.client.exists(where)

    async def _isdir(self, path: str) -> bool:
        where = self._strip_protocol(path)
        return not _bulk.assumed_file(where) and bool(await super()._isdir(where))

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        where = self._strip_protocol(path)
        infos = await self._listing(where)
        return infos if detail else [info["name"] for info in infos]

    async def _listing(self, where: str) -> list[Info]:
        client = self.client
        try:
            stats = await client.ls(where, detail=True)
        except RemoteNotFound as exc:
            raise as_oserror(exc) from exc
        except RemoteError as exc:
            # SFTP v3 has no "not a directory": a file lists as itself (fsspec's rule).
            try:
                info = await self._info(where)
            except FileNotFoundError:
                raise as_oserror(exc) from exc
            if info["type"] == "directory":
                raise as_oserror(exc) from exc
            return [info]
        infos = [info_of(st) for st in stats]
        links = [i for i, st in enumerate(stats) if st.is_symlink()]
        if links:
            # A listing describes a link itself; fsspec wants what it points to.
            found = await asyncio.gather(
                *(client.stat(stats[i].path) for i in links), return_exceptions=True
            )
            for i, target in zip(links, found, strict=True):
                if not isinstance(target, BaseException):
                    infos[i] = {**info_of(target), "islink": True}
        for info in infos:
            _bulk.seen(info)
            self._recent_files.saw(info)
        return infos

    async def _walk(
        self,
        path: str,
        maxdepth: int | None = None,
        topdown: bool = True,
        on_error: str | Callable[[OSError], None] = "omit",
        **kwargs: Any,
    ) -> AsyncIterator[tuple[str, Any, Any]]:
        """Breadth first, LISTINGS_IN_FLIGHT directories listed at once (fsspec's is
        one listing at a time); a caller pruning ``dirs`` (top down) prunes the walk."""
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        detail = kwargs.pop("detail", False)
        level, depth, later = [self._strip_protocol(path)], 1, []
        gate = asyncio.Semaphore(LISTINGS_IN_FLIGHT)

        async def listed(where: str) -> list[Info] | OSError:
            async with gate:
                try:
                    return await self._listing(where)
                except OSError as exc:
                    return exc

        while level:
            results = await asyncio.gather(*(listed(where) for where in level))
            deeper: list[str] = []
            for where, result in zip(level, results, strict=True):
                if isinstance(result, OSError):
                    if on_error == "raise":
                        raise result
                    if callable(on_error):
                        on_error(result)
                    entry: tuple[str, Any, Any] = (where, {}, {}) if detail else (where, [], [])
                    if topdown:
                        yield entry
                    else:
                        later.append(entry)
                    continue
                dirs, files, full = _split(where, result)
                entry = (where, dirs, files) if detail else (where, list(dirs), list(files))
                if topdown:
                    yield entry  # the caller may prune entry[1] now
                else:
                    later.append(entry)
                deeper.extend(full[name] for name in entry[1])
            if maxdepth is not None and depth >= maxdepth:
                break
            level, depth = deeper, depth + 1
        for entry in reversed(later):
            yield entry

    # -- changes ---------------------------------------------------------------

    @translated
    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        await self.client.remove(self._strip_protocol(path))

    @translated
    async def _rmdir(self, path: str) -> None:
        await self.client.rmdir(self._strip_protocol(path))

    rmdir = sync_wrapper(_rmdir)

    async def _rm(
        self, path: Any, recursive: bool = False, maxdepth: int | None = None, **kwargs: Any
    ) -> None:
        if maxdepth is not None:  # fsspec's own: a listing, then file by file
            await super()._rm(path, recursive=recursive, maxdepth=maxdepth, **kwargs)
            return
        targets = await self._expand_path(path, recursive=False)
        if recursive:  # a directory's rmtree takes what is under it
            chosen = set(targets)
            targets = [t for t in targets if not any(a in chosen for a in _ancestors(t))]
        await _bulk.bounded(self._rm_one(t, recursive) for t in targets)

    @translated
    async def _rm_one(self, path: str, recursive: bool) -> None:
        client = self.client
        try:
            await client.remove(path)
        except RemoteIsADirectory:
            if recursive:
                await client.rmtree(path)
            else:
                await client.rmdir(path)

    @translated
    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        await self.client.mkdir(self._strip_protocol(path), parents=create_parents)

    @translated
    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        await self.client.mkdir(self._strip_protocol(path), parents=True, exist_ok=exist_ok)

    @translated
    async def _mv(
        self,
        path1: Any,
        path2: Any,
        recursive: bool = False,
        maxdepth: int | None = None,
        **kwargs: Any,
    ) -> None:
        """A rename on the server where it is one path (no bytes move); else copy, then rm."""
        one = isinstance(path1, str) and isinstance(path2, str) and maxdepth is None
        if one and not glob.has_magic(path1):
            src, dst = self._strip_protocol(path1), self._strip_protocol(path2)
            if src == dst:
                return
            if path2.endswith("/") or await self._isdir(dst):
                dst = posixpath.join(dst, posixpath.basename(src))
            await self.client.rename(src, dst, overwrite=True)
            return
        await self._copy(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)
        await self._rm(path1, recursive=recursive)

    mv = sync_wrapper(_mv)

    # -- content ---------------------------------------------------------------

    @translated
    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        if _bulk.collecting(path1, path2):
            return
        await _bulk.copy_one(self, self._strip_protocol(path1), self._strip_protocol(path2))

    async def _copy(self, path1: Any, path2: Any, **kwargs: Any) -> None:
        async with _bulk.plan() as pairs:
            await super()._copy(path1, path2, **kwargs)
        await _bulk.run_copies(self, pairs)

    @translated
    async def _get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
        if _bulk.collecting(rpath, lpath):
            return
        await self.client.get(self._strip_protocol(rpath), lpath)

    async def _get(self, rpath: Any, lpath: Any, recursive: bool = False, **kwargs: Any) -> None:
        # One file: no STAT before it (fsspec's _isdir), its OPEN tells (as `sshpipe get`).
        assume = _bulk.one_file_in_place(rpath, lpath, recursive)
        async with _bulk.plan(assume_files=assume) as pairs:
            await super()._get(rpath, lpath, recursive=recursive, **kwargs)
        await _bulk.run_gets(self, pairs)

    @translated
    async def _put_file(
        self, lpath: str, rpath: str, mode: str = "overwrite", **kwargs: Any
    ) -> None:
        if _bulk.collecting(lpath, rpath, exclusive=mode == "create"):
            return
        await _bulk.put_one(self, lpath, self._strip_protocol(rpath), overwrite=mode != "create")

    async def _put(self, lpath: Any, rpath: Any, **kwargs: Any) -> None:
        async with _bulk.plan() as pairs:
            await super()._put(lpath, rpath, **kwargs)
        await _bulk.run_puts(self, pairs)

    @translated
    async def _pipe_file(
        self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any
    ) -> None:
        await _bulk.pipe_one(self, self._strip_protocol(path), bytes(value), mode)

    @translated
    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        return await _bulk.cat_one(self, self._strip_protocol(path), start, end)

    async def _cat_ranges(
        self,
        paths: list[str],
        starts: Any,
        ends: Any,
        max_gap: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[Any]:
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        n = len(paths)
        starts = list(starts) if isinstance(starts, list | tuple) else [starts] * n
        ends = list(ends) if isinstance(ends, list | tuple) else [ends] * n
        if len(starts) != n or len(ends) != n:
            raise ValueError("paths, starts and ends differ in length")
        out = await _bulk.cat_ranges(self, self._strip_protocol(paths), starts, ends)
        if on_error != "return":
            for item in out:
                if isinstance(item, BaseException):
                    raise item
        return out

    async def _open_remote(self, path: str, mode: str) -> RemoteFile:
        """The remote file under an ``open()``, opened (errors as OSErrors)."""
        where = self._strip_protocol(path)
        if mode == "rb" and (parked := self._clients.take_parked(where)) is not None:
            return parked  # opened by the isfile just before
        with oserrors():
            remote = await self.client.open(where, mode)
        self._clients.track(remote)
        return remote

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> SSHPipeFile:
        from ._file import READ_BLOCK, SSHPipeFile

        if not autocommit:
            raise NotImplementedError("sshpipe files commit as they close (autocommit only)")
        return SSHPipeFile(
            self,
            self._strip_protocol(path),
            mode,
            block_size=block_size or (READ_BLOCK if mode == "rb" else self.blocksize),
            cache_options=cache_options,
            **kwargs,
        )

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        """An empty file at ``path`` (one OPEN and CLOSE; an existing one is emptied)."""
        if not truncate and self.exists(path):
            raise NotImplementedError("touch without truncate: SFTP sets no time here")
        self.pipe_file(path, b"")

    # -- identity --------------------------------------------------------------

    def ukey(self, path: str) -> str:
        """What changes when the file does: path, size, mtime, type (never atime)."""
        info = self.info(path)
        return str(tokenize(info["name"], info["size"], info["mtime"], info["type"]))

    async def _checksum(self, path: str) -> int:
        where = self._strip_protocol(path)
        try:
            with oserrors():
                return int(await self.client.checksum(where, "sha256"), 16)
        except HashUnavailable:
            info = await self._info(where)  # what ukey uses, as fsspec's default does
            return int(tokenize(info["name"], info["size"], info["mtime"]), 16)

    def checksum(self, path: str) -> int:
        """The server's SHA-256 of the file, as an int (no byte of it moves); where the
        server can hash in no way, a hash of its size and mtime instead."""
        return int(self._sync(self._checksum, path))

    def _sync(self, func: Callable[..., Any], *args: Any) -> Any:
        from fsspec.asyn import sync

        return sync(self.loop, func, *args)


# Set while a pickled filesystem is made again: a Dask worker's copy connects on
# first use, never on arrival.
_UNPICKLING = contextvars.ContextVar("_UNPICKLING", default=False)


def _unpickled(cls: type[SSHPipeFileSystem], args: Any, kwargs: dict[str, Any]) -> Any:
    token = _UNPICKLING.set(True)
    try:
        return cls(*args, **kwargs)
    finally:
        _UNPICKLING.reset(token)


def _split(where: str, infos: list[Info]) -> tuple[Info, Info, dict[str, str]]:
    """A listing as walk gives it: dirs and files by name, and the dirs' full paths."""
    dirs: Info = {}
    files: Info = {}
    full: dict[str, str] = {}
    for info in infos:
        pathname = info["name"].rstrip("/")
        name = pathname.rsplit("/", 1)[-1]
        if info["type"] == "directory" and pathname != where:
            dirs[name], full[name] = info, pathname
        elif pathname == where:
            files[""] = info  # a file lists as itself
        else:
            files[name] = info
    return dirs, files, full


def _ancestors(path: str) -> list[str]:
    out: list[str] = []
    while True:
        parent = posixpath.dirname(path)
        if parent == path or not parent:
            return out
        out.append(parent)
        path = parent
