"""An in-process SFTP server that answers ``check-file`` and runs no command.

The servers that have check-file (ProFTPD's mod_sftp, paramiko) refuse
every exec, so ``--verify`` cannot run ``sha256sum`` on them; asyncssh's
own SFTP server has no check-file. This one is asyncssh's, with check-file
added, chrooted at the served root, and refuses exec and shell requests.
``advertised`` chooses whose dialect it speaks:

- "1" (ProFTPD): ``check-file-name`` and ``check-file-handle``; the reply is
  the algorithm, then the raw hashes.
- a list such as "md5,sha1" (paramiko): only ``check-file``, on a handle;
  the reply puts ``"check-file"`` before the algorithm.

It hashes what is on disk, block by block as asked, or (``lies``) flips a
byte of the first hash. asyncssh dispatches an extended request by its name
through its server handler's private ``_packet_handlers`` table and replies
as ``_return_types`` says, so the session here runs a subclass of that
handler (``SFTPServerHandler``): these private names stay in this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import asyncssh
from asyncssh.constants import FXP_EXTENDED_REPLY
from asyncssh.packet import SSHPacket, String
from asyncssh.sftp import SFTPServerHandler
from asyncssh.stream import SSHReader, SSHServerStreamSession, SSHWriter

from .embedded import EmbeddedServer, embedded_server

__all__ = ["CheckFileOptions", "check_file_server"]

ALL_ALGORITHMS = ("md5", "sha1", "sha224", "sha256", "sha384", "sha512")


@dataclass
class CheckFileOptions:
    """What the server says and does (shared by every session it serves).

    Attributes:
        advertised: the VERSION data of its ``check-file``: "1" (ProFTPD) or
            a list of algorithms (paramiko's dialect).
        algorithms: what it hashes with: the first of a request's it has.
        lies: each answer's first hash has a byte flipped.
        asked: (request, algorithms, start, length, block) of each request.
    """

    advertised: bytes = b"1"
    algorithms: tuple[str, ...] = ALL_ALGORITHMS
    lies: bool = False
    asked: list[tuple[str, str, int, int, int]] = field(default_factory=list)

    @property
    def requests(self) -> tuple[str, ...]:
        """The request names it answers; others are OP_UNSUPPORTED (as paramiko's are)."""
        if self.advertised == b"1":
            return ("check-file-name", "check-file-handle")
        return ("check-file",)


class _Reply:
    """An EXTENDED_REPLY's data, as asyncssh's handler encodes what a request returned."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def encode(self, sftp_version: int) -> bytes:
        return self.data


ALL_REQUESTS = ("check-file-name", "check-file-handle", "check-file")


async def _answer(request: str, handler: SFTPServerHandler, packet: SSHPacket) -> object:
    assert isinstance(handler, _CheckFileHandler)
    return await handler.check_file(request, packet)


class _CheckFileHandler(SFTPServerHandler):
    def __init__(self, options: CheckFileOptions, *args: Any) -> None:
        super().__init__(*args)
        self._options = options
        self._extensions = [*SFTPServerHandler._extensions, (b"check-file", options.advertised)]

    async def check_file(self, request: str, packet: SSHPacket) -> _Reply:
        options = self._options
        if request not in options.requests:
            raise asyncssh.SFTPOpUnsupported(f"no {request} here")
        target = packet.get_string()
        listed = packet.get_string().decode("ascii", "replace")
        start, length, block = packet.get_uint64(), packet.get_uint64(), packet.get_uint32()
        packet.check_end()
        options.asked.append((request, listed, start, length, block))
        usable = [name for name in listed.split(",") if name in options.algorithms]
        if not usable or 0 < block < 256:
            raise asyncssh.SFTPFailure("no algorithm of those, or a block under 256 bytes")
        if request == "check-file-name":
            data = Path(os.fsdecode(self._server.map_path(target))).read_bytes()
        else:
            file_obj = self._file_handles.get(target)
            if file_obj is None:
                raise asyncssh.SFTPInvalidHandle("no such handle")
            fd = file_obj.fileno()  # type: ignore[attr-defined]
            data = os.pread(fd, os.fstat(fd).st_size, 0)
        end = start + length if length else len(data)
        step = block or max(1, end - start)
        hashes = b"".join(
            hashlib.new(usable[0], data[at : min(at + step, end)]).digest()
            for at in range(start, end, step)
        )
        if options.lies and hashes:
            hashes = bytes([hashes[0] ^ 0xFF]) + hashes[1:]
        head = String("check-file") if request == "check-file" else b""
        return _Reply(head + String(usable[0]) + hashes)

    # asyncssh's tables, with the three names added (its handler looks them up on self).
    _packet_handlers = {  # noqa: RUF012
        **SFTPServerHandler._packet_handlers,
        **{name.encode(): partial(_answer, name) for name in ALL_REQUESTS},
    }
    _return_types = {  # noqa: RUF012
        **SFTPServerHandler._return_types,
        **{name.encode(): FXP_EXTENDED_REPLY for name in ALL_REQUESTS},
    }


class _Session(SSHServerStreamSession[bytes]):
    """A session that serves SFTP through ``_CheckFileHandler`` and nothing else."""

    def __init__(self, options: CheckFileOptions, root: Path) -> None:
        def sftp(chan: Any) -> asyncssh.SFTPServer:
            return asyncssh.SFTPServer(chan, chroot=os.fsencode(root))

        # No session factory: exec and shell requests are refused.
        super().__init__(None, sftp, 3, False)
        self._options = options

    def session_started(self) -> None:
        assert self._chan is not None and self._conn is not None
        server = self._init_sftp_server()
        assert isinstance(server, asyncssh.SFTPServer)
        handler = _CheckFileHandler(
            self._options, server, SSHReader(self, self._chan), SSHWriter(self, self._chan), 3
        )
        self._conn.create_task(handler.run(), handler.logger)


class _Server(asyncssh.SSHServer):
    def __init__(self, options: CheckFileOptions, root: Path) -> None:
        self._options = options
        self._root = root

    def session_requested(self) -> _Session:
        return _Session(self._options, self._root)


@contextlib.asynccontextmanager
async def check_file_server(
    workdir: Path, options: CheckFileOptions
) -> AsyncIterator[EmbeddedServer]:
    """``embedded_server`` serving ``workdir/root`` with check-file, and no command."""
    root = workdir / "root"
    root.mkdir(parents=True, exist_ok=True)

    def factory() -> asyncssh.SSHServer:
        return _Server(options, root)

    async with embedded_server(workdir, root=root, server_factory=factory) as server:
        yield server
