"""``--verify`` for a tree's small files: hashed in memory, checked on the server by the batch.

A small file is all in memory once read, so its SHA-256 costs no second read.
The server's side is one ``sha256sum -z -- FILE...`` for every file ready
meanwhile, through the tree's kept shell (``RemoteCommands``, ``Batcher``):
one round trip for hundreds of files, where a command each would cost six.
Where the server has no GNU ``sha256sum``, "read-back" reads the file again
over SFTP; otherwise the sizes are compared. Big files go through the
single-file engine, which verifies them itself; ``weakest`` is what the tree
reports: the weakest check any file passed.
"""

from __future__ import annotations

import contextlib
import hashlib
import shlex
from collections.abc import Awaitable, Callable, Iterable, Sequence

from ..core.codec import wire
from ..core.untrusted import command_output_cap
from ..transfer.verify import same
from ..transport.commands import RemoteCommands
from .batch import Batcher

MAX_BATCH = 256  # files per sha256sum: its command line stays well under ARG_MAX
# From the weakest: a read-back and the server's own hash both read what it stored.
_STRENGTH = {"none": 0, "size": 1, "read-back": 2, "hash-remote": 3}


def sha256_of(pieces: Iterable[tuple[int, Sequence[bytes | memoryview]]]) -> str:
    """SHA-256 of a file held as (offset, chunks) pieces covering it."""
    digest = hashlib.sha256()
    for _, chunks in sorted(pieces, key=lambda piece: piece[0]):
        for chunk in chunks:
            digest.update(chunk)
    return digest.hexdigest()


def parse_sha256sum_z(output: str) -> dict[str, str]:
    """{path: hash} from ``sha256sum -z`` output (NUL-ended "HASH  PATH" records, unescaped)."""
    found = {}
    for record in output.split("\0"):
        digest, sep, path = record.partition(" ")
        if sep and len(digest) == 64 and path[:1] in (" ", "*"):
            found[path[1:]] = digest
    return found


class TreeVerifier:
    """Checks each small file against the server at ``level`` (see TransferConfig.verify)."""

    def __init__(self, level: str, commands: RemoteCommands) -> None:
        self.level = level
        self._commands = commands
        self._batches: Batcher[tuple[str, int], str | None] = Batcher(
            self._hash_batch, max_batch=MAX_BATCH
        )
        self.weakest: str | None = None  # None until a file is checked

    def __repr__(self) -> str:
        return f"<TreeVerifier {self.level} weakest={self.weakest} {self._batches!r}>"

    async def check(
        self,
        path: str,
        *,
        digest: str,
        size: int,
        remote_size: Callable[[], Awaitable[int | None]],
        read_back: Callable[[], Awaitable[str]],
        shown: str,
    ) -> None:
        """Compare the copy (``digest``, ``size``) with the server's file at ``path``.

        Raises:
            IntegrityError: naming ``shown``: they differ.
            ConnectionBroken: the connection went (the file is tried again).
        """
        if self.level in ("hash", "read-back"):
            theirs = await self.remote_sha256(path, size)
            if theirs is not None:
                same(shown, "sha256 (sha256sum on the server)", theirs, digest)
                self.passed("hash-remote")
                return
        if self.level == "read-back":
            same(shown, "sha256 (read back)", await read_back(), digest)
            self.passed("read-back")
            return
        same(shown, "size", str(await remote_size()), str(size))
        self.passed("size")

    async def remote_sha256(self, path: str, size: int) -> str | None:
        """The server's SHA-256 of ``path`` in the next batch, or None if it has no sha256sum.

        Big files use it too: their own exec would need one more session on a
        connection their channels may have filled (sshd's MaxSessions).
        """
        if not await self._commands.has("sha256sum"):
            return None
        return await self._batches.submit((path, size))

    def passed(self, level: str) -> None:
        """A file passed ``level`` (a big file's own check is counted here too)."""
        if self.weakest is None or _STRENGTH[level] < _STRENGTH[self.weakest]:
            self.weakest = level

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Files are checked inside this; at its end the batch under way is waited for."""
        return self._batches.running()

    async def _hash_batch(self, files: list[tuple[str, int]]) -> list[str | None]:
        paths = [path for path, _ in files]
        command = "sha256sum -z -- " + " ".join(shlex.quote(p) for p in paths)
        result = await self._commands.run(
            command,
            reads=sum(size for _, size in files),
            max_output=command_output_cap(len(paths), sum(len(wire(p)) for p in paths)),
        )
        # A file it could not read makes the status 1; the others are still listed.
        found = parse_sha256sum_z(result[1]) if result is not None else {}
        return [found.get(path) for path in paths]
