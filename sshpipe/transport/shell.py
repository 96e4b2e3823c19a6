"""A ``sh`` kept open on the server: many commands, one round trip each.

``SSHLink.open_shell`` starts one; ``commands.RemoteCommands`` writes a tree's
commands (``sync -f``, ``sha256sum``) to it. Output is bounded: a server that
prints without end is refused, not buffered.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import Any

import asyncssh

from ..core.errors import ProtocolError

logger = logging.getLogger("sshpipe.ssh")

SHELL_OPEN_TIMEOUT = 30.0
_DONE = "__sshpipe_done__"
_READ_CHUNK = 64 * 1024

# Commands and their output as text whose undecodable bytes stay themselves
# (surrogates), as remote paths do (``codec.wire``).
TEXT: dict[str, Any] = {"encoding": "utf-8", "errors": "surrogateescape"}


async def read_bounded(stream: asyncssh.SSHReader[str], max_output: int, what: str) -> str:
    """All of ``stream`` up to its end, refusing past ``max_output`` characters.

    Raises:
        ProtocolError: the server printed more than the command can (an
            endless or hostile output), instead of our memory growing with it.
    """
    parts: list[str] = []
    held = 0
    while chunk := await stream.read(_READ_CHUNK):
        held += len(chunk)
        if held > max_output:
            raise ProtocolError(f"{what} printed more than {max_output} bytes, refused")
        parts.append(chunk)
    return "".join(parts)


class RemoteShell:
    """Commands written to one ``sh`` on the server: one round trip each.

    ``conn.run`` opens a channel, execs, and waits for the exit status and the
    close: about six round trips (130 ms at 20 ms). A command written to a
    shell that is already there answers in one. Commands run one at a time;
    each is followed by a marker line carrying its exit status (its token is
    this shell's own, so no output can pass for it by accident).
    """

    def __init__(self, process: asyncssh.SSHClientProcess[str], label: str) -> None:
        self._process = process
        self._label = label  # the connection's, for messages
        self._lock = asyncio.Lock()
        self._gone = False
        self._marker = f"{_DONE}{secrets.token_hex(8)}"

    def __repr__(self) -> str:
        return f"<RemoteShell gone={self._gone}>"

    async def run(self, command: str, *, within: float, max_output: int) -> tuple[int, str] | None:
        """(exit status, stdout) of ``command``, or None once the shell is gone.

        Raises:
            ProtocolError: the output passed ``max_output`` (the shell is closed).
        """
        async with self._lock:
            if self._gone:
                return None
            try:
                # stdin is ours (the next commands): the command gets /dev/null.
                self._process.stdin.write(
                    f"{{ {command}\n}} </dev/null; s=$?; echo; echo {self._marker} $s\n"
                )
                async with asyncio.timeout(within):  # not wait_for: it can eat a cancel
                    return await self._result(max_output + len(self._marker) + 16)
            except (ProtocolError, asyncio.CancelledError):
                # Cancelled mid-command, the shell is still running it: its
                # marker would answer the next command, so the shell goes.
                self.close()
                raise
            except (asyncssh.Error, OSError, ValueError, IndexError, TimeoutError) as exc:
                logger.debug("shell failed: %s", type(exc).__name__)
            self.close()  # EOF, garbage or silence: the shell is no use any more
            return None

    async def _result(self, max_output: int) -> tuple[int, str] | None:
        """Read up to this command's marker line; None if the shell ends first."""
        stdout = self._process.stdout
        end = "\n" + self._marker + " "
        text = ""
        while (found := text.find(end)) < 0 or "\n" not in text[found + len(end) :]:
            chunk = await stdout.read(_READ_CHUNK)
            if not chunk:
                return None
            text += chunk
            if len(text) > max_output:
                raise ProtocolError(
                    f"{self._label}: a command in the shell printed more than {max_output} "
                    "bytes, refused"
                )
        status = int(text[found + len(end) :].split("\n", 1)[0])
        return status, text[:found]  # less the echo's newline

    def close(self) -> None:
        self._gone = True
        self._process.close()
