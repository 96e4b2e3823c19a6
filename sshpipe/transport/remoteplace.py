"""Where an upload lands on the server: its target, its temporary name, the rename into place.

The rename is the commit, so its answer is not taken on trust: a server that
says OK and did nothing (or something else) would leave the user with no file
and a success. ``rename_into_place`` asks for the outcome with the rename:
the destination must be a file of the size sent that is not the one it
replaced, and where that does not tell (or anything disagrees) the temporary
name must be gone (``core.identity.rename_problem``). What it replaced is the
STAT sent with the upload's OPEN, and what was written the FSTAT sent before
its CLOSE where a file of that size was there (``Landing``): on a server that
answers in order the proof costs no round trip, and a new file or one of
another size no request more than the LSTAT sent with the RENAME. Where the
two look alike to the second (a re-upload within the second, ``-p`` over a
copy of the same source) the temporary file's mtime is marked first and put
back after. Without ``replace`` the commit itself refuses an existing
destination (a look first would lose to a file created between the look and
the rename).

Each temporary name is entered in the session's ``temps`` (the client's
ledger, ``durability.ledger``) before its OPEN goes out, and leaves it once
renamed or removed; ``discard_temp`` is the one way an upload that will not
commit gives its temporary file up, and it never raises over the error that
ended the upload.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import posixpath
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core import codec
from ..core.errors import (
    ConnectionBroken,
    ProtocolError,
    RemoteError,
    RemoteExists,
    RemoteIsADirectory,
    RemoteNotFound,
    SSHPipeError,
)
from ..core.identity import rename_problem, same_file
from ..core.tempbook import TempBook
from ..core.tempnames import beside, temp_name
from ..core.text import printable
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


@dataclass(slots=True)
class Landing:
    """What proves that an upload's rename put the file written under its final name.

    Attributes:
        size: the bytes written.
        replaced: the destination before the upload (the STAT sent with its
            OPEN); None: nothing was there, or it is not known.
        written: the temporary file once written (an FSTAT sent before its
            CLOSE; with ``-p``, only what is sure: its size and the mtime it
            was given, which no other file shows with every attribute of its
            own); None: not asked, it is looked at if need be.
        restore: the times the temporary file had before it was marked to tell
            it from ``replaced``, put back once the rename is proven.
    """

    size: int
    replaced: codec.Attrs | None = None
    written: codec.Attrs | None = None
    restore: codec.Attrs | None = None


async def replaced_by(stat: asyncio.Future[codec.Reply] | None) -> codec.Attrs | None:
    """What a STAT of the destination sent before the upload found (None: nothing there)."""
    if stat is None:
        return None
    try:
        reply = await asyncio.shield(stat)
    except SSHPipeError:
        return None  # not known: the proof rests on the temporary name being gone
    return reply.attrs if isinstance(reply, codec.AttrsReply) else None


async def rename_into_place(
    sftp: SFTPSession, temp: str, remote: str, landing: Landing, *, replace: bool = True
) -> None:
    """``rename_checked``, and ``temp`` out of the ledger once gone (doubted if the
    answer was lost with the connection: the rename may have been done)."""
    try:
        await rename_checked(sftp, temp, remote, landing, replace=replace)
    except ConnectionBroken:
        sftp.temps.doubt(temp)
        raise
    sftp.temps.gone(temp)


async def rename_checked(
    sftp: SFTPSession, temp: str, remote: str, landing: Landing, *, replace: bool = True
) -> None:
    """Rename ``temp`` over ``remote`` and check it happened (``landing`` says what to see).

    The LSTAT of ``remote`` that checks it (and of ``temp``, where what is
    there cannot tell the two files apart) goes out with the RENAME: a server
    that answers in order (OpenSSH's and asyncssh's do) costs no round trip
    more. One that works on requests in parallel may answer them before
    renaming; both names are then asked again after its answer.
    ``replace=False``: ``place_new``.

    Raises:
        RemoteExists: ``replace`` is False and something is at ``remote``.
        RemoteError: the server refused the rename.
        ProtocolError: it said the rename was done, and it was not.
    """
    await _tell_apart(sftp, temp, landing)
    if not replace:
        await place_new(sftp, temp, remote)
        problem = _judged(*await _look(sftp, temp, remote), landing)
        if problem is not None:
            raise ProtocolError(f"{remote}: the server said it placed {temp} there, but {problem}")
        await _restore(sftp, remote, landing)
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
    there = _lstat(sftp, remote)
    # Where what is there after tells the file written from the one it replaced
    # (the usual case: nothing replaced, another size, another mtime), that is
    # the proof; else the temporary name must be gone too.
    left = None if _told_apart(landing) else _lstat(sftp, temp)
    if left is not None:
        left.add_done_callback(quiet)  # read only once the rename and ``there`` are answered
    try:
        sftp.check_status(await renamed, remote)
    except RemoteError:
        # A rename onto a directory comes back as FAILURE from OpenSSH's server:
        # the LSTAT sent with it says what that means.
        reply: codec.Reply | None = None
        with contextlib.suppress(SSHPipeError):
            reply = await there
        if isinstance(reply, codec.AttrsReply) and reply.attrs.kind == "dir":
            raise RemoteIsADirectory(remote, "is a directory") from None
        raise
    except BaseException:
        there.add_done_callback(quiet)
        raise
    there.add_done_callback(quiet)
    seen = _attrs(await there), left is not None and isinstance(await left, codec.AttrsReply)
    if _judged(*seen, landing) is not None:
        # Answered before the rename was done, maybe: both asked again now that it is.
        problem = _judged(*await _look(sftp, temp, remote), landing)
        if problem is not None:
            raise ProtocolError(f"{remote}: the server said it renamed {temp} there, but {problem}")
    await _restore(sftp, remote, landing)


async def rename_proven(
    sftp: SFTPSession, src: str, dst: str, request: Callable[[int], bytes]
) -> None:
    """Send ``request`` (a RENAME of ``src`` to ``dst``, of either kind) and check it was done.

    What a user's rename must show, as an upload's: ``src`` gone, and ``dst``
    not still the file it replaced. Both names are looked at just before and
    just after, all sent with the RENAME (no round trip more on a server that
    answers in order); a server that answers out of order is asked again.

    Raises:
        RemoteError: the server refused it (naming ``src``).
        ProtocolError: it said the rename was done, and it was not.
    """
    moved, replaced = _lstat(sftp, src), _lstat(sftp, dst)
    renamed = sftp.request(request)
    there, left = _lstat(sftp, dst), _lstat(sftp, src)
    for future in (moved, replaced, there, left):
        future.add_done_callback(quiet)  # read below only once the RENAME is answered OK
    sftp.check_status(await renamed, src)
    was, gone = _attrs(await moved), _attrs(await replaced)
    if was is not None and gone is not None and same_file(was, gone):
        # One file under both names (hard links: rename(2) leaves both and says
        # OK), or twins to the second: nothing after can tell, and nothing is marked.
        return

    def judged(seen: codec.Attrs | None, still: bool) -> str | None:
        return rename_problem(seen, left=still, moved=was, replaced=gone, old_name=src)

    if judged(_attrs(await there), isinstance(await left, codec.AttrsReply)) is None:
        return
    problem = judged(*await _look(sftp, src, dst))
    if problem is not None:
        raise ProtocolError(f"{dst}: the server said it renamed {src} there, but {problem}")


async def _tell_apart(sftp: SFTPSession, temp: str, landing: Landing) -> None:
    """Make the file written look unlike the one it replaces, where nothing else shows it.

    SFTP shows no inode: a file of the same size, mode, owner and mtime (to the
    second) at the destination is what a rename that removed the temporary
    name and placed nothing would leave there too. Such a twin is rare (a
    re-upload within the second; ``-p`` over an earlier copy of the same
    source), and only then does this cost a round trip (two with the times
    put back): the temporary file's mtime is moved by a second, so only it
    can show that mtime under the final name. Where that cannot be done (no
    times shown, a SETSTAT refused) the proof rests on the temporary name
    being gone.
    """
    replaced = landing.replaced
    if landing.restore is not None or _told_apart(landing) or sftp.caps.setstat_off:
        return  # marked already (a retry), nothing to be taken for, or no SETSTAT
    assert replaced is not None
    if landing.written is None:  # not asked as it was written (a worker-shared upload)
        try:
            landing.written = await sftp.lstat(temp)
        except RemoteError:
            return  # gone or unreadable: the rename says what is wrong with it
    written = landing.written
    if not same_file(written, replaced):
        return
    if written.atime is None or written.mtime is None:
        logger.info("%s: no times shown to tell it from the file it replaces", printable(temp))
        return
    marked = written.mtime ^ 1
    try:
        await sftp.setstat(temp, codec.Attrs(atime=written.atime, mtime=marked))
    except RemoteError as exc:
        logger.info("%s: its mtime cannot be marked: %s", printable(temp), exc)
        return
    landing.restore = codec.Attrs(atime=written.atime, mtime=written.mtime)
    landing.written = dataclasses.replace(written, mtime=marked)


def _told_apart(landing: Landing) -> bool:
    """Whether the file written and the one replaced show different attributes."""
    replaced, written = landing.replaced, landing.written
    if replaced is None or replaced.kind != "file" or replaced.size != landing.size:
        return True
    return written is not None and not same_file(written, replaced)


def may_be_alike(stat: asyncio.Future[codec.Reply] | None, size: int) -> bool:
    """Whether the destination a STAT found may look like an upload of ``size`` bytes.

    Only then is the file written asked for its attributes (an FSTAT before
    its CLOSE), to tell the two apart after the rename: a new file, or one of
    another size, costs no request more. Not answered yet (a server that
    answers out of order): it may.
    """
    if stat is None:
        return False
    if not stat.done():
        return True
    if stat.cancelled() or stat.exception() is not None:
        return False
    reply = stat.result()
    return (
        isinstance(reply, codec.AttrsReply)
        and reply.attrs.kind == "file"
        and reply.attrs.size == size
    )


async def _restore(sftp: SFTPSession, remote: str, landing: Landing) -> None:
    """Put back the times ``_tell_apart`` moved, now on the file under its final name."""
    if landing.restore is not None:
        await sftp.set_attrs(remote, landing.restore)  # a refusal is learned, said once
        landing.restore = None


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


async def check_landed(sftp: SFTPSession, temp: str, remote: str, landing: Landing) -> bool:
    """After a reconnect: whether a rename cut off with its connection was done.

    False: ``temp`` is still there (rename it again); unless ``remote`` is
    a hard link to it (``place_new`` cut before its unlink): the temp name
    is then removed, and that is done.

    Raises:
        ProtocolError: ``temp`` is gone and ``remote`` is not what was sent.
    """
    there, left = await _look(sftp, temp, remote)
    if left:
        if not await _linked(sftp, temp, remote):
            return False
        # place_new's hard link was made and the break came before its unlink.
        await remove_quietly(sftp, temp)
    else:
        sftp.temps.gone(temp)  # the LSTAT found no temporary file
        problem = _judged(there, False, landing)
        if problem is not None:
            raise ProtocolError(f"{remote}: the upload's temporary file is gone, but {problem}")
    await _restore(sftp, remote, landing)
    return True


async def _linked(sftp: SFTPSession, temp: str, remote: str) -> bool:
    """Whether ``remote`` is a hard link to ``temp`` (one file under two names).

    SFTP shows no inode numbers, and a file someone else put at ``remote``
    may match size, mode and times to the second. So one name's mtime is
    changed: only the same file shows it under the other. It is put back.
    False when that cannot be told (no hardlink extension, a refused SETSTAT).
    """
    if "hardlink@openssh.com" not in sftp.extensions or sftp.caps.setstat_off:
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


async def _look(sftp: SFTPSession, temp: str, remote: str) -> tuple[codec.Attrs | None, bool]:
    """What ``remote`` names now (None: nothing), and whether ``temp`` still names something."""
    there, left = _lstat(sftp, remote), _lstat(sftp, temp)
    there.add_done_callback(quiet)  # if the other fails first, nobody reads this one
    still = isinstance(await left, codec.AttrsReply)
    return _attrs(await there), still


def _judged(there: codec.Attrs | None, left: bool, landing: Landing) -> str | None:
    return rename_problem(
        there, left=left, moved=landing.written, replaced=landing.replaced, size=landing.size
    )


def _attrs(reply: codec.Reply) -> codec.Attrs | None:
    return reply.attrs if isinstance(reply, codec.AttrsReply) else None


def _lstat(sftp: SFTPSession, path: str) -> asyncio.Future[codec.Reply]:
    name = codec.wire(path)
    return sftp.request(lambda rid: codec.encode_path_request(codec.FXP_LSTAT, rid, name))


async def keep_existing_mode(
    sftp: SFTPSession, handle: bytes, existing: asyncio.Future[codec.Reply], mode: int
) -> asyncio.Future[codec.Reply] | None:
    """Give the temporary file just opened the owner and mode of the file it will replace.

    ``existing``: the STAT of the destination, sent before the OPEN (so, on a
    server that answers in order, already answered). The FSETSTATs go out now,
    ahead of the writes: the bytes are never readable under a looser mode than
    the old file had. The owner is asked for quietly (only root, or the owner
    keeping a group of theirs, may set it); the mode's answer is returned, to be
    checked before the rename (``attrs_taken``), or None when the mode needs no
    change or the server takes no FSETSTAT.
    """
    try:
        reply = await asyncio.shield(existing)
    except SSHPipeError:
        return None  # the session broke: the writes will say so
    if not isinstance(reply, codec.AttrsReply) or sftp.caps.setstat_off:
        return None  # nothing there (the usual case), or no FSETSTAT: the OPEN's mode stands
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


def attrs_taken(sftp: SFTPSession, reply: codec.Reply, remote: str) -> bool:
    """Whether the FSETSTAT of ``keep_existing_mode`` (or ``-p``'s) was done.

    A server that takes none (``SFTPSession.setstat_refused``) leaves the
    file with the OPEN's mode: learned and said once, not a failure.

    Raises:
        RemoteError: any other failure.
    """
    try:
        sftp.check_status(reply, remote)
    except RemoteError as exc:
        if not sftp.setstat_refused(exc):
            raise
        return False
    return True


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
