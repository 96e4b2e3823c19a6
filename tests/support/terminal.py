"""``python -m sshpipe`` with a pseudo-terminal as its controlling terminal (``/dev/tty``).

The child starts a session of its own (``setsid``) and takes the pty's
follower as its controlling terminal (``TIOCSCTTY``); stdin is /dev/null and
stdout and stderr are pipes, so what reaches the terminal can only have been
written to ``/dev/tty``. The test answers each prompt as a user types it
(the follower's line discipline echoes what is typed unless the child turned
echo off), or types Ctrl-C. Without ``tty`` the child has no controlling
terminal at all (a new session that never takes one): ``/dev/tty`` cannot be
opened, as under cron or ``setsid -w``.
"""

from __future__ import annotations

import asyncio
import os
import pty
import select
import sys
import termios
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["INTERRUPT", "TTYRun", "run_on_terminal"]

# An answer that types Ctrl-C instead (the terminal sends SIGINT).
INTERRUPT = "\x03"

_LAUNCHER = """
import fcntl, os, runpy, sys, termios
tty = sys.argv.pop(1)
if tty:
    fd = os.open(tty, os.O_RDWR)
    fcntl.ioctl(fd, termios.TIOCSCTTY, 0)
sys.argv[0] = "sshpipe"
runpy.run_module("sshpipe", run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class TTYRun:
    """How the command went, and what it wrote on its terminal."""

    returncode: int
    stdout: str
    stderr: str
    screen: str  # everything the terminal showed, the user's echoed typing included
    echo_after: bool  # the terminal echoes again after the command ended


async def run_on_terminal(
    *args: str,
    answers: Sequence[tuple[str, str]] = (),
    tty: bool = True,
    env: dict[str, str] | None = None,
    limit: float = 30.0,
) -> TTYRun:
    """Run the command; for each (prompt, answer) wait for ``prompt`` on the
    terminal, then type ``answer`` and Enter (or Ctrl-C for ``INTERRUPT``).

    ``env``: added to the environment (SSHPIPE_DEBUG is removed unless given).
    """
    environment = {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"}
    environment.update(env or {})
    leader, follower = pty.openpty()
    loop = asyncio.get_running_loop()
    screen = bytearray()
    grew = asyncio.Event()

    def readable() -> None:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: nothing holds the follower any more
            chunk = b""
        if not chunk:
            loop.remove_reader(leader)
        screen.extend(chunk)
        grew.set()

    loop.add_reader(leader, readable)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _LAUNCHER,
            os.ttyname(follower) if tty else "",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
            start_new_session=True,
        )
        communicating = asyncio.ensure_future(proc.communicate())
        try:
            async with asyncio.timeout(limit):
                seen = 0
                for prompt, answer in answers:
                    while (at := screen.find(prompt.encode(), seen)) < 0:
                        if communicating.done():
                            raise AssertionError(f"no prompt {prompt!r}: {bytes(screen)!r}")
                        grew.clear()
                        waiter = asyncio.ensure_future(grew.wait())
                        try:
                            await asyncio.wait(
                                [waiter, communicating], return_when=asyncio.FIRST_COMPLETED
                            )
                        finally:
                            waiter.cancel()
                    seen = at + len(prompt)
                    typed = answer if answer == INTERRUPT else answer + "\n"
                    os.write(leader, typed.encode())
                out, err = await communicating
        except TimeoutError:
            proc.kill()
            out, err = await communicating
            raise AssertionError(
                f"timed out; terminal: {bytes(screen)!r}; stderr: {err.decode()[-3000:]}"
            ) from None
        # What the command wrote last and the loop has not read yet.
        while select.select([leader], [], [], 0)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen.extend(chunk)
        echo = bool(termios.tcgetattr(follower)[3] & termios.ECHO)
    finally:
        loop.remove_reader(leader)
        os.close(leader)
        os.close(follower)
    assert proc.returncode is not None
    return TTYRun(
        proc.returncode,
        out.decode(),
        err.decode(),
        screen.decode(errors="replace").replace("\r\n", "\n"),
        echo,
    )
