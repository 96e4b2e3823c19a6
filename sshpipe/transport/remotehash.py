"""The server's ``sha256sum``: the one place its command is built, quoted and read.

Two ways to run it, one file or many: ``remote_sha256`` execs ``sha256sum --
FILE`` for one file (a channel's own exec: a copy or ``Client.checksum``);
``remote_sha256s`` writes ``sha256sum -z -- FILE...`` to a tree's kept shell
(``commands.RemoteCommands``) for every file ready at once, one round trip
for hundreds. Each file's outcome is its hash (hex), ``Unreadable`` (the
command said it hashed the file and printed no hash that can be read: never
a match), or None (no ``sha256sum`` ran, or it could not read the file).
Which check uses the hash, and in what order, is ``transfer.verify``'s.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ..core.codec import wire
from ..core.config import DEFAULT_STALL_TIMEOUT
from ..core.errors import IntegrityError
from ..core.untrusted import command_output_cap, command_timeout
from .commands import RemoteCommands
from .sftp import SFTPSession

__all__ = [
    "MAX_FILES",
    "ServerSha256",
    "Unreadable",
    "parse_sha256sum_z",
    "remote_sha256",
    "remote_sha256s",
    "sha256_in",
]

_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_FILES = 256  # files per sha256sum: its command line stays well under ARG_MAX


@dataclass(frozen=True, slots=True)
class Unreadable:
    """What a server's ``sha256sum`` printed, where its exit status said a hash would be."""

    printed: str

    def failure(self, shown: str) -> IntegrityError:
        """The check's failure: not a match (exit 10), saying what was printed (cut short)."""
        text = self.printed.strip()
        cut = f"{text[:60]}..." if len(text) > 60 else text
        return IntegrityError(
            shown,
            f"sha256sum on the server printed no hash that can be read ({cut!r}): "
            "not taken as a match",
        )


# The server's SHA-256 of a file, hex; what it printed instead; None: it has none to give.
ServerSha256 = str | Unreadable | None


async def remote_sha256(sftp: SFTPSession, path: str, size: int) -> ServerSha256:
    """The server's ``sha256sum`` of ``path``; None if it runs no commands (or lacks it).

    ``size``: the file's, so the command may take as long as reading it does.
    ``Unreadable``: it said it hashed the file (exit status 0) and printed
    no hash.

    Raises:
        ProtocolError: it printed more than one line of hash and name can be.
    """
    if sftp.run_command is None:
        return None
    result = await sftp.run_command(
        f"sha256sum -- {shlex.quote(path)}",
        within=command_timeout(sftp.stall_timeout or DEFAULT_STALL_TIMEOUT, size),
        max_output=command_output_cap(1, len(wire(path))),
    )
    if result is None or result[0] != 0:
        return None
    return sha256_in(result[1])


def sha256_in(output: str) -> str | Unreadable:
    """The hash in ``sha256sum``'s line for one file ("HASH  NAME"), else what it printed.

    The last line is the command's: a shell's start-up files may print before
    it. GNU's puts a backslash before the hash of a name it escapes.
    """
    lines = output.strip().splitlines()
    words = lines[-1].split() if lines else []
    digest = words[0].removeprefix("\\") if words else ""
    return digest if _SHA256.fullmatch(digest) else Unreadable(output)


async def remote_sha256s(
    commands: RemoteCommands, files: list[tuple[str, int]]
) -> list[ServerSha256]:
    """The server's SHA-256 of each (path, size), in order, by one ``sha256sum -z``.

    At most ``MAX_FILES`` files. The caller has made sure the server runs
    GNU's ``sha256sum`` (``RemoteCommands.has``): ``-z`` is GNU's.

    Raises:
        ConnectionBroken: the shell's connection went.
        ProtocolError: it printed more than the files' hashes and names can be.
    """
    paths = [path for path, _ in files]
    command = "sha256sum -z -- " + " ".join(shlex.quote(p) for p in paths)
    result = await commands.run(
        command,
        reads=sum(size for _, size in files),
        max_output=command_output_cap(len(paths), sum(len(wire(p)) for p in paths)),
    )
    if result is None:
        return [None] * len(paths)
    # A file it could not read makes the status 1; the others are still listed.
    # With a status of 0 every file was hashed: one not listed was printed as
    # something else than its hash.
    found = parse_sha256sum_z(result[1])
    missing = Unreadable(result[1]) if result[0] == 0 else None
    return [found.get(path, missing) for path in paths]


def parse_sha256sum_z(output: str) -> dict[str, str]:
    """{path: hash} from ``sha256sum -z`` output (NUL-ended "HASH  PATH" records, unescaped)."""
    found = {}
    for record in output.split("\0"):
        digest, sep, path = record.partition(" ")
        if sep and len(digest) == 64 and path[:1] in (" ", "*"):
            found[path[1:]] = digest
    return found
