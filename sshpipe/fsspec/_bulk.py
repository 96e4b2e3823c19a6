"""Many files at once: fsspec's plan, sshpipe's pipelines.

fsspec's ``_get``/``_put``/``_copy`` expand globs and directories and name a
destination for every file (its semantics, which its abstract suites check
case by case). Run inside :func:`plan`, the per-file calls they make
(``_get_file``...) only record the pairs; the pairs then go to the client
together: the files landing in one directory under their own names as one
tree transfer (the tree pipeline: many OPENs and READs in flight across
channels), the rest one by one through the striped single-file engine.
What is a directory is known from the listings and STATs the expansion made
(:func:`seen`), so it costs no round trip more.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
from collections.abc import AsyncIterator, Awaitable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import RemoteIsADirectory, RemoteNotFound
from ._oserrors import oserrors

if TYPE_CHECKING:
    from ._filesystem import SSHPipeFileSystem

T = TypeVar("T")

# Files (or file groups) moving at once: each leases channels of the client's
# pool; past this they queue for channels anyway.
IN_FLIGHT = 16


@dataclass
class Plan:
    """The (source, destination) pairs fsspec asked for, and the types it saw on the way."""

    pairs: list[tuple[str, str]] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)


_PLAN: ContextVar[Plan | None] = ContextVar("sshpipe_fsspec_plan", default=None)


@contextlib.asynccontextmanager
async def plan() -> AsyncIterator[Plan]:
    """Collect the per-file calls made inside (tasks started inside share the plan)."""
    collected = Plan()
    token = _PLAN.set(collected)
    try:
        yield collected
    finally:
        _PLAN.reset(token)


def collecting(source: str, dest: str) -> bool:
    """Record a pair when a plan is being made (True), else leave the call to run (False)."""
    current = _PLAN.get()
    if current is None:
        return False
    current.pairs.append((source, dest))
    return True


def seen(info: dict[str, Any]) -> None:
    """Note a path's type while a plan is being made (from a listing or a STAT)."""
    current = _PLAN.get()
    if current is not None:
        current.types[info["name"]] = info["type"]


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
    unknown = [p for p in dict.fromkeys(paths) if p not in found.types]
    infos = await bounded(fs._info(p) for p in unknown)
    return {**found.types, **{info["name"]: info["type"] for info in infos}}


def _by_directory(pairs: list[tuple[str, str]]) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """Sources that keep their names, by destination directory; and the renamed ones."""
    groups: dict[str, list[str]] = {}
    renamed: list[tuple[str, str]] = []
    for source, dest in pairs:
        if posixpath.basename(source) == os.path.basename(dest):
            groups.setdefault(os.path.dirname(dest), []).append(source)
        else:
            renamed.append((source, dest))
    return groups, renamed


async def run_gets(fs: SSHPipeFileSystem, found: Plan) -> None:
    types = await _remote_types(fs, found, [r for r, _ in found.pairs])
    files = []
    for rpath, lpath in found.pairs:
        if types.get(rpath) == "directory":
            os.makedirs(lpath, exist_ok=True)
        else:
            files.append((rpath, lpath))
    groups, renamed = _by_directory(files)
    client = fs.client

    async def group(where: str, sources: list[str]) -> None:
        with oserrors():
            if len(sources) == 1:
                await client.get(sources[0], os.path.join(where, posixpath.basename(sources[0])))
            else:
                await client.get(sources, where, fail_fast=True)

    async def single(rpath: str, lpath: str) -> None:
        with oserrors():
            await client.get(rpath, lpath)

    await bounded(
        [*(group(w, s) for w, s in groups.items()), *(single(r, l) for r, l in renamed)]
    )


async def run_puts(fs: SSHPipeFileSystem, found: Plan) -> None:
    groups, renamed = _by_directory([(l, r) for l, r in found.pairs])
    client = fs.client
    # Every destination directory made first, once (fsspec makes only those
    # its sources had): an upload into a missing one would fail.
    await bounded(fs._makedirs(where, exist_ok=True) for where in groups)

    async def group(where: str, sources: list[str]) -> None:
        with oserrors():
            if len(sources) == 1:
                await client.put(sources[0], posixpath.join(where, os.path.basename(sources[0])))
            else:
                await client.put(sources, where, fail_fast=True)

    await bounded(
        [*(group(w, s) for w, s in groups.items()), *(put_one(fs, l, r) for l, r in renamed)]
    )


async def run_copies(fs: SSHPipeFileSystem, found: Plan) -> None:
    types = await _remote_types(fs, found, [s for s, _ in found.pairs])
    dirs = sorted(d for s, d in found.pairs if types.get(s) == "directory")
    await bounded(fs._makedirs(d, exist_ok=True) for d in dirs)
    await bounded(
        copy_one(fs, s, d) for s, d in found.pairs if types.get(s) != "directory"
    )


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


async def put_one(fs: SSHPipeFileSystem, lpath: str, rpath: str) -> None:
    with oserrors():
        await _with_parent(fs, rpath, lambda: fs.client.put(lpath, rpath))


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
    client = fs.client
    if mode == "create" and await client.exists(path):
        raise FileExistsError(path)

    async def one_piece() -> AsyncIterator[bytes]:
        yield data

    with oserrors():
        await _with_parent(fs, path, lambda: client.put_stream(one_piece(), path))


async def cat_one(fs: SSHPipeFileSystem, path: str, start: int | None, end: int | None) -> bytes:
    pieces = []
    with oserrors():
        async with contextlib.aclosing(fs.client.stream(path)) as stream:
            async for piece in stream:
                pieces.append(piece)
    data = b"".join(pieces)
    return data[start:end]
