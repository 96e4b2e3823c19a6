"""The parent's side of its worker processes: start them, hand out jobs, follow them.

``async with Crew(count, hello, fds) as crew`` starts the processes at once
(each logs in while the parent plans); ``await crew.run(jobs, on_moved)``
gives each its job and returns every ``Done``, or raises the first failure
(as the worker's own error class, message and exit code) once the others
are stopped. Leaving the block, however it is left, ends every process and
waits for it: none outlives the transfer, none writes after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from ..core.errors import SSHPipeError
from . import wire

# A worker told to stop (its stdin closed) is gone within a round trip; one
# that is not by then is killed.
STOP_GRACE = 2.0


def _environment() -> dict[str, str]:
    """The parent's environment, with this very sshpipe first on the child's path."""
    # sshpipe/workers/crew.py: the directory holding the sshpipe package is two up.
    root = str(Path(os.path.abspath(__file__)).parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class Crew:
    """``count`` worker processes for one file (see the module docstring)."""

    def __init__(self, count: int, hello: wire.Hello, fds: Sequence[int] = ()) -> None:
        self.count = count
        self.hello = wire.frame(hello)
        self.fds = tuple(fds)
        self.procs: list[asyncio.subprocess.Process] = []
        self.failure: SSHPipeError | None = None

    def __repr__(self) -> str:
        running = sum(proc.returncode is None for proc in self.procs)
        return f"<Crew workers={self.count} running={running}>"

    async def __aenter__(self) -> Crew:
        try:
            for _ in range(self.count):
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "sshpipe.workers.child",
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    pass_fds=self.fds,
                    env=_environment(),
                    # Off the terminal (uvloop has no process_group): a Ctrl-C
                    # is the parent's alone, which cancels and ends the workers.
                    # A parent that dies closes their stdin, and they stop.
                    start_new_session=True,
                )
                self.procs.append(proc)
                assert proc.stdin is not None
                proc.stdin.write(self.hello)
        except BaseException:
            await self._stop(cancelled=True)
            raise
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._stop(cancelled=exc is not None)

    async def shrink(self, count: int) -> None:
        """Keep ``count`` workers: the others are not needed (and are ended now)."""
        self.procs, idle = self.procs[:count], self.procs[count:]
        for proc in idle:
            _kill(proc)
            await asyncio.shield(proc.wait())

    async def run(
        self, jobs: Sequence[wire.Job], on_moved: Callable[[wire.Moved], None]
    ) -> list[wire.Done]:
        """Each worker its job (as many jobs as workers); every ``Done``, in job order.

        Raises:
            SSHPipeError: the first worker's failure, as that worker raised it.
        """
        assert len(jobs) == len(self.procs)
        done: list[wire.Done | None] = [None] * len(jobs)
        for proc, job in zip(self.procs, jobs, strict=True):
            assert proc.stdin is not None
            proc.stdin.write(wire.frame(job))
        try:
            async with asyncio.TaskGroup() as group:
                for index, proc in enumerate(self.procs):
                    group.create_task(self._follow(index, proc, done, on_moved))
        except BaseExceptionGroup as group:
            if self.failure is not None:
                raise self.failure from None
            raise group.exceptions[0] from None
        return [result for result in done if result is not None]

    async def _follow(
        self,
        index: int,
        proc: asyncio.subprocess.Process,
        done: list[wire.Done | None],
        on_moved: Callable[[wire.Moved], None],
    ) -> None:
        assert proc.stdout is not None
        while True:
            try:
                header = await proc.stdout.readexactly(wire.HEADER)
                message = pickle.loads(await proc.stdout.readexactly(wire.length_of(header)))
            except (asyncio.IncompleteReadError, ValueError):
                code = await proc.wait()
                self._fail(SSHPipeError(f"worker process {index + 1} ended (exit code {code})"))
                return
            if isinstance(message, wire.Moved):
                on_moved(message)
            elif isinstance(message, wire.Done):
                done[index] = message
                return
            elif isinstance(message, wire.Failed):
                self._fail(wire.rebuilt(message))
                return

    def _fail(self, exc: SSHPipeError) -> None:
        if self.failure is None:  # the first is what the user is told
            self.failure = exc
        raise exc

    async def _stop(self, *, cancelled: bool) -> None:
        """End every worker: EOF on stdin (at once SIGTERM too when cancelled), then wait."""
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.close()
            if cancelled and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        try:
            for proc in self.procs:
                try:
                    await asyncio.wait_for(asyncio.shield(proc.wait()), STOP_GRACE)
                except TimeoutError:
                    _kill(proc)
        finally:  # cancelled meanwhile too: none is left running
            for proc in self.procs:
                _kill(proc)
                await asyncio.shield(proc.wait())


def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
