"""Directory listings and globs on the server, with READDIRs pipelined.

OpenSSH's sftp-server answers a READDIR with at most 100 names, so a directory
of 1,000 files takes 10 requests. filexfer-02 §6.1 has the server process
requests on one handle in order, so several READDIRs can be in flight on the
same handle and come back as consecutive batches: a big directory costs a few
round trips instead of one per hundred names.
"""

from __future__ import annotations

import contextlib
from collections import deque

from . import _codec as codec
from ._errors import RemoteNotFound, SSHPipeError
from ._sftp import SFTPSession, status_error
from ._treeplan import glob_join, glob_match, glob_parts

Listing = list[tuple[str, codec.Attrs]]  # (name, attributes as lstat gives them)

READDIRS_IN_FLIGHT = 4  # a 400-name head start per round trip; past EOF they cost one reply each


async def list_dir(sftp: SFTPSession, path: str) -> Listing:
    """Every entry of the remote directory ``path`` (``.`` and ``..`` included, as sent)."""
    handle = await sftp.opendir(path)
    entries: Listing = []
    failed = True
    try:

        def readdir(rid: int) -> bytes:
            return codec.encode_handle_request(codec.FXP_READDIR, rid, handle)

        pending = deque(sftp.request(readdir) for _ in range(READDIRS_IN_FLIGHT))
        at_end = False
        while pending:
            reply = await pending.popleft()
            if isinstance(reply, codec.Name):
                entries += [(name, attrs) for name, _, attrs in reply.names]
                if not at_end:
                    pending.append(sftp.request(readdir))
            elif isinstance(reply, codec.Status) and reply.code == codec.FX_EOF:
                at_end = True
            elif isinstance(reply, codec.Status):
                raise status_error(reply, path)
            else:
                raise SSHPipeError(f"remote: {path}: unexpected {type(reply).__name__} to READDIR")
        failed = False
    finally:
        closing = sftp.request(
            lambda rid: codec.encode_handle_request(codec.FXP_CLOSE, rid, handle)
        )
        if not failed:
            sftp.check_status(await closing, path)
        else:  # the CLOSE is sent; its answer does not matter any more
            closing.add_done_callback(_ignore_result)
    return entries


def _ignore_result(future: object) -> None:
    with contextlib.suppress(BaseException):
        future.result()  # type: ignore[attr-defined]


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
