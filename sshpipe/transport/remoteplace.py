"""Where an upload lands on the server: its target, its temporary name, the rename into place.

The rename is the commit, so its answer is not taken on trust: a server that
says OK and did nothing (or something else) would leave the user with no file
and a success. ``rename_into_place`` asks for the outcome with the rename:
the temporary name must be gone and the destination there, of the size sent.
Without ``replace`` the commit itself refuses an existing destination (a
look first would lose to a file created between the look and the rename).

Each temporary name is entered in the session's ``temps`` (the client's
ledger, ``durability.ledger``) before its OPEN goes out, and leaves it once
renamed or removed; ``discard_temp`` is the one way an upload that will not
commit gives its temporary file up, and it never raises over the error that
ended the upload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import posixpath
import secrets
from collections.abc import Sequence

from .._errors import (
    ConnectionBroken,
    ProtocolError,
    RemoteError,
    RemoteExists,
    RemoteIsADirectory,
    RemoteNotFound,
    SSHPipeError,
)
from ..core import codec
from ..core.tempbook import TempBook
from ..core.tempnames import beside, temp_name
from ..core.untrusted import kept_mode
from .replies import quiet
from .sftp import SFTPSession

logger = logging.getLogger(__name__)


def remote_temp_name(sftp: SFTPSession, remote: str) -> str:
    """A new temporary name beside ``remote``, entered in ``sftp.temps`` before its OPEN."""
    temp = temp_beside(remote)
    sftp.temps.add(temp)
    return temp


def temp_beside(remote: str) -> str:
    """``.NAME.sshpipe-XXXXXX.partial`` beside ``remote`` (within NAME_MAX), not entered."""
    return beside(remote, temp_name(posixpath.basename(remote), secrets.token_hex(3)))


async def resolve_remote_target(sftp: SFTPSession, remote: str, name: str | None) -> str:
    """Where an upload lands: ``remote`` itself, or ``remote/name`` if it is a directory (scp)."""
    return await landing_of(sftp.stat_request(remote), remote, name)


async def landing_of(stat: asyncio.Future[codec.Reply], remote: str, name: str | None) -> str:
    """``resolve_remote_target`` from a STAT of ``remote`` already sent.

    Raises:
        RemoteIsADirectory: ``remote`` is a directory and there is no ``name``.
    """
    try:
        reply = await asyncio.shield(stat)
    except SSHPipeError:
        return remote  # the session broke: the open will say so
    if not (isinstance(reply, codec.AttrsReply) and reply.attrs.is_dir()):
        return remote  # missing (the usual case) or unreadable: the open will say why
    if name is None:
        raise RemoteIsADirectory(remote, "is a directory")
    return f"{remote.rstrip('/')}/{name}"


async def rename_into_place(
    sftp: SFTPSession, temp: str, remote: str, size: int, *, replace: bool = True
) -> None:
    """``rename_checked``, and ``temp`` out of the ledger once gone (doubted if the
    answer was lost with the connection: the rename may have been done)."""
    try:
        await rename_checked(sftp, temp, remote, size, replace=replace)
    except ConnectionBroken:
        sftp.temps.doubt(temp)
        raise
    sftp.temps.gone(temp)


async def rename_checked(
    sftp: SFTPSession, temp: str, remote: str, size: int, *, replace: bool = True
) -> None:
    """Rename ``temp`` over ``remote`` and check it happened (``size`` bytes are there).

    The LSTAT of ``remote`` that checks it goes out with the RENAME: a server
    that answers in order (OpenSSH's and asyncssh's do) costs no round trip
    more. One that works on requests in parallel may answer it before
    renaming; what is there is then asked again after its answer, the
    temporary name too. ``replace=False``: ``place_new``.

    Raises:
        RemoteExists: ``replace`` is False and something is at ``remote``.
        RemoteError: the server refused the rename.
        ProtocolError: it said the rename was done, and it was not.
    """
    if not replace:
        await place_new(sftp, temp, remote)
        problem = _problem(await _lstat(sftp, remote), size)
        if problem is not None:
            raise ProtocolError(f"{remote}: the server said it placed {temp} there, but {problem}")
        return
    if "posix-rename@openssh.com" in sftp.extensions:
        renamed = sftp.request(
            lambda rid: codec.encode_posix_rename(rid, codec.wire(temp), codec.wire(remote))
        )
    else:
        # Plain SFTP v3 RENAME fails when the target exists (filexfer-02 §6.5), so
        # the old file is removed first: a crash in between leaves only the temp.
        with contextlib.suppress(SSHPipeError):
            await sftp.remove(remote)
        renamed = sftp.request(
            lambda rid: codec.encode_rename(rid, codec.wire(temp), codec.wire(remote))
        )
    landed = _lstat(sftp, remote)
    try:
        sftp.check_status(await renamed, remote)
    except RemoteError:
        # A rename onto a directory comes back as FAILURE from OpenSSH's server:
        # the LSTAT sent with it says what that means.
        reply: codec.Reply | None = None
        with contextlib.suppress(SSHPipeError):
            reply = await landed
        if isinstance(reply, codec.AttrsReply) and reply.attrs.kind == "dir":
            raise RemoteIsADirectory(remote, "is a directory") from None
        raise
    except BaseException:
        landed.add_done_callback(quiet)
        raise
    if _problem(await landed, size) is None:
        return
    problem = await _outcome(sftp, temp, remote, size)
    if problem is not None:
        raise ProtocolError(f"{remote}: the server said it renamed {temp} there, but {problem}")


async def refuse_existing(stat: asyncio.Future[codec.Reply], remote: str) -> None:
    """RemoteExists if the STAT of ``remote`` found something (an early look only)."""
    try:
        reply = await asyncio.shield(stat)
    except SSHPipeError:
        return  # the session broke: the writes will say so
    if isinstance(reply, codec.AttrsReply):
        raise RemoteExists(remote, "already exists")


async def place_new(sftp: SFTPSession, temp: str, remote: str) -> None:
    """Give ``temp`` the name ``remote`` only if nothing has it, decided by the server.

    hardlink@openssh.com is link(2), which fails if ``remote`` exists; the
    temporary name is removed after it. Else a plain RENAME, which
    filexfer-02 §6.5 says fails when the target exists (OpenSSH's is
    link+unlink; asyncssh's, ProFTPD's and Green End's refuse too). A server
    with posix-rename has two renames, so its plain one is the spec's; one
    with neither extension may have only rename(2), which replaces: there
    the look comes first, and a file created since can still be lost.

    Raises:
        RemoteExists: something is at ``remote``.
    """
    old, new = codec.wire(temp), codec.wire(remote)
    if "hardlink@openssh.com" in sftp.extensions:
        reply = await sftp.call(lambda rid: codec.encode_hardlink(rid, old, new))
        if isinstance(reply, codec.Status) and reply.code == codec.FX_OK:
            await remove_quietly(sftp, temp)
            return
        await _refuse_if_there(sftp, remote, reply)
        # Nothing there: a file system without hard links. The RENAME decides.
    elif "posix-rename@openssh.com" not in sftp.extensions:
        logger.info("%s: no hardlink or posix-rename: looked for it before the rename", remote)
        if await exists(sftp, remote):
            raise RemoteExists(remote, "already exists")
    reply = await sftp.call(lambda rid: codec.encode_rename(rid, old, new))
    if not (isinstance(reply, codec.Status) and reply.code == codec.FX_OK):
        await _refuse_if_there(sftp, remote, reply)
    sftp.check_status(reply, remote)


async def _refuse_if_there(sftp: SFTPSession, remote: str, reply: codec.Reply) -> None:
    """A refused link or rename: RemoteExists if that is why (servers say FAILURE)."""
    if await exists(sftp, remote):
        status = reply.code if isinstance(reply, codec.Status) else None
        raise RemoteExists(remote, "already exists", status=status)


async def check_landed(sftp: SFTPSession, temp: str, remote: str, size: int) -> bool:
    """After a reconnect: whether a rename cut off with its connection was done.

    False: ``temp`` is still there (rename it again); unless ``remote`` is
    a hard link to it (``place_new`` cut before its unlink): the temp name
    is then removed, and that is done.

    Raises:
        ProtocolError: ``temp`` is gone and ``remote`` is not what was sent.
    """
    problem = await _outcome(sftp, temp, remote, size)
    if problem == _TEMP_THERE:
        if not await _linked(sftp, temp, remote):
            return False
        # place_new's hard link was made and the break came before its unlink.
        await remove_quietly(sftp, temp)
        return True
    sftp.temps.gone(temp)  # the LSTAT found no temporary file
    if problem is not None:
        raise ProtocolError(f"{remote}: the upload's temporary file is gone, but {problem}")
    return True


async def _linked(sftp: SFTPSession, temp: str, remote: str) -> bool:
    """Whether ``remote`` is a hard link to ``temp`` (one file under two names).

    SFTP shows no inode numbers, and a file someone else put at ``remote``
    may match size, mode and times to the second. So one name's mtime is
    changed: only the same file shows it under the other. It is put back.
    False when that cannot be told (no hardlink extension, a refused SETSTAT).
    """
    if "hardlink@openssh.com" not in sftp.extensions:
        return False
    left, there = _lstat(sftp, temp), _lstat(sftp, remote)
    there.add_done_callback(quiet)  # if the other fails first, nobody reads this one
    mine, theirs = await left, await there
    if not (isinstance(mine, codec.AttrsReply) and isinstance(theirs, codec.AttrsReply)):
        return False
    ours = mine.attrs
    if ours.kind != "file" or ours.atime is None or ours.mtime is None or ours != theirs.attrs:
        return False
    marked = ours.mtime ^ 1
    try:
        await sftp.setstat(temp, codec.Attrs(atime=ours.atime, mtime=marked))
    except RemoteError:
        return False
    try:
        seen = await _lstat(sftp, remote)
    finally:
        with contextlib.suppress(RemoteError):
            await sftp.setstat(temp, codec.Attrs(atime=ours.atime, mtime=ours.mtime))
    return isinstance(seen, codec.AttrsReply) and seen.attrs.mtime == marked


_TEMP_THERE = "its temporary file is still there"


async def _outcome(sftp: SFTPSession, temp: str, remote: str, size: int) -> str | None:
    """None if ``temp`` is gone and ``remote`` has ``size`` bytes; else what is wrong."""
    there, left = _lstat(sftp, remote), _lstat(sftp, temp)
    there.add_done_callback(quiet)  # if the other fails first, nobody reads this one
    if isinstance(await left, codec.AttrsReply):
        return _TEMP_THERE
    return _problem(await there, size)


def _lstat(sftp: SFTPSession, path: str) -> asyncio.Future[codec.Reply]:
    name = codec.wire(path)
    return sftp.request(lambda rid: codec.encode_path_request(codec.FXP_LSTAT, rid, name))


def _problem(reply: codec.Reply, size: int) -> str | None:
    """What is wrong with the destination an LSTAT found, if anything."""
    if not isinstance(reply, codec.AttrsReply):
        return "there is no file there"
    attrs = reply.attrs
    if attrs.kind != "file":
        return f"what is there is a {attrs.kind}"
    if attrs.size is not None and attrs.size != size:
        return f"the file there has {attrs.size} bytes, not {size}"
    return None


async def keep_existing_mode(
    sftp: SFTPSession, handle: bytes, existing: asyncio.Future[codec.Reply], mode: int
) -> asyncio.Future[codec.Reply] | None:
    """Give the temporary file just opened the owner and mode of the file it will replace.

    ``existing``: the STAT of the destination, sent before the OPEN (so, on a
    server that answers in order, already answered). The FSETSTATs go out now,
    ahead of the writes: the bytes are never readable under a looser mode than
    the old file had. The owner is asked for quietly (only root, or the owner
    keeping a group of theirs, may set it); the mode's answer is returned, to be
    checked before the rename, or None when the mode needs no change.
    """
    try:
        reply = await asyncio.shield(existing)
    except SSHPipeError:
        return None  # the session broke: the writes will say so
    if not isinstance(reply, codec.AttrsReply):
        return None  # nothing there (the usual case): the OPEN's mode stands
    attrs = reply.attrs
    if attrs.kind == "file" and attrs.uid is not None and attrs.gid is not None:
        owner = codec.Attrs(uid=attrs.uid, gid=attrs.gid)
        _fsetstat(sftp, handle, owner).add_done_callback(quiet)
    wanted = kept_mode(attrs, mode)
    if wanted is None:
        return None
    fixed = _fsetstat(sftp, handle, codec.Attrs(permissions=wanted))
    fixed.add_done_callback(quiet)  # if the upload fails first, nobody reads it
    return fixed


def _fsetstat(sftp: SFTPSession, handle: bytes, attrs: codec.Attrs) -> asyncio.Future[codec.Reply]:
    return sftp.request(
        lambda rid: codec.encode_handle_attrs_request(codec.FXP_FSETSTAT, rid, handle, attrs)
    )


def named(exc: RemoteError, remote: str) -> RemoteError:
    """The same error naming the path the user asked for, not our temporary one."""
    return type(exc)(remote, exc.reason, offset=exc.offset, status=exc.status)


async def exists(sftp: SFTPSession, path: str) -> bool:
    """Whether anything is at ``path`` on the server (a symlink is not followed)."""
    try:
        await sftp.lstat(path)
    except RemoteNotFound:
        return False
    return True


async def remove_quietly(sftp: SFTPSession, path: str) -> None:
    """Remove ``path`` if the server can; what it says goes to ``sftp.temps``.

    One of our temp files it cannot remove stays there, for the client to
    report and the next upload to sweep. Never raises but CancelledError.
    """
    if sftp.broken is not None:
        return  # nothing can be sent: it stays recorded as it is
    try:
        await sftp.remove(path)
    except RemoteNotFound:
        pass
    except RemoteError:
        return  # refused: still there
    except SSHPipeError:
        sftp.temps.doubt(path)  # the REMOVE went out and its answer was lost
        return
    sftp.temps.gone(path)


def remove_soon(sftp: SFTPSession, path: str) -> None:
    """``remove_quietly`` without waiting for the answer (a cancelled upload's temp file).

    On a thin link the REMOVE queues behind the WRITEs already sent (seconds of
    them). The session owes the answer, so the pool lets it settle before it is
    used again, and ``aclose`` waits for it; until the server says the file is
    gone it stays in ``sftp.temps``.
    """
    if sftp.broken is not None:
        return
    sftp.unsettled = True
    temps = sftp.temps

    def answered(future: asyncio.Future[codec.Reply]) -> None:
        quiet(future)
        if future.cancelled() or future.exception() is not None:
            temps.doubt(path)
            return
        reply = future.result()
        if isinstance(reply, codec.Status) and reply.code in (codec.FX_OK, codec.FX_NO_SUCH_FILE):
            temps.gone(path)

    with contextlib.suppress(SSHPipeError):  # the session broke: nothing was sent
        sftp.request(
            lambda rid: codec.encode_path_request(codec.FXP_REMOVE, rid, codec.wire(path))
        ).add_done_callback(answered)


async def discard_temp(
    temps: TempBook, channels: Sequence[SFTPSession], temp: str, *, at_once: bool
) -> None:
    """Give up ``temp``, the temporary file of an upload that will not take its name.

    Nothing is sent when nothing was made (its OPEN was refused, or never went
    out): its entry closes. Else it is removed on the first of ``channels``
    still up (put the one its OPEN went on first: it answers in order); with
    none, it stays in ``temps``, reported when the client closes and swept by
    the next upload to the server. ``at_once`` (a cancelled upload): the
    REMOVE's answer is not waited for (``remove_soon``). Never raises but
    CancelledError: a clean-up must not hide the error that called for it.
    """
    if not temps.settle(temp):
        return
    live = [channel for channel in channels if channel.broken is None]
    if not live:
        return
    if at_once:
        remove_soon(live[0], temp)
    else:
        await remove_quietly(live[0], temp)
