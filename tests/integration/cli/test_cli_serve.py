"""``python -m sshpipe serve``: the commands it prints work, and a signal leaves nothing behind.

The server runs in a subprocess, as a user starts it; the printed commands
run as printed (split as a shell would).
"""

from __future__ import annotations

import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.files import random_file

STARTUP_LIMIT = 60.0  # seconds for serve to print its commands


class Serve:
    """``python -m sshpipe serve --root ROOT`` in a subprocess, its lines read by a thread."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sshpipe", "serve", "--root", str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.seen: list[str] = []

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # end of output

    def until(self, marker: str) -> list[str]:
        """The lines printed from here up to one with ``marker`` in it."""
        got: list[str] = []
        deadline = time.monotonic() + STARTUP_LIMIT
        while not got or marker not in got[-1]:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                self.proc.kill()
                pytest.fail(f"serve printed {[*self.seen, *got]!r} (waiting for {marker!r})")
            got.append(line)
        self.seen += got
        return got

    def stop(self, signum: signal.Signals) -> tuple[int, list[str], str]:
        """Send ``signum``; the exit code, the lines printed after those read, stderr."""
        self.proc.send_signal(signum)
        self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        assert self.proc.stderr is not None
        rest: list[str] = []
        while (line := self.lines.get_nowait()) is not None:
            rest.append(line)
        return self.proc.returncode, rest, self.proc.stderr.read()


def key_folder(command: list[str]) -> Path:
    """The temporary folder serve keeps its keys in: the ``-i`` key's grandparent."""
    return Path(command[command.index("-i") + 1]).parent.parent


# Three interpreters (serve, then the get and the put it printed), each loading
# asyncssh: 1.5-2.5 s on the 2-core CI machine, more when it is busy.
@pytest.mark.slow
def test_printed_commands_work_and_sigterm_removes_the_keys(tmp_path: Path) -> None:
    served, here = tmp_path / "served", tmp_path / "client"
    served.mkdir()
    here.mkdir()
    data = random_file(served / "data.bin", 300_007)
    (served / ".hidden").write_bytes(b"not this one")
    serve = Serve(served)
    try:
        serve.until("try:")
        get = shlex.split(serve.until(shlex.quote(sys.executable))[-1])
        put = shlex.split(serve.until(shlex.quote(sys.executable))[-1])
        assert get[3] == "get" and put[3] == "put"
        for command in (get, put):
            done = subprocess.run(command, cwd=here, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
        assert (here / "data.bin").read_bytes() == data
        assert (served / "copy-of-data.bin").read_bytes() == data
        folder = key_folder(get)
        assert folder.name.startswith("sshpipe-serve-") and folder.is_dir()
    finally:
        code, rest, err = serve.stop(signal.SIGTERM)
    assert (code, rest, err) == (0, ["stopped"], "")
    assert not folder.exists()


def test_an_empty_root_says_how_to_make_a_file_and_sigint_removes_the_keys(
    tmp_path: Path,
) -> None:
    served, here = tmp_path / "served", tmp_path / "client"
    served.mkdir()
    here.mkdir()
    serve = Serve(served)
    try:
        serve.until("has no file to get yet")
        make, put, get = (
            shlex.split(serve.until(shlex.quote(sys.executable))[-1]) for _ in range(3)
        )
        # The commands as the test above runs them; this one makes the file only.
        done = subprocess.run(make, cwd=here, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert put[3:4] + put[-2:] == ["put", "./hello.bin", get[-2]]
        assert get[3] == "get" and get[-2].endswith(":/hello.bin")
        folder = key_folder(put)
    finally:
        code, rest, err = serve.stop(signal.SIGINT)
    assert len((here / "hello.bin").read_bytes()) == 1 << 20
    assert (code, rest, err) == (0, ["stopped"], "")
    assert not folder.exists()
