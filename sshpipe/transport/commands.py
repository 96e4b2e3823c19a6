"""Commands a tree runs on the server, through one shell kept open (``sync -f``, ``sha256sum``).

An exec per command costs about six round trips (channel, exec, exit status,
close: 130 ms at 20 ms); a command written to a shell that is already there
answers in one (``shell.RemoteShell``). After a dropped connection the next
command opens a shell on the live one. Each tool is probed once (its
``--version``), so only what we know how to read is trusted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..core.config import DEFAULT_STALL_TIMEOUT
from ..core.errors import ConnectionBroken
from ..core.untrusted import COMMAND_OUTPUT_SLACK, command_timeout
from .sftp import SFTPSession
from .wiring import Shell

logger = logging.getLogger("sshpipe.remote")


class RemoteCommands:
    """Runs commands on the server of a tree's pipeline.

    Args:
        channel: a live pipeline channel, asked anew after a drop; its
            connection runs the shell.
    """

    def __init__(self, channel: Callable[[], SFTPSession]) -> None:
        self._channel = channel
        self._shell: Shell | None = None
        self._shell_on = channel()  # the channel whose connection runs the shell
        self._known: dict[str, bool] = {}  # tool: usable, once asked
        self._asking: dict[str, asyncio.Lock] = {}

    def __repr__(self) -> str:
        return f"<RemoteCommands shell={self._shell!r} probed={sorted(self._known)}>"

    async def has(self, tool: str, marker: str = "GNU coreutils") -> bool:
        """Whether ``tool --version`` runs and says ``marker`` (asked once; a drop asks again).

        Callers asking at once share one probe: the others wait for its answer
        (in the caller's own task: a cancelled caller stops only its own probe,
        and the next caller asks again).

        Raises:
            ConnectionBroken: the connection went while asking.
        """
        async with self._asking.setdefault(tool, asyncio.Lock()):
            if tool not in self._known:
                # A ConnectionBroken is not an answer: nothing is kept, the next asks again.
                self._known[tool] = await self._probe(tool, marker)
            return self._known[tool]

    def known(self, tool: str) -> bool | None:
        """What the last probe of ``tool`` found (None: not asked yet)."""
        return self._known.get(tool)

    async def _probe(self, tool: str, marker: str) -> bool:
        result = await self.run(f"{tool} --version", max_output=COMMAND_OUTPUT_SLACK)
        found = result is not None and result[0] == 0 and marker in result[1]
        logger.debug("%s on the server: %s", tool, "usable" if found else "not usable")
        return found

    async def run(self, command: str, *, max_output: int, reads: int = 0) -> tuple[int, str] | None:
        """(exit status, stdout) from the shell kept open; None where no shell runs.

        Args:
            max_output: the most the command can print (``command_output_cap``).
            reads: bytes it reads on the server: time it may take on top of the
                stall timeout before it counts as hung.

        Raises:
            ConnectionBroken: the shell's connection is gone (not the command's
                fault; the next command opens a shell on the new connection).
            ProtocolError: it printed more than ``max_output``.
        """
        if self._shell is None or self._shell_on.broken is not None:
            if self._shell is not None:
                self._shell.close()
            self._shell_on = self._channel()
            if self._shell_on.open_shell is None:
                return None
            self._shell = await self._shell_on.open_shell()
            if self._shell is None:
                return None
        shell = self._shell
        stall = self._shell_on.stall_timeout or DEFAULT_STALL_TIMEOUT
        try:
            result = await shell.run(
                command, within=command_timeout(stall, reads), max_output=max_output
            )
        except asyncio.CancelledError:
            # The shell went with the command (it would answer the next with
            # this one's marker): the next command opens a new one.
            shell.close()
            if self._shell is shell:
                self._shell = None
            raise
        if result is None:
            shell.close()
            if self._shell is shell:
                self._shell = None
            if self._shell_on.broken is not None:
                raise ConnectionBroken(f"connection lost while running {command.split()[0]}")
        return result

    async def close(self) -> None:
        """Close the shell (a command still running in it ends with no answer)."""
        if self._shell is not None:
            self._shell.close()
            self._shell = None
