"""Many files at once: fsspec's plan, sshpipe's pipelines.

fsspec's ``_get``/``_put``/``_copy`` expand globs and directories and name a
destination for every file (its semantics, which its abstract suites check
case by case). Run inside :func:`plan`, the per-file calls they make
(``_get_file``...) only record the pairs; the pairs then go to the client
together: the files landing in one directory under their own names as one
tree transfer (the tree pipeline: many OPENs and READs in flight across
channels), the rest one by one through the striped single-file engine.
What each path is, is known from the listings and STATs the expansion made
(:func:`seen`): fsspec asking again (``_info``, ``_isdir``, ``_exists``) costs no
round trip (:func:`known`). A file fsspec would STAT before getting it is taken
for one unasked (:func:`assumed_file`): the download's OPEN, which carries a
STAT, tells in the round trip it takes anyway, as ``sshpipe get`` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import posixpath
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from fsspec.implementations.local import make_path_posix, trailing_sep

from ..core.errors import RemoteIsADirectory, RemoteNotFound, SSHPipeError
from ._oserrors import oserrors

if TYPE_CHECKING:
    from ._filesystem import SSHPipeFileSystem

T = TypeVar("T")

# Files (or file groups) moving at once: each leases channels of the client's
# pool; past this they queue for channels anyway.
IN_FLIGHT = 16
# Files of one directory that go as one tree transfer: below this each goes
# through the single-file engine, side by side (the tree's set-up, its limits
# learnt and its channels opened, costs more than it saves on a few files).
TREE_FROM = 8


Info = dict[str, Any]


@dataclass
class Plan:
    """The (source, destination) pairs fsspec asked for; the infos of the remote paths
    it saw on the way (listings, STATs), by path; and, where ``assume_files``, the
    unseen sources it was told are no directories (``assumed``); the destinations
    to create only, never replace (``exclusive``: fsspec's ``mode="create"``)."""

    pairs: list[tuple[str, str]] = field(default_factory=list)
    exclusive: set[str] = field(default_factory=set)
    infos: dict[str, Info] = field(default_factory=dict)
    assume_files: bool = False
    assumed: set[str] = field(default_factory=set)


_PLAN: ContextVar[Plan | None] = ContextVar("sshpipe_fsspec_plan", default=None)


@contextlib.asynccontextmanager
async def plan(*, assume_files: bool = False) -> AsyncIterator[Plan]:
    """Collect the per-file calls made inside (tasks started inside share the plan)."""
    collected = Plan(assume_files=assume_files)
    token = _PLAN.set(collected)
    try:
        yield collected
    finally:
        _PLAN.reset(token)


def collecting(source: str, dest: str, *, exclusive: bool = False) -> bool:
    """Record a pair when a plan is being made (True), else leave the call to run (False).

    ``exclusive``: ``dest`` is to be created, never replaced."""
    current = _PLAN.get()
    if current is None:
        return False
    current.pairs.append((source, dest))
    if exclusive:
        current.exclusive.add(dest)
    return True


def seen(info: Info) -> None:
    """Note a path's info while a plan is being made (from a listing or a STAT)."""
    current = _PLAN.get()
    if current is not None:
        current.infos[info["name"]] = info


def known(path: str) -> Info | None:
    """The info a listing or STAT of this plan gave of ``path`` (a copy), else None.

    The paths fsspec's expansion names come from those listings: one call
    looks at each path once, as the snapshot its plan is made from.
    """
    current = _PLAN.get()
    info = current.infos.get(path) if current is not None else None
    return dict(info) if info is not None else None


def assumed_file(path: str) -> bool:
    """True when the plan takes the unseen ``path`` for no directory without a look
    (``one_file_in_place``): its download's OPEN and STAT tell, and a directory is
    then skipped, as fsspec's look would have skipped it."""
    current = _PLAN.get()
    if current is None or not current.assume_files or path in current.infos:
        return False
    current.assumed.add(path)
    return True


def one_file_in_place(rpath: Any, lpath: Any, recursive: bool) -> bool:
    """Whether fsspec's get of ``rpath`` may skip its look at the source: one path, no
    glob, not recursive, landing in a local directory that is there already (fsspec
    makes the destination's parents, which it would not for a source it skips)."""
    if recursive or not isinstance(rpath, str) or glob.has_magic(rpath):
        return False
    if not isinstance(lpath, str):
        return False
    local = make_path_posix(lpath)
    if os.path.isdir(local):
        return True
    return not trailing_sep(local) and os.path.isdir(os.path.dirname(local))


async def bounded(coros: Iterable[Awaitable[T]], limit: int = IN_FLIGHT) -> list[T]:
    """Run them all, ``limit`` at a time; every one ends before the first error is raised."""
    gate = asyncio.Semaphore(limit)

    async def one(coro: Awaitable[T]) -> T:
        async with gate:
            return await coro

    results = await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]  # no exception left in it


async def _remote_types(fs: SSHPipeFileSystem, found: Plan, paths: list[str]) -> dict[str, str]:
    """The type of each remote path: seen during the expansion, else STATed now."""
    unknown = [p for p in dict.fromkeys(paths) if p not in found.infos]
    infos = [*found.infos.values(), *await bounded(fs._info(p) for p in unknown)]
    return {info["name"]: info["type"] for info in infos}


def _by_directory(
    pairs: list[tuple[str, str]], dirname: Any
) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """Sources keeping their names, by destination directory, where TREE_FROM or more
    land together; and the pairs to copy one by one."""
    groups: dict[str, list[tuple[str, str]]] = {}
    singles: list[tuple[str, str]] = []
    for source, dest in pairs:
        if posixpath.basename(source) == os.path.basename(dest):
            groups.setdefault(dirname(dest), []).append((source, dest))
        else:
            singles.append((source, dest))
    trees = {}
    for where, members in groups.items():
        if len(members) >= TREE_FROM:
            trees[where] = [source for source, _ in members]
        else:
            singles.extend(members)
    return trees, singles


async def run_gets(fs: SSHPipeFileSystem, found: Plan) -> None:
    # A source no listing or STAT described is opened as a file: the OPEN's STAT
    # says what it is in its round trip (``single``). Only those a tree would
    # take are STATed first: a tree refuses a directory it is not to descend.
    trees, _ = _by_directory(found.pairs, os.path.dirname)
    types = await _remote_types(fs, found, [s for group in trees.values() for s in group])
    files = []
    for rpath, lpath in found.pairs:
        if types.get(rpath) == "directory":
            os.makedirs(lpath, exist_ok=True)
        else:
            files.append((rpath, lpath))
    trees, singles = _by_directory(files, os.path.dirname)
    client = fs.client

    async def tree(where: str, sources: list[str]) -> None:
        with oserrors():
            await client.get(sources, where, fail_fast=True)

    async def single(rpath: str, lpath: str) -> None:
        with oserrors():
            try:
                await client.get(rpath, lpath)
            except RemoteIsADirectory as exc:
                if exc.path != rpath or rpath in types:
                    raise  # not the source, or it was seen as a file
                if rpath not in found.assumed:  # a directory named in a list: made
                    os.makedirs(lpath, exist_ok=True)

    await bounded([*(tree(w, s) for w, s in trees.items()), *(single(*pair) for pair in singles)])


async def run_puts(fs: SSHPipeFileSystem, found: Plan) -> None:
    # A file to create only goes alone: its commit refuses an existing one (a
    # tree's files replace what they find).
    plain = [pair for pair in found.pairs if pair[1] not in found.exclusive]
    trees, singles = _by_directory(plain, posixpath.dirname)
    singles += [pair for pair in found.pairs if pair[1] in found.exclusive]
    client = fs.client
    # Every destination directory made first, once (fsspec makes only those
    # its sources had): uploads racing to make a shared one would trip.
    wheres = {*trees, *(posixpath.dirname(r) for _, r in singles)}
    await bounded(fs._makedirs(where, exist_ok=True) for where in sorted(wheres))

    async def tree(where: str, sources: list[str]) -> None:
        with oserrors():
            await client.put(sources, where, fail_fast=True)

    async def single(lpath: str, rpath: str) -> None:
        with oserrors():
            await client.put(lpath, rpath, overwrite=rpath not in found.exclusive)

    await bounded([*(tree(w, s) for w, s in trees.items()), *(single(*pair) for pair in singles)])


async def run_copies(fs: SSHPipeFileSystem, found: Plan) -> None:
    types = await _remote_types(fs, found, [s for s, _ in found.pairs])
    files = [(s, d) for s, d in found.pairs if types.get(s) != "directory"]
    # The directories, and those the files land in, made first (copies racing
    # to make a shared parent would trip over each other).
    dirs = {d for s, d in found.pairs if types.get(s) == "directory"}
    dirs |= {posixpath.dirname(d) for _, d in files}
    await bounded(fs._makedirs(d, exist_ok=True) for d in sorted(dirs))
    await bounded(copy_one(fs, s, d) for s, d in files)


async def _with_parent(fs: SSHPipeFileSystem, dest: str, action: Any) -> None:
    """``action()``; if the destination's directory is missing, make it and try once more."""
    try:
        await action()
    except RemoteNotFound:
        parent = posixpath.dirname(dest)
        if not parent or await fs.client.exists(parent):
            raise  # the source was missing, not the directory
        await fs._makedirs(parent, exist_ok=True)
        await action()


async def put_one(fs: SSHPipeFileSystem, lpath: str, rpath: str, *, overwrite: bool) -> None:
    """One file; ``overwrite=False`` ("create"): the server refuses an existing ``rpath``
    as the file takes its name (``Client.put``), not a look first."""
    with oserrors():
        await _with_parent(fs, rpath, lambda: fs.client.put(lpath, rpath, overwrite=overwrite))


async def copy_one(fs: SSHPipeFileSystem, src: str, dst: str) -> None:
    client = fs.client
    with oserrors():
        try:
            await _with_parent(fs, dst, lambda: client.copy(src, dst))
        except RemoteIsADirectory as exc:
            if exc.path != src:
                raise
            await fs._makedirs(dst, exist_ok=True)  # a directory copies as a directory


async def pipe_one(fs: SSHPipeFileSystem, path: str, data: bytes, mode: str) -> None:
    """Write ``data`` as the file at ``path`` ("create": only if there is none, atomically:
    the OPEN's exclusive flag decides, not a look first)."""
    client = fs.client

    async def write() -> None:
        async with client.open(path, "xb" if mode == "create" else "wb") as file:
            await file.write(data)

    with oserrors():
        await _with_parent(fs, path, write)


async def cat_one(fs: SSHPipeFileSystem, path: str, start: int | None, end: int | None) -> bytes:
    """The file's bytes, or only those of ``[start, end)`` (negative: from the end)."""
    client = fs.client
    with oserrors():
        if start is None and end is None:
            pieces = []
            async with contextlib.aclosing(client.stream(path)) as stream:
                async for piece in stream:
                    pieces.append(piece)
            return b"".join(pieces)
        async with client.open(path, read_ahead=0) as file:
            offset, length = _span(start, end, file.size)
            return await file.pread(offset, length) if length > 0 else b""


async def cat_ranges(
    fs: SSHPipeFileSystem, paths: list[str], starts: list[int | None], ends: list[int | None]
) -> list[bytes | BaseException]:
    """Each ``[start, end)``: one OPEN per file, every range of a file's READs sent at once."""
    by_path: dict[str, list[int]] = {}
    for i, path in enumerate(paths):
        by_path.setdefault(path, []).append(i)
    out: list[bytes | BaseException] = [b""] * len(paths)
    client = fs.client

    async def one_file(path: str, indexes: list[int]) -> None:
        try:
            with oserrors():
                async with client.open(path, read_ahead=0) as file:
                    spans = [_span(starts[i], ends[i], file.size) for i in indexes]
                    found = await file.read_ranges([(o, max(n, 0)) for o, n in spans])
            for i, data in zip(indexes, found, strict=True):
                out[i] = data
        except (OSError, SSHPipeError) as exc:
            for i in indexes:
                out[i] = exc

    await bounded(one_file(p, ix) for p, ix in by_path.items())
    return out


def _span(start: int | None, end: int | None, size: int | None) -> tuple[int, int]:
    """(offset, length) of Python's ``[start:end]`` on a file of ``size`` bytes."""
    total = size or 0
    first = 0 if start is None else (max(total + start, 0) if start < 0 else start)
    last = total if end is None else (max(total + end, 0) if end < 0 else min(end, total))
    return first, last - first
