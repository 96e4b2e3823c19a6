"""The command line's prompts: asked and answered on the terminal, ``/dev/tty``.

As OpenSSH's ``read_passphrase``: the controlling terminal, never stdin or
stdout (a ``get`` to stdout or a redirected stderr still asks), echo off for
secrets and back on whatever happens (Ctrl-C included). Without a terminal
(``/dev/tty`` cannot be opened: a cron job, ``setsid``, CI) nothing is asked
and the log-in fails with exit code 6, as with ``-o BatchMode=yes``.

The line is read through the event loop (``add_reader``), so the loop runs
on (keepalives, other connections) and a Ctrl-C cancels the read at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import termios
from collections.abc import Iterator

from ..core.prompt import Prompt

__all__ = ["TerminalPrompt", "has_terminal"]

TTY = "/dev/tty"


def has_terminal() -> bool:
    """Whether there is a controlling terminal to ask on."""
    try:
        fd = os.open(TTY, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


class TerminalPrompt:
    """``connect(prompt=...)`` for the command line: each question on ``/dev/tty``."""

    async def __call__(self, prompt: Prompt) -> str | None:
        try:
            fd = os.open(TTY, os.O_RDWR | os.O_NOCTTY)
        except OSError:
            return None  # the terminal went away: give up, as without one
        try:
            # Echo off before the question shows: what is typed once it shows is hidden.
            with _echo(fd, on=prompt.echo):
                os.write(fd, _question(prompt).encode("utf-8", "replace"))
                line = await _read_line(fd)
        finally:
            os.close(fd)
        if line is None:  # end of input (Ctrl-D): no answer
            return None
        return line.decode("utf-8", "replace")


def _question(prompt: Prompt) -> str:
    """What is written before the answer: a challenge's title and instructions first."""
    head = ""
    if prompt.kind == "challenge" and prompt.first:
        head = "".join(f"{part}\n" for part in (prompt.name, prompt.instructions) if part)
    elif prompt.kind == "password" and prompt.attempt > 1:
        head = "Permission denied, please try again.\n"
    return head + prompt.text


@contextlib.contextmanager
def _echo(fd: int, *, on: bool) -> Iterator[None]:
    if on:
        yield
        return
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:  # not a terminal after all: read as it is
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO  # lflags; ISIG stays: Ctrl-C still interrupts
    # TCSAFLUSH drops what was typed before the question, as readpassphrase(3).
    termios.tcsetattr(fd, termios.TCSAFLUSH, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSAFLUSH, saved)
        with contextlib.suppress(OSError):
            os.write(fd, b"\n")  # the Enter typed was not echoed


async def _read_line(fd: int) -> bytes | None:
    """One line from the terminal without its newline; None at end of input."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes | None] = loop.create_future()
    got = bytearray()

    def readable() -> None:
        if done.done():
            return
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # EIO: the terminal hung up
            chunk = b""
        if not chunk:
            done.set_result(bytes(got) if got else None)
            return
        got.extend(chunk)
        if b"\n" in got:
            done.set_result(bytes(got[: got.index(b"\n")]))

    loop.add_reader(fd, readable)
    try:
        return await done
    finally:
        loop.remove_reader(fd)
