"""A file's hashes made by the server itself, with its ``check-file`` extension.

``--verify``'s remote hash where the server runs no ``sha256sum``
(``core.checkfile`` says how each server is asked and checks its replies).
By name (ProFTPD) it is one request for the whole file. By handle
(paramiko) the file is opened for reading and its size compared first:
paramiko never finishes a block it cannot read whole, so a shorter file is
not asked. The server reads the file to answer, so each request may take as
long as that read on top of the stall timeout.
"""

from __future__ import annotations

import logging
from functools import partial

from ..core import codec
from ..core.checkfile import (
    CheckFile,
    check_ranges,
    decode_check_file_reply,
    encode_check_file,
    hashes_in,
)
from ..core.errors import ProtocolError, RemoteError
from ..core.untrusted import command_timeout
from .replies import quiet
from .sftp import SFTPSession

logger = logging.getLogger("sshpipe.verify")


async def remote_check_file(
    sftp: SFTPSession, path: str, check: CheckFile, size: int
) -> bytes | None:
    """The server's hashes of ``path`` (``check.spec``'s), or None where it gives none.

    None: it refused (an algorithm it lacks, a file it may not read: any
    failure status), or by handle its file does not have ``size`` bytes. The
    next check (read-back, size) then says what differs.

    Raises:
        ProtocolError: a reply that is not the hashes asked for.
    """
    if not check.by_handle:
        return await _ask(sftp, check, codec.wire(path), size, path)
    stat = sftp.stat_request(path)
    stat.add_done_callback(quiet)
    opened = sftp.open_request(path, codec.FXF_READ)
    try:
        handle = await sftp.handle_from(opened, path)
    except RemoteError as exc:
        logger.debug("%s: no check-file, it cannot be opened: %s", path, exc)
        return None
    try:
        found = await stat
        if not isinstance(found, codec.AttrsReply) or found.attrs.size != size:
            return None
        return await _ask(sftp, check, handle, size, path)
    finally:
        if sftp.broken is None:
            sftp.close_handle_soon(handle, path)


async def _ask(
    sftp: SFTPSession, check: CheckFile, target: bytes, size: int, path: str
) -> bytes | None:
    spec = check.spec
    hashes: list[bytes] = []
    for start, length in check_ranges(size, spec):
        build = partial(_encode, check=check, target=target, start=start, length=length)
        reply = await sftp.call(build, slow=command_timeout(0.0, length or size))
        if isinstance(reply, codec.Status):
            logger.debug("%s: %s refused: %s", path, check.request, reply.message)
            return None
        if not isinstance(reply, codec.ExtendedReply):
            kind = type(reply).__name__
            raise ProtocolError(f"{path}: {check.request} answered with {kind}")
        hashes.append(decode_check_file_reply(reply.payload, spec, hashes_in(length, spec)))
    return b"".join(hashes)


def _encode(request_id: int, *, check: CheckFile, target: bytes, start: int, length: int) -> bytes:
    # Only the algorithm the copy was hashed with: an answer in another could
    # not be compared.
    spec = check.spec
    return encode_check_file(
        request_id, check.request, target, [spec.algorithm], start, length, spec.block
    )
