"""``python -m sshpipe`` as a user runs it, measured: exit code, output, peak memory, Ctrl-C.

``run_cli`` blocks (for sshd, a server in another process). For in-process
servers the event loop must keep serving while the command runs, so the
command is an asyncio subprocess (``run_sshpipe``, ``run_cli_async``). Its peak RSS is reported by
the child itself at exit: ``VmHWM`` of /proc/self/status, the high-water mark
of its own memory since exec. Not ``ru_maxrss``: Linux carries the forked
parent's (pytest's) peak into it across the exec. And asyncio reaps the child,
so the parent's ``wait4`` never sees its usage.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Run",
    "assert_one_line_error",
    "run_cli",
    "run_cli_async",
    "run_cli_tty_stderr",
    "run_sshpipe",
]

# The seconds a command gets before it is killed and its test fails.
CLI_LIMIT = 60.0

# Runs ``python -m sshpipe`` and writes its own peak RSS (KiB) to the file named
# by argv[1] as it exits, whatever the exit, and when it had imported what a
# command that connects imports (CLOCK_MONOTONIC, the same in every process),
# asyncssh loaded as the command has it loaded (``cli.main``, its own process).
# With "stock" as argv[2], no patch applies (SSHPIPE_ASYNCSSH_PATCHES=off).
_LAUNCHER = """
import atexit, os, runpy, sys, time
from sshpipe.transport.loading import quick_asyncssh_import
quick_asyncssh_import()
import sshpipe.cli.main, sshpipe.cli.command, sshpipe.transport.ssh
ready = time.monotonic()
out = sys.argv.pop(1)
if sys.argv.pop(1) == "stock":
    os.environ["SSHPIPE_ASYNCSSH_PATCHES"] = "off"
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return line.split()[1]
atexit.register(lambda: open(out, "w").write(f"{peak()} {ready!r}"))
sys.argv[0] = "sshpipe"
runpy.run_module("sshpipe", run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class Run:
    """How one command went."""

    returncode: int
    stdout: str
    stderr: str
    peak_rss_mib: float
    seconds: float  # from start (or from the first SIGINT, if one was sent) to exit
    # From start until it had imported its modules (Python's start, the imports:
    # 0.5-3 s here, with the machine idle or loaded); NaN if it never wrote it.
    ready: float = float("nan")

    @property
    def after_ready(self) -> float:
        """Seconds from the command's start proper (its imports done) to its exit
        (for a command not interrupted: ``seconds`` then counts from the SIGINT)."""
        return self.seconds - self.ready

    @property
    def completed(self) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(["sshpipe"], self.returncode, self.stdout, self.stderr)


# Every command runs in a session of its own, without a controlling terminal:
# one that would prompt (a password, a passphrase) fails as under cron instead
# of asking on the terminal pytest runs in (tests.support.terminal gives one).
_NO_TERMINAL = {"start_new_session": True}


def _environment() -> dict[str, str]:
    # SSHPIPE_DEBUG would turn the one-line errors the tests check into tracebacks.
    return {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"}


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m sshpipe ARGS``, blocking: for servers in other processes (sshd)."""
    return subprocess.run(
        [sys.executable, "-m", "sshpipe", *args],
        capture_output=True,
        text=True,
        timeout=CLI_LIMIT,
        cwd=cwd,
        env=_environment(),
        **_NO_TERMINAL,
    )


def run_cli_tty_stderr(
    *args: str, cwd: Path | None = None, interrupt_at: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``run_cli`` with stderr on a pseudo-terminal, as a user at a terminal sees it.

    The terminal is 120 columns wide (rich reads it from the pty's size).
    ``interrupt_at``: once this text is on the terminal, one SIGINT (a Ctrl-C).
    """
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    with subprocess.Popen(
        [sys.executable, "-m", "sshpipe", *args],
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=cwd,
        env={k: v for k, v in _environment().items() if k not in ("COLUMNS", "LINES")},
        **_NO_TERMINAL,
    ) as proc:
        os.close(follower)
        seen = bytearray()
        try:
            while chunk := os.read(leader, 65536):  # read as it comes: a full pty blocks it
                seen += chunk
                if interrupt_at is not None and interrupt_at.encode() in seen:
                    interrupt_at = None
                    proc.send_signal(signal.SIGINT)
        except OSError:  # EIO: the command exited, the terminal's last writer is gone
            pass
        finally:
            os.close(leader)
        assert proc.stdout is not None
        out = proc.stdout.read().decode()
        code = proc.wait(timeout=CLI_LIMIT)
    # The terminal turns "\n" into "\r\n" (onlcr): undone, so lines read as written.
    err = seen.decode().replace("\r\n", "\n")
    return subprocess.CompletedProcess(["sshpipe", *args], code, out, err)


async def run_cli_async(*args: str) -> subprocess.CompletedProcess[str]:
    """``run_cli`` for in-process servers: the event loop keeps serving meanwhile."""
    return (await run_sshpipe(*args, limit=CLI_LIMIT)).completed


def assert_one_line_error(result: subprocess.CompletedProcess[str], code: int, *parts: str) -> None:
    """Exit ``code``, and stderr one ``sshpipe:`` line, no traceback, holding every part."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("sshpipe: ")
    for part in parts:
        assert part in lines[0]


async def run_sshpipe(
    *args: str,
    workdir: Path | None = None,
    limit: float = 120.0,
    interrupt_after: float | None = None,
    interrupts: int = 1,
    stock_asyncssh: bool = False,
) -> Run:
    """Run ``python -m sshpipe ARGS``; with ``interrupt_after``, send SIGINT then.

    ``stock_asyncssh``: with none of sshpipe's asyncssh patches
    (``SSHPIPE_ASYNCSSH_PATCHES=off``, as on a release they were not checked against).

    ``workdir``: where the child leaves its peak RSS (default: the temp directory).

    ``limit``: seconds before the command is killed (and the test fails).

    ``interrupts``: how many SIGINTs, 0.1 s apart. ``seconds`` then counts from
    the first: how long the command took to stop.
    """
    where = Path(tempfile.gettempdir()) if workdir is None else workdir
    rss_file = where / f"rss-{os.getpid()}-{time.monotonic_ns()}"
    started = spawned = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _LAUNCHER,
        str(rss_file),
        "stock" if stock_asyncssh else "patched",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_environment(),
        **_NO_TERMINAL,
    )
    communicating = asyncio.ensure_future(proc.communicate())
    try:
        async with asyncio.timeout(limit):
            if interrupt_after is not None:
                done, _ = await asyncio.wait([communicating], timeout=interrupt_after)
                if not done:
                    started = time.monotonic()
                    for _ in range(interrupts):
                        proc.send_signal(signal.SIGINT)
                        await asyncio.sleep(0.1)
            out, err = await communicating
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    ended = time.monotonic()
    seconds = ended - started
    try:
        kib, ready_at = rss_file.read_text().split()
        peak, ready = int(kib) / 1024, float(ready_at) - spawned
        rss_file.unlink()
    except (OSError, ValueError):
        peak = ready = float("nan")  # killed before atexit
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode(), peak, seconds, ready)
