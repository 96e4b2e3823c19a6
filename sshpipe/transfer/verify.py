"""End-to-end checks of a copy before it takes its final name (``TransferConfig.verify``).

What was transferred is hashed while the bytes flow, in file order (a
download's replies come out of order: ``OrderedHash`` holds the early ones,
counted in the flight budget, until the gap before them fills), so the local
side is never read a second time. Which hashes is chosen before the first
byte (``core.checkfile.plan_verify``: one where one serves every check that
may be tried). ``check`` then tries, in order: the server's ``sha256sum``
when it runs commands ("hash-remote"; run by ``transport.remotehash``); its ``check-file`` extension
("hash-remote:<algorithm>": ProFTPD, paramiko); a read-back over SFTP if
asked ("read-back"); else the size ("best"), or for "hash" asked by name
nothing: the copy fails with HashUnavailable. ``verify_copy`` is that for
one finished copy, the one call every single-file path (get, put, and their
worker-shared forms) makes before its commit. A ``sha256sum`` that ran and
printed no hash that can be read (``Unreadable``) fails the check: a hash
that cannot be read is not a match, and never a reason to settle for less.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from ..core.checkfile import SHA256, Hasher, HashSpec, VerifyPlan, choose_check_file, plan_verify
from ..core.config import TransferConfig
from ..core.errors import HashUnavailable, IntegrityError
from ..core.quirks import READ_ONCE_UNVERIFIABLE, read_once_verify
from ..core.reorder import ReorderBuffer
from ..core.servercaps import ServerCaps
from ..core.stats import Verified
from ..local.dirfd import LocalFile, open_regular
from ..local.target import run_blocking
from ..transport.checkfile import remote_check_file
from ..transport.pool import Lease
from ..transport.remotehash import ServerSha256, Unreadable, remote_sha256
from ..transport.sftp import SFTPSession
from .stream import read_back

NO_HASH = "no hash check possible on this server: it runs no sha256sum and offers no check-file"
CHECK_FILE_REFUSED = (
    "no hash check possible on this server: it runs no sha256sum and its check-file refused"
)
logger = logging.getLogger("sshpipe.verify")

Digests = Mapping[HashSpec, bytes]  # the copy's hashes, each as its spec makes them


@dataclass(frozen=True, slots=True)
class RemoteHash:
    """The server's SHA-256 of a path by other means than an exec of its own.

    A tree's shell, kept open: a connection full of channels has no room for
    one more session.

    Attributes:
        of: (path, size) -> its SHA-256 on the server, or None where it cannot
            say (``Unreadable``: it printed something else).
        usable: False once the server is known to have no ``sha256sum``: the
            copy then takes no SHA-256 for it.
    """

    of: Callable[[str, int], Awaitable[ServerSha256]]
    usable: bool = True


def read_once_level(caps: ServerCaps, level: str, shown: str) -> str:
    """The ``--verify`` level a download from a read-once server can have; said once.

    Raises:
        HashUnavailable: naming ``shown``: a hash or a read-back was asked,
            which a file read once cannot have. Said before any file is
            opened, so none is consumed for nothing.
    """
    allowed = read_once_verify(level)
    if allowed is None:
        raise HashUnavailable(shown, READ_ONCE_UNVERIFIABLE)
    if allowed != level and caps.adapt(f"--verify={level} checks the size only"):
        logger.info("--verify=%s checks the size only (read-once server)", level)
    return allowed


def plan_for(
    level: str,
    sftp: SFTPSession,
    remote_hash: RemoteHash | None = None,
    *,
    read_once: bool = False,
) -> VerifyPlan:
    """The checks one copy on ``sftp``'s server will try, chosen before its bytes flow.

    ``read_once``: a download from a read-once server, which can have no
    second read of the file: the size at most (``core.quirks.read_once_verify``).
    """
    if read_once:
        return plan_verify(read_once_verify(level) or "none", None, runs_commands=False)
    runs = remote_hash.usable if remote_hash is not None else sftp.run_command is not None
    return plan_verify(
        level, choose_check_file(sftp.extensions, sftp.profile.software), runs_commands=runs
    )


class OrderedHash:
    """The hashes (one per spec) of pieces given in any order, taken in file order."""

    def __init__(self, specs: Sequence[HashSpec] = (SHA256,)) -> None:
        self._reorder = ReorderBuffer()
        self._hashers = [Hasher(spec) for spec in specs]

    @property
    def buffered(self) -> int:
        """Bytes held until the gap before them fills."""
        return self._reorder.buffered

    def add(self, offset: int, data: bytes) -> None:
        self._reorder.add(offset, data)
        for piece in self._reorder.pop_ready():
            for hasher in self._hashers:
                hasher.update(piece)

    def update(self, data: bytes) -> None:
        """The next bytes in order (an upload reads its file in order)."""
        self.add(self._reorder.delivered, data)

    def digests(self, size: int) -> dict[HashSpec, bytes]:
        """The hashes of the first ``size`` bytes; all of them must have been added."""
        if self._reorder.delivered != size or self._reorder.buffered:
            raise IntegrityError(
                "(in memory)",
                f"hashed {self._reorder.delivered} bytes in order, the file has {size}",
            )
        return {hasher.spec: hasher.digest() for hasher in self._hashers}


def file_digests(
    path: str | os.PathLike[str] | LocalFile, size: int, specs: Sequence[HashSpec]
) -> dict[HashSpec, bytes]:
    """The hashes of a local file's first ``size`` bytes (blocking: run it in a thread).

    For a resumed copy, whose bytes did not all flow through this run. A
    download's file is opened through its directory's descriptor, as every
    file under a destination is (``_localdir``).
    """
    hashers = [Hasher(spec) for spec in specs]
    fd = (
        open_regular(path, write=False)
        if isinstance(path, LocalFile)
        else os.open(path, os.O_RDONLY)
    )
    if fd is None:
        raise FileNotFoundError(errno.ENOENT, "not a regular file", str(path))
    with open(fd, "rb") as file:
        left = size
        while left > 0 and (chunk := file.read(min(left, 1 << 20))):
            for hasher in hashers:
                hasher.update(chunk)
            left -= len(chunk)
    return {hasher.spec: hasher.digest() for hasher in hashers}


async def digests_of(
    streamed: OrderedHash | None,
    path: str | os.PathLike[str] | LocalFile,
    size: int,
    specs: Sequence[HashSpec],
) -> dict[HashSpec, bytes]:
    """The copy's hashes: those taken as the bytes flowed, else read from ``path``.

    A resumed copy's kept bytes never flowed through this run, so it has none.
    No specs (``--verify=size``, nothing to ask a hash of): none to take.
    """
    if streamed is not None:
        return streamed.digests(size)
    if not specs:
        return {}
    return await run_blocking(file_digests, path, size, specs)


async def check(
    sftp: SFTPSession,
    path: str,
    plan: VerifyPlan,
    *,
    size: int,
    digests: Digests,
    remote_sha256: Callable[[], Awaitable[ServerSha256]],
    read_back: Callable[[HashSpec], Awaitable[bytes | None]],
    shown: str,
    stated_size: int | None = None,
) -> Verified:
    """Compare the copy with the server's file at ``path``; the level achieved.

    The one place the order of the checks is kept, for single files and trees.

    Args:
        plan: the checks to try (``plan_for``, before the bytes flowed).
        size, digests: what was transferred, hashed as ``plan.specs`` say.
        remote_sha256: the server's ``sha256sum`` of the file, None where it has none.
        read_back: hashes the server's file as read again over SFTP (None: it
            is longer than the copy).
        shown: the path named in errors (the user's, not a temporary one).
        stated_size: the size the server stated on the open handle (FSTAT),
            checked instead of a STAT by name: a read-once server's file may
            be gone by now, or consumed by the STAT.

    Raises:
        IntegrityError: they differ, or the server's ``sha256sum`` printed no
            hash; HashUnavailable: "hash" was asked and the server could hash
            it in no way.
    """
    if plan.sha256sum:
        theirs = await remote_sha256()
        if isinstance(theirs, Unreadable):
            raise theirs.failure(shown)
        if theirs is not None:
            same(shown, "sha256 (sha256sum on the server)", theirs, digests[SHA256].hex())
            return "hash-remote"
    check_file = plan.check_file
    if check_file is not None:
        if size == 0:
            # No bytes to hash (ProFTPD refuses a start offset at the end of the
            # file): a size of 0 proves what a hash would.
            same(shown, "size", str((await sftp.stat(path)).size), "0")
            return check_file.level
        hashes = await remote_check_file(sftp, path, check_file, size)
        if hashes is not None:
            spec = check_file.spec
            same_hash(shown, "check-file on the server", spec, hashes, digests[spec])
            return check_file.level
    if plan.level == "read-back":
        spec = plan.specs[0]
        same_hash(shown, "read back", spec, await read_back(spec), digests[spec])
        return "read-back"
    if plan.level == "hash":  # asked by name: a size is not what was asked ("best" is)
        raise HashUnavailable(shown, NO_HASH if check_file is None else CHECK_FILE_REFUSED)
    stated = stated_size if stated_size is not None else (await sftp.stat(path)).size
    same(shown, "size", str(stated), str(size))
    return "size"


async def check_copy(
    sftp: SFTPSession,
    path: str,
    plan: VerifyPlan,
    *,
    size: int,
    digests: Digests,
    read_back: Callable[[HashSpec], Awaitable[bytes | None]],
    shown: str,
    remote_hash: RemoteHash | None = None,
    stated_size: int | None = None,
) -> Verified:
    """``check`` for one file of the engine's: the server's SHA-256 by an exec of its
    own, unless ``remote_hash`` says how else."""
    hashed = (
        partial(remote_hash.of, path, size)
        if remote_hash is not None
        else partial(remote_sha256, sftp, path, size)
    )
    return await check(
        sftp,
        path,
        plan,
        size=size,
        digests=digests,
        remote_sha256=hashed,
        read_back=read_back,
        shown=shown,
        stated_size=stated_size,
    )


async def verify_copy(
    sftp: SFTPSession,
    lease: Lease,
    path: str,
    config: TransferConfig,
    *,
    size: int,
    local: str | os.PathLike[str] | LocalFile,
    streamed: OrderedHash | None = None,
    plan: VerifyPlan | None = None,
    shown: str,
    remote_hash: RemoteHash | None = None,
    stated_size: int | None = None,
) -> Verified:
    """Check a finished copy against the server's file at ``path`` (``config.verify``).

    Args:
        sftp: the channel the checks go on (a download's or upload's first,
            taken after its last reconnect).
        lease: what a read-back reads ``path`` again over.
        size: the copy's length.
        local: the local file hashed when nothing was hashed as the bytes
            flowed (``digests_of``).
        streamed: the hashes taken as the bytes flowed, if they were.
        plan: the checks chosen before the bytes flowed; None: chosen now
            (a worker-shared copy, which hashes nothing as it goes).
        shown: the path named in errors (the user's, not a temporary one).
        remote_hash: how the server's SHA-256 is had (default: an exec).
        stated_size: the size the open handle's FSTAT stated, checked in
            place of a STAT by name (a read-once server's file).

    Returns:
        The level achieved; "none" when ``config.verify`` asks for no check.

    Raises:
        IntegrityError, HashUnavailable: as ``check``.
    """
    if config.verify == "none":
        return "none"
    checks = plan if plan is not None else plan_for(config.verify, sftp, remote_hash)
    return await check_copy(
        sftp,
        path,
        checks,
        size=size,
        digests=await digests_of(streamed, local, size, checks.specs),
        read_back=partial(read_back, lease, path, config),
        shown=shown,
        remote_hash=remote_hash,
        stated_size=stated_size,
    )


def same(path: str, what: str, theirs: str, ours: str) -> None:
    """Raise IntegrityError naming ``path`` unless the server's ``what`` equals ours."""
    if theirs != ours:
        raise IntegrityError(path, f"{what} differs: the server has {theirs}, the copy {ours}")


def same_hash(path: str, how: str, spec: HashSpec, theirs: bytes | None, ours: bytes) -> None:
    """Raise IntegrityError naming ``path`` unless the server's hashes (``how``) are ours.

    Hashes by blocks are told apart at the first block that differs: the
    whole list would be megabytes of hex.
    """
    if theirs == ours:
        return
    what = f"{spec.algorithm} ({how})"
    if theirs is None:
        raise IntegrityError(path, f"{what} differs: the server's file is longer than the copy")
    if spec.block:
        step = spec.digest_size
        if len(theirs) != len(ours):
            raise IntegrityError(
                path,
                f"{what} differs: the server has {len(theirs) // step} blocks, "
                f"the copy {len(ours) // step}",
            )
        first = next(
            at for at in range(0, len(ours), step) if theirs[at : at + step] != ours[at : at + step]
        )
        what = f"{spec.algorithm} of the block at byte {first // step * spec.block} ({how})"
        theirs, ours = theirs[first : first + step], ours[first : first + step]
    raise IntegrityError(
        path, f"{what} differs: the server has {theirs.hex()}, the copy {ours.hex()}"
    )
