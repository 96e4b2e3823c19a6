"""Directory listings and globs on the server, with READDIRs pipelined and streamed.

OpenSSH's sftp-server answers a READDIR with at most 100 names, so a directory
of 1,000 files takes 10 requests. filexfer-02 §6.1 has the server process
requests on one handle in order, so several READDIRs can be in flight on the
same handle and come back as consecutive batches: a big directory costs a few
round trips instead of one per hundred names.

A listing is yielded batch by batch as it arrives, and no READDIR is sent
while the caller is busy with the last batch. A directory of a million
entries, or a server whose READDIR never ends, is never held whole; the
caller's ``ListingCheck`` bounds how many entries it takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncGenerator
from functools import partial

from .._errors import ProtocolError, RemoteNotFound, SSHPipeError, UnsafePath
from ..core import codec
from ..core.status import status_error
from ..core.treeplan import glob_join, glob_match, glob_parts, glob_result_matches
from ..core.untrusted import ListingCheck
from .replies import quiet
from .sftp import SFTPSession

logger = logging.getLogger("sshpipe.tree")

Listing = list[tuple[str, codec.Attrs]]  # (name, attributes as lstat gives them)

READDIRS_IN_FLIGHT = 4  # a 400-name head start per round trip; past EOF they cost one reply each


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


async def glob(sftp: SFTPSession, pattern: str) -> list[str]:
    """Remote paths matching ``pattern`` (``*``, ``?``, ``[...]`` per component), sorted.

    Every name a listing gives passes ``ListingCheck`` first, and every result
    is matched again against ``pattern``: a server cannot add a path to it.

    Raises:
        RemoteNotFound: nothing matches.
        UnsafePath: a listing held an unsafe or repeated name (a server that
            sends one cannot be trusted to say what matches).
    """
    head, parts = glob_parts(pattern)
    if not parts:
        return [pattern]
    candidates = [head]
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        found: list[str] = []
        for directory in candidates:
            try:
                found += await _matches(sftp, directory, part, dirs_only=not last)
            except UnsafePath:
                raise
            except SSHPipeError:
                continue  # not a directory, or unreadable: matches nothing (as glob(3))
        candidates = found
    candidates = [path for path in candidates if glob_result_matches(pattern, path)]
    if not candidates:
        raise RemoteNotFound(pattern, "no match")
    return sorted(candidates)


async def _matches(sftp: SFTPSession, directory: str, part: str, *, dirs_only: bool) -> list[str]:
    check = ListingCheck(directory)
    found: list[str] = []
    async with contextlib.aclosing(read_dir(sftp, directory)) as batches:
        async for batch in batches:
            for name, attrs in batch:
                if not check.accept(name):
                    continue
                if glob_match(part, name) and (not dirs_only or attrs.kind in ("dir", "symlink")):
                    found.append(glob_join(directory, name))
    return found
