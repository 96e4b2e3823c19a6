"""What an ``SFTPSession`` is wired to, as protocols: the fakes in tests stand in for them.

- ``Pipe``: the byte stream its requests go down (an SSH channel);
- ``Shell`` and ``RunCommand``: the remote shell and command runner the SSH
  edge lends it (a tree's ``sync -f``, ``--verify``'s ``sha256sum``);
- ``Lender``: the link a session is opened on (``SSHLink``, or ``MuxLink``
  through a connection-reuse master), which lends it those.
"""

from __future__ import annotations

from typing import Protocol

from .replies import ReplyClock


class Shell(Protocol):
    """A shell kept open on the server: commands one after another, each one round trip."""

    async def run(self, command: str, *, within: float, max_output: int) -> tuple[int, str] | None:
        """(exit status, stdout) of ``command``, or None once the shell is gone.

        Raises:
            ProtocolError: it printed more than ``max_output`` characters.
        """
        ...

    def close(self) -> None: ...


class RunCommand(Protocol):
    """Runs one command on the server (an exec of its own): see ``Shell.run``."""

    async def __call__(
        self, command: str, *, within: float, max_output: int
    ) -> tuple[int, str] | None: ...


class Pipe(Protocol):
    """A reliable, ordered byte stream to the SFTP server."""

    def write(self, data: bytes, payload: bytes | memoryview = b"") -> None:
        """``data`` then ``payload``, in order (a WRITE's header and its bytes:
        a pipe that can send the payload without copying it does)."""

    def close(self) -> None: ...


class Lender(Protocol):
    """A link that opens sessions: their name, reply clock, commands and shell come from it."""

    label: str
    channels_opened: int  # the number the newest session is named with
    replies: ReplyClock
    refuses_exec: bool  # it ran no command once: its sessions run none

    async def run(
        self, command: str, *, within: float, max_output: int
    ) -> tuple[int, str] | None: ...

    async def open_shell(self) -> Shell | None: ...

    def abort(self, *, stalled: bool = False) -> None:
        """Drop the connection now (``stalled``: the server stopped answering on it)."""
