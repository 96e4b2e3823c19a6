"""A thin client's get or put, run in the mux master (``thin`` is the client).

The master is warm: the engine loaded, its connection logged in. It runs the
command exactly as a command of its own (``command.run_transfer``) through
its own socket, with three differences:

- local names are opened in the client's working directory: ``/proc/PID/cwd``
  of the peer (its pid from SO_PEERCRED, its uid checked by ``muxconn``),
  opened once as a directory fd while the client waits on the socket, then
  reached as ``/proc/self/fd/N/NAME``: a rename of the client's directory
  meanwhile does not move where the files land, and ``local`` keeps its
  dirfd discipline under it;
- what the command prints goes to buffers of its own (a context variable
  routes the master's ``sys.stdout`` and ``sys.stderr``: two clients' runs
  never mix), sent back with the exit code;
- the client's Ctrl-C cancels the run (temporary files removed), exit 130.

Why not the client's fds over SCM_RIGHTS: asyncio's transports read the
socket with ``recv``, which drops ancillary data; the peer's cwd through
/proc is the same directory, with no round trip more.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import io
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TextIO

from ..core.errors import SSHPipeError
from ..transport.muxclient import own_slots
from .args import parse_args
from .output import EXIT_INTERNAL, EXIT_INTERRUPTED, failed, say

if TYPE_CHECKING:
    from ..transport.muxmaster import Runner

__all__ = ["runner"]

# The run whose output a write belongs to: (stdout, stderr) buffers.
_sink: contextvars.ContextVar[tuple[io.StringIO, io.StringIO] | None] = contextvars.ContextVar(
    "sshpipe_thin_sink", default=None
)


class _Routed(io.TextIOBase):
    """``sys.stdout`` or ``sys.stderr`` of the master: a run's buffer, else the stream."""

    def __init__(self, stream: TextIO, index: int) -> None:
        self._stream = stream
        self._index = index

    def write(self, text: str) -> int:
        sink = _sink.get()
        if sink is None:
            return self._stream.write(text)
        return sink[self._index].write(text)

    def flush(self) -> None:
        if _sink.get() is None:
            self._stream.flush()

    def isatty(self) -> bool:
        return False  # no progress display in a run: the client has the terminal


# ``command.run_transfer``: passed in, as ``command`` imports this module.
Transfer = Callable[[argparse.Namespace, str, Callable[[str], str]], Awaitable[int]]


def runner(path: str, *, transfer: Transfer) -> Runner:
    """The master's ``Runner`` for its socket at ``path``: ``transfer`` runs each command."""
    if not isinstance(sys.stdout, _Routed):
        sys.stdout = _Routed(sys.stdout, 0)
        sys.stderr = _Routed(sys.stderr, 1)

    async def run(
        header: dict[str, Any], pid: int, interrupted: asyncio.Event
    ) -> tuple[dict[str, Any], bytes]:
        words = header.get("argv")
        if not isinstance(words, list) or not all(isinstance(word, str) for word in words):
            return {"ok": False, "error": "run: argv is not a list of words"}, b""
        try:
            cwd = os.open(f"/proc/{pid}/cwd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            return {"ok": False, "error": f"run: the client's directory: {exc}"}, b""
        try:
            root = f"/proc/self/fd/{cwd}"
            sink = (io.StringIO(), io.StringIO())
            context = contextvars.copy_context()
            context.run(_sink.set, sink)
            context.run(own_slots)
            code = await _supervise(
                asyncio.get_running_loop().create_task(
                    _command(transfer, words, path, root), context=context
                ),
                interrupted,
                sink[1],
            )
        finally:
            os.close(cwd)
        # The names as the client gave them, not as the master reached them.
        out, err = (buffer.getvalue().replace(root + "/", "").encode() for buffer in sink)
        return {"ok": True, "code": code, "out": len(out), "err": len(err)}, out + err

    return run


async def _command(transfer: Transfer, words: list[str], path: str, root: str) -> int:
    try:
        return await transfer(parse_args(words), path, lambda name: os.path.join(root, name))
    except SSHPipeError as exc:
        return failed(exc)
    except Exception as exc:  # never a traceback for a user; say what broke
        say(f"internal error: {type(exc).__name__}: {exc} (set SSHPIPE_DEBUG=1 for details)")
        return EXIT_INTERNAL


async def _supervise(task: asyncio.Task[int], interrupted: asyncio.Event, err: io.StringIO) -> int:
    """The run's exit code; cancelled (130) when the client says so or leaves."""
    waiter = asyncio.get_running_loop().create_task(interrupted.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise  # the master itself is stopping
        err.write("sshpipe: interrupted\n")
        return EXIT_INTERRUPTED
