"""The block a server takes whole, found by trying when it states no limits.

A server without ``limits@openssh.com`` (ProFTPD, Green End, paramiko) would
get 32 KiB requests, the size every server must take: Green End put ran at
43 MB/s that way against 112 with OpenSSH's 255 KiB. One request at the top
block tells: a READ answered whole (or cut at the largest block it covers), a
WRITE acknowledged. A server that refuses it, or drops the channel on it
(Green End kills its session on a 1 MiB WRITE), leaves the floor recorded,
so the retry that follows does not try again. The answer is kept in the
server's ``ServerCaps``: each direction is probed once per client.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..core import codec
from ..core.config import TransferConfig
from ..core.servercaps import FLOOR_BLOCK, PROBE_BLOCKS, probe_next
from ..transport.replies import quiet
from ..transport.sftp import SFTPSession

logger = logging.getLogger("sshpipe.transfer")

PROBE = PROBE_BLOCKS[0]


def needs_probe(config: TransferConfig, sftp: SFTPSession, *, write: bool, size: int) -> bool:
    """Whether a transfer of ``size`` bytes should try the top block first."""
    if config.block_size is not None or sftp.limits is not None or size <= PROBE:
        return False
    if write and config.sequential_writes:
        return False  # the probe's zeros are rewritten from 0: out of order
    if "limits@openssh.com" in sftp.extensions:
        return False  # stated (or still to come): the limits decide
    learned = sftp.caps.write_block if write else sftp.caps.read_block
    return learned is None


async def probe_read(sftp: SFTPSession, handle: bytes, path: str) -> int:
    """The block to read with, from one READ of the top block at offset 0."""
    caps = sftp.caps
    caps.read_block = FLOOR_BLOCK  # what is left if the session dies on it
    reply = await _answer(sftp, lambda rid: codec.encode_read(rid, handle, 0, PROBE))
    returned = reply.length if isinstance(reply, codec.Data) else None
    caps.read_block = probe_next(PROBE, returned)
    logger.debug(
        "%s: READ of %d answered with %s: blocks of %d", sftp.name, PROBE, returned, caps.read_block
    )
    return caps.read_block


async def probe_write(sftp: SFTPSession, handle: bytes, path: str) -> int:
    """The block to write with, from one WRITE of the top block (zeros) at offset 0.

    Only on a file of ours that the upload then writes whole from offset 0
    (its temporary file, longer than the probe): the zeros never survive.
    """
    caps = sftp.caps
    caps.write_block = FLOOR_BLOCK
    zeros = bytes(PROBE)
    reply = await _answer(
        sftp, lambda rid: codec.encode_write_header(rid, handle, 0, PROBE) + zeros
    )
    taken = isinstance(reply, codec.Status) and reply.code == codec.FX_OK
    caps.write_block = PROBE if taken else FLOOR_BLOCK
    logger.debug(
        "%s: WRITE of %d %s: blocks of %d",
        sftp.name,
        PROBE,
        "taken" if taken else "refused",
        caps.write_block,
    )
    return caps.write_block


async def _answer(sftp: SFTPSession, build: Callable[[int], bytes]) -> codec.Reply:
    answer = sftp.request(build)
    answer.add_done_callback(quiet)  # a probe cancelled meanwhile: its late failure is nobody's
    return await answer
