"""Temporary files an upload could not remove, kept until the server can be reached again.

An upload writes ``.NAME.sshpipe-XXXXXX.partial`` and renames it into place;
when it fails it removes the file. When the server is gone (it crashed, the
link died for good) nothing can be removed: the paths are written to
``$XDG_STATE_HOME/sshpipe/leftover/`` (one file per server), the command says
which they are, and the next upload to that server removes them first. A run
killed outright records nothing: a tree resumed into its destination sweeps
each directory it resumes into (``sweep_dir``, ``sweep_local_dir``). Only names of that shape are
ever removed, whatever the record or the listing holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import posixpath
import re

from .._errors import SSHPipeError
from ..core.untrusted import ListingCheck
from ..local.dirfd import LocalDir
from ..transport.pool import ChannelPool
from ..transport.remotefs import read_dir
from ..transport.remoteplace import remove_quietly
from ..transport.sftp import SFTPSession
from .putresume import state_dir

logger = logging.getLogger("sshpipe.upload")

# remoteplace.remote_temp_name's shape: nothing else is ever removed from a record.
_TEMP_NAME = re.compile(r"\..+\.sshpipe-[0-9a-f]{6}\.partial")
# A record holds at most this many: a tree that died with more lists the first.
MAX_RECORDED = 10_000
# Named in the one line that says they were left (the record holds them all).
SHOWN = 100


def is_temp_name(path: str) -> bool:
    return _TEMP_NAME.fullmatch(posixpath.basename(path)) is not None


def _record_path(peer: str) -> str:
    digest = hashlib.sha256(peer.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    directory = state_dir().parent / "leftover"
    directory.mkdir(mode=0o700, exist_ok=True)
    return str(directory / f"{digest}.json")


def record(peer: str, paths: list[str]) -> None:
    """Add ``paths`` to what the next upload to ``peer`` removes first."""
    paths = [path for path in paths if is_temp_name(path)]
    if not paths:
        return
    kept = sorted(set(peek(peer)) | set(paths))[:MAX_RECORDED]
    target = _record_path(peer)
    temp = f"{target}.{os.getpid()}.tmp"
    with open(temp, "w", encoding="utf-8", errors="surrogateescape") as out:
        json.dump({"peer": peer, "paths": kept}, out)
    os.replace(temp, target)


def peek(peer: str) -> list[str]:
    """The paths recorded for ``peer`` (none if the record is missing or unreadable)."""
    try:
        with open(_record_path(peer), encoding="utf-8", errors="surrogateescape") as source:
            held = json.load(source)
    except (OSError, ValueError):
        return []
    if not isinstance(held, dict) or held.get("peer") != peer:
        return []
    paths = held.get("paths")
    if not isinstance(paths, list):
        return []
    return [path for path in paths if isinstance(path, str) and is_temp_name(path)]


def forget(peer: str, removed: list[str]) -> None:
    """Drop ``removed`` from ``peer``'s record (the record goes when it is empty)."""
    left = sorted(set(peek(peer)) - set(removed))
    target = _record_path(peer)
    if not left:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
        return
    record_all = {"peer": peer, "paths": left}
    temp = f"{target}.{os.getpid()}.tmp"
    with open(temp, "w", encoding="utf-8", errors="surrogateescape") as out:
        json.dump(record_all, out)
    os.replace(temp, target)


async def sweep(pool: ChannelPool, sftp: SFTPSession) -> None:
    """Before a client's first upload: remove what an earlier run left on this server."""
    if pool.swept or not pool.peer:
        return
    pool.swept = True
    try:
        earlier = peek(pool.peer)
    except (SSHPipeError, OSError):
        return  # no state directory: nothing was recorded there either
    for path in earlier:
        await remove_quietly(sftp, path)
    gone = [path for path in earlier if path not in pool.left_temps]
    with contextlib.suppress(SSHPipeError, OSError):
        forget(pool.peer, gone)
    if gone:
        logger.info("removed %d temporary file(s) an earlier upload left", len(gone))


def keep(pool: ChannelPool) -> list[str]:
    """Record the temp files still on the server and say which, in one line; them."""
    left = sorted(pool.left_temps)
    if not left or not pool.peer:
        return left
    with contextlib.suppress(SSHPipeError, OSError):
        record(pool.peer, left)
    listed = left[:SHOWN]
    shown = ", ".join(listed) + (f" and {len(left) - SHOWN} more" if len(left) > SHOWN else "")
    logger.warning(
        "%d temporary file(s) left on the server, removed by the next upload to it: %s",
        len(left),
        shown,
    )
    return left


async def sweep_dir(sftp: SFTPSession, directory: str) -> int:
    """Remove the temp files of ours in a remote ``directory``; how many there were.

    For a tree resumed into its own destination: a run killed outright
    (SIGKILL, a crash of this machine) recorded nothing, and each file it was
    writing left its temp beside it. Only names of our temp shape that a
    listing may hold (``ListingCheck``) are removed.
    """
    check = ListingCheck(directory)
    found: list[str] = []
    async with contextlib.aclosing(read_dir(sftp, directory)) as batches:
        async for batch in batches:
            found += [
                posixpath.join(directory, name)
                for name, attrs in batch
                if check.accept(name) and attrs.kind == "file" and is_temp_name(name)
            ]
    for path in found:
        await remove_quietly(sftp, path)
    if found:
        logger.info("%s: removed %d temporary file(s) an earlier run left", directory, len(found))
    return len(found)


def sweep_local_dir(directory: LocalDir) -> int:
    """``sweep_dir`` for a local directory of a resumed download tree (blocking)."""
    removed = 0
    with directory.descriptor() as fd:
        for name in os.listdir(fd):
            if not is_temp_name(name):
                continue
            with contextlib.suppress(FileNotFoundError, IsADirectoryError, PermissionError):
                os.unlink(name, dir_fd=fd)
                removed += 1
    if removed:
        logger.info("%s: removed %d temporary file(s) an earlier run left", directory, removed)
    return removed
