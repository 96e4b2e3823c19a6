"""Directory listings and globs on the server, with READDIRs pipelined.

OpenSSH's sftp-server answers a READDIR with at most 100 names, so a directory
of 1,000 files takes 10 requests. filexfer-02 §6.1 has the server process
requests on one handle in order, so several READDIRs can be in flight on the
same handle and come back as consecutive batches: a big directory costs a few
round trips instead of one per hundred names.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from functools import partial

from . import _codec as codec
from ._errors import ProtocolError, RemoteNotFound, SSHPipeError
from ._sftp import SFTPSession, quiet, settle, status_error
from ._treeplan import glob_join, glob_match, glob_parts

logger = logging.getLogger("sshpipe.tree")

Listing = list[tuple[str, codec.Attrs]]  # (name, attributes as lstat gives them)

READDIRS_IN_FLIGHT = 4  # a 400-name head start per round trip; past EOF they cost one reply each


async def list_dir(sftp: SFTPSession, path: str) -> Listing:
    """Every entry of the remote directory ``path`` (``.`` and ``..`` included, as sent)."""
    handle = await sftp.opendir(path)
    entries: Listing = []

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
            while pending and pending[0].done():
                reply = pending.popleft().result()
                if isinstance(reply, codec.Name):
                    entries += [(name, attrs) for name, _, attrs in reply.names]
                elif isinstance(reply, codec.Status) and reply.code == codec.FX_EOF:
                    at_end = True
                elif isinstance(reply, codec.Status):
                    raise status_error(reply, path)
                else:
                    raise ProtocolError(f"{path}: unexpected {type(reply).__name__} to READDIR")
            while not at_end and len(pending) < READDIRS_IN_FLIGHT:
                pending.append(sftp.request(readdir))
    except BaseException as exc:
        for future in pending:  # answered later, read by nobody
            future.add_done_callback(quiet)
        if sftp.broken is None:
            closing = close()
            if isinstance(exc, asyncio.CancelledError):
                await settle(closing)  # cancelled: no handle outlives us
            else:
                closing.add_done_callback(quiet)
        raise
    # Not awaited: the names are what we came for, and a directory handle that
    # fails to close costs the server a descriptor, not us a byte. Waiting would
    # put one more round trip before every level of the tree.
    close().add_done_callback(partial(_log_close, path))
    return entries


def _log_close(path: str, future: asyncio.Future[codec.Reply]) -> None:
    quiet(future)
    if not future.cancelled() and future.exception() is None:
        reply = future.result()
        if not (isinstance(reply, codec.Status) and reply.code == codec.FX_OK):
            logger.debug("%s: directory handle not closed: %r", path, reply)


async def glob(sftp: SFTPSession, pattern: str) -> list[str]:
    """Remote paths matching ``pattern`` (``*``, ``?``, ``[...]`` per component), sorted.

    Raises:
        RemoteNotFound: nothing matches.
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
                entries = await list_dir(sftp, directory)
            except SSHPipeError:
                continue  # not a directory, or unreadable: matches nothing (as glob(3))
            for name, attrs in entries:
                if glob_match(part, name) and (last or attrs.kind in ("dir", "symlink")):
                    found.append(glob_join(directory, name))
        candidates = found
    if not candidates:
        raise RemoteNotFound(pattern, "no match")
    return sorted(candidates)
