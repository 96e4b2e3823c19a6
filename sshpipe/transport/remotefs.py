"""Directory listings and globs on the server, with READDIRs pipelined and streamed.

OpenSSH's sftp-server answers a READDIR with at most 100 names, so a directory
of 1,000 files takes 10 requests. filexfer-02 §6.1 has the server process
requests on one handle in order, so several READDIRs can be in flight on the
same handle and come back as consecutive batches: a big directory costs a few
round trips instead of one per hundred names.

A listing is yielded batch by batch as it arrives, and no READDIR is sent
while the caller is busy with the last batch. A directory of a million
entries, or a server whose READDIR never ends, is never held whole; the
caller's ``ListingCheck`` bounds how many entries it takes. A glob's matches
are handed on one by one as its listings give them (``glob_walk``), never
collected: ``*/*`` over a thousand directories of 100,000 names each holds
one listing per component of the pattern.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from functools import partial

from ..core import codec
from ..core.errors import ProtocolError, RemoteError, RemoteNotFound, UnsafePath
from ..core.status import status_error
from ..core.treeplan import glob_join, glob_match, glob_parts, glob_result_matches
from ..core.untrusted import MAX_LISTING_ENTRIES, ListingCheck, NameBudget
from .replies import quiet
from .sftp import SFTPSession

logger = logging.getLogger("sshpipe.tree")

Listing = list[tuple[str, codec.Attrs]]  # (name, attributes as lstat gives them)
# What a listing's caller is given, one entry at a time: (name, attributes).
Entry = Callable[[str, codec.Attrs], Awaitable[None]]
# Lists a directory: each entry to ``entry``; ``started`` told before each
# attempt (a listing cut by a reconnect is read again from the start).
Lister = Callable[[str, Entry, Callable[[], None]], Awaitable[None]]
# A glob's match: its path, and its attributes as its listing gave them
# (None: a path without wildcards, not looked at).
Match = Callable[[str, codec.Attrs | None], Awaitable[None]]

READDIRS_IN_FLIGHT = 4  # a 400-name head start per round trip; past EOF they cost one reply each


async def stat_by_name(sftp: SFTPSession, path: str) -> codec.Attrs:
    """``path``'s attributes, a symlink followed: its STAT, or on a read-once server
    (``Quirks.read_once``) its entry in its directory's listing.

    A read-once server may count a STAT by name of a file as its one read
    (rclone's ``use_fstat``); listing the directory consumes nothing. A
    name the listing does not hold, a link, or a directory is STATed: there
    is no mailbox file to consume there.
    """
    parent, name = posixpath.split(path.rstrip("/"))
    if not sftp.caps.quirks.read_once or not name:
        return await sftp.stat(path)
    async with contextlib.aclosing(read_dir(sftp, parent or ".")) as batches:
        async for batch in batches:
            for entry, attrs in batch:
                if entry == name and attrs.kind == "file":
                    return attrs
    return await sftp.stat(path)


async def read_dir(sftp: SFTPSession, path: str) -> AsyncGenerator[Listing, None]:
    """The entries of the remote directory ``path`` as they arrive (``.`` and ``..`` too).

    Use it with ``contextlib.aclosing``: leaving early closes the handle.
    """
    handle = await sftp.opendir(path)

    def readdir(rid: int) -> bytes:
        return codec.encode_handle_request(codec.FXP_READDIR, rid, handle)

    def close() -> asyncio.Future[codec.Reply]:
        return sftp.request(lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, handle))

    pending = deque(sftp.request(readdir) for _ in range(READDIRS_IN_FLIGHT))
    try:
        at_end = False
        while pending:
            await pending[0]
            # Take every reply already here before asking again: the EOFs
            # usually come in the same segment as the last names, and a READDIR
            # sent before we see them costs one more round trip.
            batch: Listing = []
            while pending and pending[0].done():
                reply = pending.popleft().result()
                if isinstance(reply, codec.Name):
                    batch += [(name, attrs) for name, _, attrs in reply.names]
                elif isinstance(reply, codec.Status) and reply.code == codec.FX_EOF:
                    at_end = True
                elif isinstance(reply, codec.Status):
                    raise status_error(reply, path)
                else:
                    raise ProtocolError(f"{path}: unexpected {type(reply).__name__} to READDIR")
            if batch:
                yield batch  # nothing more is asked while the caller works on these
            while not at_end and len(pending) < READDIRS_IN_FLIGHT:
                pending.append(sftp.request(readdir))
    except BaseException as exc:
        for future in pending:  # answered later, read by nobody
            future.add_done_callback(quiet)
        if sftp.broken is None:
            closing = close()
            if isinstance(exc, asyncio.CancelledError):
                sftp.settle_later(closing)  # the pool waits for it before reusing the channel
            else:
                closing.add_done_callback(quiet)
        raise
    # Not awaited: the names are what we came for, and a directory handle that
    # fails to close costs the server a descriptor, not us a byte. Waiting would
    # put one more round trip before every level of the tree.
    close().add_done_callback(partial(_log_close, path))


def _log_close(path: str, future: asyncio.Future[codec.Reply]) -> None:
    quiet(future)
    if not future.cancelled() and future.exception() is None:
        reply = future.result()
        if not (isinstance(reply, codec.Status) and reply.code == codec.FX_OK):
            logger.debug("%s: directory handle not closed: %r", path, reply)


async def glob_walk(
    lister: Lister,
    pattern: str,
    match: Match,
    *,
    budget: NameBudget | None = None,
    going_down: Callable[[], contextlib.AbstractAsyncContextManager[None]] = contextlib.nullcontext,
) -> int:
    """``match`` each remote path that ``pattern`` names (``*``, ``?``, ``[...]`` per
    component) as the listings give them; how many there were.

    Depth first: a directory a component matches is listed while the listing
    above it waits (inside ``going_down``), so what is held is one listing
    per component, however many names match. Every name a listing gives
    passes ``ListingCheck`` first (``budget``: what the listings open at once
    may remember), and every result is matched again against ``pattern``: a
    server cannot add a path to it. A directory the server will not list
    matches nothing, as in glob(3).

    Raises:
        UnsafePath: a listing held an unsafe or repeated name (a server that
            sends one cannot be trusted to say what matches), or no end.
    """
    head, parts = glob_parts(pattern)
    if not parts:
        await match(pattern, None)
        return 1
    matched = 0

    async def walk(directory: str, index: int) -> None:
        part, last = parts[index], index == len(parts) - 1
        check = ListingCheck(directory, budget)
        handed_on = False  # an error after this may be the caller's own

        async def entry(name: str, attrs: codec.Attrs) -> None:
            nonlocal matched, handed_on
            if not check.accept(name) or not glob_match(part, name):
                return
            path = glob_join(directory, name)
            if not last:
                if attrs.kind in ("dir", "symlink"):
                    handed_on = True
                    async with going_down():
                        await walk(path, index + 1)
            elif glob_result_matches(pattern, path):
                matched += 1
                handed_on = True
                await match(path, attrs)

        try:
            await lister(directory, entry, check.again)
        except RemoteError:
            if handed_on:
                raise
            # Not a directory, or unreadable: it matches nothing (as in glob(3)).
        finally:
            check.close()

    await walk(head, 0)
    return matched


async def glob(sftp: SFTPSession, pattern: str) -> list[str]:
    """Remote paths matching ``pattern`` (``*``, ``?``, ``[...]`` per component), sorted.

    As ``glob_walk``, on one channel, its matches collected.

    Raises:
        RemoteNotFound: nothing matches.
        UnsafePath: a listing held an unsafe or repeated name, or more than
            MAX_LISTING_ENTRIES paths match.
    """
    found: list[str] = []

    async def collect(path: str, attrs: codec.Attrs | None) -> None:
        if len(found) >= MAX_LISTING_ENTRIES:
            raise UnsafePath(pattern, "", listing_refused=f"more than {len(found)} matches")
        found.append(path)

    await glob_walk(partial(list_dir, sftp), pattern, collect)
    if not found:
        raise RemoteNotFound(pattern, "no match")
    return sorted(found)


async def list_dir(sftp: SFTPSession, path: str, entry: Entry, started: Callable[[], None]) -> None:
    """Each entry of the remote directory ``path`` to ``entry``, as it arrives (a ``Lister``)."""
    started()
    async with contextlib.aclosing(read_dir(sftp, path)) as batches:
        async for batch in batches:
            for name, attrs in batch:
                await entry(name, attrs)
