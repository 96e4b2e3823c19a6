"""Remote file operations on one SFTP session: list, stat, remove, make, rename, copy.

``Client``'s ``ls``/``stat``/``mkdir``... (``sshpipe.client.remoteops``) lend a
channel from the pool and call these (``rmtree``, many requests at once, is
``tree.rmtree``'s). Requests that do not depend on each other go out
together (a STAT with the OPEN it qualifies); listings are pipelined by
``remotefs.read_dir``, and every name one gives passes ``ListingCheck``
(never ``.``/``..``, never a ``/``).

Failures come back as the status's ``RemoteError`` class (``core.status``);
where SFTP v3 has no code for what went wrong (a directory where a file was
expected, an existing target), the path is looked at after the failure to
name it, which costs a round trip only when something failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath

from ..core import codec
from ..core.checkfile import CheckFile, HashSpec, choose_check_file, offered_algorithms
from ..core.errors import (
    HashUnavailable,
    RemoteError,
    RemoteExists,
    RemoteIsADirectory,
    RemoteNotFound,
    SSHPipeError,
)
from ..core.untrusted import ListingCheck, command_timeout
from .checkfile import remote_check_file
from .remotefs import Listing, read_dir
from .remotehash import Unreadable, remote_sha256
from .remoteplace import (
    Landing,
    discard_temp,
    keep_existing_mode,
    remote_temp_name,
    remove_quietly,
    rename_into_place,
    rename_proven,
    replaced_by,
    temp_beside,
)
from .replies import quiet
from .sftp import SFTPSession


def join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}" if directory.rstrip("/") else f"/{name}"


async def listing(sftp: SFTPSession, path: str) -> Listing:
    """The entries of directory ``path`` (``.``/``..`` left out), as its listing gave them.

    Raises:
        UnsafePath: a name that is not one plain component, or repeated.
        RemoteError: ``path`` cannot be listed (not a directory: "not a directory").
    """
    check = ListingCheck(path)
    entries: Listing = []
    try:
        async with contextlib.aclosing(read_dir(sftp, path)) as batches:
            async for batch in batches:
                entries += [(name, attrs) for name, attrs in batch if check.accept(name)]
    except RemoteError as exc:
        raise await _explained(sftp, path, exc, want="directory") from exc
    return entries


async def stat(sftp: SFTPSession, path: str, *, follow: bool) -> codec.Attrs:
    return await (sftp.stat(path) if follow else sftp.lstat(path))


async def remove(sftp: SFTPSession, path: str) -> None:
    """REMOVE a file or a link (never what it points to).

    Raises:
        RemoteIsADirectory: ``path`` is a directory (``rmdir``/``rmtree`` it).
    """
    try:
        await sftp.remove(path)
    except RemoteError as exc:
        raise await _explained(sftp, path, exc, want="file") from exc


async def rmdir(sftp: SFTPSession, path: str) -> None:
    name = codec.wire(path)
    reply = await sftp.call(lambda rid: codec.encode_path_request(codec.FXP_RMDIR, rid, name))
    sftp.check_status(reply, path)


async def mkdir(sftp: SFTPSession, path: str, *, parents: bool, exist_ok: bool, mode: int) -> None:
    """MKDIR ``path`` (and, with ``parents``, the missing directories above it).

    Raises:
        RemoteExists: something is there (a directory too, unless ``exist_ok``).
        RemoteNotFound: the parent is missing and ``parents`` is False.
    """
    try:
        await sftp.mkdir(path, codec.Attrs(permissions=mode & 0o7777))
        return
    except RemoteNotFound:
        parent = posixpath.dirname(path.rstrip("/"))
        if not parents or parent in ("", path):
            raise
        await mkdir(sftp, parent, parents=True, exist_ok=True, mode=mode)
        # The parent is there now; one made meanwhile by another client too.
        await mkdir(sftp, path, parents=False, exist_ok=exist_ok, mode=mode)
    except RemoteError as exc:
        # EEXIST has no SFTP v3 code (a bare FAILURE, or PERMISSION_DENIED on
        # some servers): what is there says whether it was that.
        there = await _attrs_or_none(sftp, path)
        if there is None:
            raise
        if not (exist_ok and there.is_dir()):
            raise RemoteExists(path, "already exists", status=exc.status) from exc


async def rename(sftp: SFTPSession, src: str, dst: str, *, overwrite: bool) -> None:
    """Rename ``src`` to ``dst``.

    Without ``overwrite`` an existing ``dst`` is never replaced: it is looked
    for first (servers differ on whether a plain RENAME replaces), and a
    RENAME refused because one appeared meanwhile says so. With ``overwrite``,
    posix-rename@openssh.com replaces atomically where offered; elsewhere the
    old ``dst`` (a file or link; a directory is refused) is moved aside to a
    temporary name, ``src`` renamed in, and the old one removed, or moved
    back if the rename failed: ``dst`` is missing for a moment, never lost.

    Each RENAME's OK is checked (``remoteplace.rename_proven``): ``src`` gone,
    ``dst`` not the file it replaced.

    Raises:
        RemoteExists: ``dst`` exists and ``overwrite`` is False.
        RemoteNotFound: ``src`` is missing.
        ProtocolError: the server said it renamed, and it did not.
    """
    old, new = codec.wire(src), codec.wire(dst)
    if overwrite and "posix-rename@openssh.com" in sftp.extensions:
        await rename_proven(sftp, src, dst, lambda rid: codec.encode_posix_rename(rid, old, new))
        return
    there = await _attrs_or_none(sftp, dst, follow=False)
    if there is not None and not overwrite:
        raise RemoteExists(dst, "already exists (rename with overwrite=True to replace it)")
    if there is not None and there.is_dir():
        raise RemoteIsADirectory(dst, "is a directory: only posix-rename replaces one")
    # Not in the ledger until ``src`` has taken its place: until then the old
    # file under this name is the only copy of it, and no sweep may remove it.
    aside = temp_beside(dst) if there is not None else None
    if aside is not None:
        await _plain_rename(sftp, dst, aside)
    try:
        await _plain_rename(sftp, src, dst)
    except BaseException:
        if aside is not None:
            with contextlib.suppress(SSHPipeError):
                await _plain_rename(sftp, aside, dst)
        raise
    if aside is not None:
        sftp.temps.adopt(aside)
        await remove_quietly(sftp, aside)


async def _plain_rename(sftp: SFTPSession, src: str, dst: str) -> None:
    old, new = codec.wire(src), codec.wire(dst)
    try:
        await rename_proven(sftp, src, dst, lambda rid: codec.encode_rename(rid, old, new))
    except RemoteError as exc:
        if (
            exc.status not in (None, codec.FX_NO_SUCH_FILE)
            and await _attrs_or_none(sftp, dst, follow=False) is not None
        ):
            raise RemoteExists(dst, "already exists", status=exc.status) from exc
        raise


async def copy_data(sftp: SFTPSession, src: str, dst: str, size: int, mode: int) -> None:
    """Copy ``src`` to ``dst`` inside the server with the copy-data extension.

    Written under a temporary name and renamed over ``dst`` once complete (as
    an upload lands: ``remoteplace``), so a failure leaves no half file; the
    copy has ``mode``, or the mode of the file it replaces.
    ``size``: what STAT said of ``src``; the server's answer may take as long
    as copying that many bytes.

    Raises:
        RemoteError: the server refused (``status`` FX_OP_UNSUPPORTED: it
            listed copy-data but does not do it).
    """
    temp = remote_temp_name(sftp, dst)
    existing = sftp.stat_request(dst)  # a file replaced keeps its mode (as an upload's)
    existing.add_done_callback(quiet)
    source = await sftp.open(src, codec.FXF_READ)
    try:
        flags = codec.FXF_WRITE | codec.FXF_CREAT | codec.FXF_EXCL
        target = await sftp.open(temp, flags, codec.Attrs(permissions=mode & 0o777))
        try:
            kept = await keep_existing_mode(sftp, target, existing, mode & 0o777)
            reply = await sftp.call(
                lambda rid: codec.encode_copy_data(rid, source, 0, 0, target, 0),
                slow=command_timeout(0.0, size),
            )
        except BaseException:
            if sftp.broken is None:
                sftp.close_handle_soon(target, temp)
            raise
        # Awaited before the rename: a server may only have it all once it is closed.
        await sftp.close_handle(target, temp)
        sftp.check_status(reply, src)
        if kept is not None:
            sftp.check_status(await kept, dst)
        await rename_into_place(sftp, temp, dst, Landing(size, await replaced_by(existing)))
    except BaseException as exc:  # cancelled, it leaves at once: the pool settles the REMOVE
        cancelled = isinstance(exc, asyncio.CancelledError)
        await discard_temp(sftp.temps, [sftp], temp, at_once=cancelled)
        raise
    finally:
        if sftp.broken is None:
            sftp.close_handle_soon(source, src)


# -- what failed, named -------------------------------------------------------------


async def _attrs_or_none(
    sftp: SFTPSession, path: str, *, follow: bool = True
) -> codec.Attrs | None:
    try:
        return await stat(sftp, path, follow=follow)
    except RemoteError:
        return None


async def _explained(sftp: SFTPSession, path: str, exc: RemoteError, *, want: str) -> RemoteError:
    """``exc``, or the error SFTP v3 has no code for: a file or directory where the other
    was wanted (most servers answer a bare failure, OpenSSH "no such file" for a file)."""
    there = await _attrs_or_none(sftp, path, follow=want == "directory")
    if there is None:
        return exc
    if want == "file" and there.is_dir():
        return RemoteIsADirectory(path, "is a directory", status=exc.status)
    if want == "directory" and not there.is_dir():
        return RemoteError(path, "not a directory", status=exc.status)
    return exc


# -- checksum -----------------------------------------------------------------------


async def checksum(sftp: SFTPSession, path: str, algorithm: str) -> str:
    """The server's ``algorithm`` hash of file ``path``, hex (see ``Client.checksum``).

    The same two ways ``--verify`` asks a server for a hash: its ``sha256sum``
    (``remotehash``), then its check-file (``checkfile``), whole file in one hash.

    Raises:
        HashUnavailable: neither gave one.
    """
    attrs = await sftp.stat(path)
    if attrs.is_dir():
        raise RemoteIsADirectory(path, "is a directory: a checksum is of a file")
    size = attrs.size or 0
    found = await remote_sha256(sftp, path, size) if algorithm == "sha256" else None
    if isinstance(found, str):
        return found
    check = _check_file_for(sftp, algorithm)
    if check is not None and (digest := await remote_check_file(sftp, path, check, size)):
        return digest.hex()
    how = "no sha256sum, " if algorithm == "sha256" else ""
    if isinstance(found, Unreadable):
        how = "a sha256sum that printed no hash that can be read, "
    raise HashUnavailable(path, f"the server has {how}no check-file for {algorithm}")


def _check_file_for(sftp: SFTPSession, algorithm: str) -> CheckFile | None:
    """How to ask this server's check-file for one ``algorithm`` hash of a whole file."""
    chosen = choose_check_file(sftp.extensions, sftp.profile.software)
    if chosen is None:
        return None
    listed = offered_algorithms(sftp.extensions.get(chosen.request, b""))
    if listed is not None and algorithm not in listed:
        return None  # it says which it has (None: it does not say, so it is asked)
    return CheckFile(chosen.request, HashSpec(algorithm))
