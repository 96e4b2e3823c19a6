"""How many files the servers hold open under a directory, seen from /proc, at most.

The servers under test are local processes (sshd's sftp children, Green End's
gesftpserver, ProFTPD's session processes, the embedded server in this very
process), so the handles a client keeps open on the server are open file
descriptors there: ``/proc/PID/fd`` shows them, per process, which for one
SFTP channel on one connection is per channel.

Only root sees every process's descriptors: ProFTPD makes its sessions
non-dumpable, which hides them from their own user. ``unreadable`` counts the
server processes that could not be looked into.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PeakOpenFiles", "peak_open_files"]

# The server programs whose descriptors are counted (and this process: the embedded server).
SERVER_COMMANDS = frozenset({"sshd", "gesftpserver", "proftpd"})
# sshd runs Green End's subsystem line through the user's shell, which execs it.
SHELLS = frozenset({"sh", "bash", "dash"})
# Seconds between samples: a handle held for a round trip (tens of ms) is seen.
INTERVAL = 0.002


class PeakOpenFiles:
    """The most descriptors under ``root`` any one server process held at once."""

    def __init__(self, root: Path) -> None:
        self.root = str(root.resolve()) + os.sep
        self.peak = 0
        self.samples = 0
        self.unreadable: set[int] = set()
        self._servers: dict[int, bool] = {}

    def _is_server(self, pid: int) -> bool:
        known = self._servers.get(pid)
        if known is None:
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                comm = ""
            known = pid == os.getpid() or comm in SERVER_COMMANDS
            if known or comm not in SHELLS:  # a shell may yet exec a server (Green End's)
                self._servers[pid] = known
        return known

    def _count(self, pid: int) -> int:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except PermissionError:
            self.unreadable.add(pid)
            return 0
        except OSError:  # it exited meanwhile
            return 0
        count = 0
        for fd in fds:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(self.root):
                    count += 1
        return count

    def sample(self) -> None:
        for name in os.listdir("/proc"):
            if name.isdigit() and self._is_server(int(name)):
                self.peak = max(self.peak, self._count(int(name)))
        self.samples += 1


@contextlib.contextmanager
def peak_open_files(root: Path) -> Iterator[PeakOpenFiles]:
    """Sample in a thread for the ``with`` block; ``.peak`` is the answer after it."""
    meter = PeakOpenFiles(root)
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(INTERVAL):
            meter.sample()

    thread = threading.Thread(target=run, name="peak-open-files", daemon=True)
    thread.start()
    try:
        yield meter
    finally:
        stop.set()
        thread.join()
        meter.sample()
