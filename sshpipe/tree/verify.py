"""``--verify`` for a tree's small files: hashed in memory, checked on the server by the batch.

A small file is all in memory once read, so its hashes cost no second read.
The server's ``sha256sum`` is one ``sha256sum -z -- FILE...`` for every file
ready meanwhile (``transport.remotehash``), through the tree's kept shell
(``RemoteCommands``, ``Batcher``): one round trip for hundreds of files,
where a command each would cost six. Where the server has no GNU ``sha256sum``, its
``check-file`` is asked file by file, else "read-back" reads the file again
over SFTP, else the sizes are compared, or for "hash" asked by name the tree
stops with HashUnavailable (the order is ``transfer.verify``'s ``check``).
Big files go through the single-file engine, which verifies them itself;
``weakest`` is what the tree reports: the weakest check any file passed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from functools import partial

from ..core.checkfile import CheckFile, Hasher, HashSpec, VerifyPlan, level_strength, plan_verify
from ..core.stats import Verified
from ..transfer.verify import Digests, RemoteHash, check
from ..transport.commands import RemoteCommands
from ..transport.remotehash import MAX_FILES, ServerSha256, remote_sha256s
from ..transport.sftp import SFTPSession
from .batch import Batcher


def digests_of_pieces(
    pieces: Iterable[tuple[int, Sequence[bytes | memoryview]]], specs: Sequence[HashSpec]
) -> dict[HashSpec, bytes]:
    """The hashes (one per spec) of a file held as (offset, chunks) pieces covering it."""
    hashers = [Hasher(spec) for spec in specs]
    for _, chunks in sorted(pieces, key=lambda piece: piece[0]):
        for chunk in chunks:
            for hasher in hashers:
                hasher.update(chunk)
    return {hasher.spec: hasher.digest() for hasher in hashers}


class TreeVerifier:
    """Checks each small file against the server at ``level`` (see TransferConfig.verify).

    Args:
        check_file: how the server's check-file is asked (from its VERSION), if it has one.
    """

    def __init__(
        self, level: str, commands: RemoteCommands, check_file: CheckFile | None = None
    ) -> None:
        self.level = level
        self._commands = commands
        self._check_file = check_file
        self._batches: Batcher[tuple[str, int], ServerSha256] = Batcher(
            partial(remote_sha256s, commands), max_batch=MAX_FILES
        )
        self.weakest: Verified | None = None  # None until a file is checked

    def __repr__(self) -> str:
        return f"<TreeVerifier {self.level} weakest={self.weakest} {self._batches!r}>"

    def plan(self) -> VerifyPlan:
        """The checks for a file about to be hashed (no SHA-256 once there is no ``sha256sum``)."""
        runs = self._commands.known("sha256sum") is not False
        return plan_verify(self.level, self._check_file, runs_commands=runs)

    @property
    def remote_hash(self) -> RemoteHash:
        """How a big file's check gets the server's SHA-256: in the next batch."""
        return RemoteHash(self.remote_sha256, usable=self._commands.known("sha256sum") is not False)

    async def check(
        self,
        sftp: SFTPSession,
        path: str,
        plan: VerifyPlan,
        *,
        digests: Digests,
        size: int,
        read_back: Callable[[HashSpec], Awaitable[bytes | None]],
        shown: str,
        stated_size: int | None = None,
    ) -> None:
        """Compare the copy (``digests`` as ``plan`` chose, ``size``) with the server's file.

        ``stated_size``: the size the server stated (its listing), checked
        in place of a STAT by name (a read-once server's file).

        Raises:
            IntegrityError: naming ``shown``: they differ.
            ConnectionBroken: the connection went (the file is tried again).
        """
        level = await check(
            sftp,
            path,
            plan,
            size=size,
            digests=digests,
            remote_sha256=partial(self.remote_sha256, path, size),
            read_back=read_back,
            shown=shown,
            stated_size=stated_size,
        )
        self.passed(level)

    async def remote_sha256(self, path: str, size: int) -> ServerSha256:
        """The server's SHA-256 of ``path`` in the next batch, or None if it has no sha256sum.

        Big files use it too: their own exec would need one more session on a
        connection their channels may have filled (sshd's MaxSessions).
        """
        if not await self._commands.has("sha256sum"):
            return None
        return await self._batches.submit((path, size))

    def passed(self, level: Verified) -> None:
        """A file passed ``level`` (a big file's own check is counted here too)."""
        if self.weakest is None or level_strength(level) < level_strength(self.weakest):
            self.weakest = level

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Files are checked inside this; at its end the batch under way is waited for."""
        return self._batches.running()
