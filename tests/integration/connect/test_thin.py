"""A later get or put run by the mux master for a thin client, against a real sshd.

The later command is a thin client (``cli.thin``): it never loads asyncssh,
the master runs the transfer, its output and exit code are relayed. Each test
has its own 0700 socket directory and ends the master it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest

from sshpipe.testing.sshd import SSHServerInfo
from sshpipe.transport.muxclient import probe, request
from tests.support.cli import run_cli
from tests.support.files import random_file
from tests.support.peers import Peer

pytestmark = pytest.mark.openssh

# SSHPIPE_THIN_MODULES (tests only, read below): the modules the command loaded.
_DUMP = (
    "import os, runpy, sys, atexit\n"
    "atexit.register(lambda: open(os.environ['DUMP'], 'w').write('\\n'.join(sys.modules)))\n"
    "sys.argv[0] = 'sshpipe'\n"
    "runpy.run_module('sshpipe', run_name='__main__')\n"
)


def _until(condition: Callable[[], bool], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)  # polling another process's state: nothing to wait on
    return True


def _gone(pid: int) -> bool:
    """Exited (a zombie is gone too: a PID 1 that reaps no orphans keeps it listed)."""
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


@pytest.fixture
def mux_dir(tmp_path: Path) -> Iterator[Path]:
    # A short path: a UNIX socket's name holds at most 107 bytes.
    directory = Path(f"/tmp/sshpipe-thin-{os.getpid()}-{tmp_path.name[-12:]}")
    directory.mkdir(mode=0o700)
    yield directory
    for entry in directory.iterdir():
        if entry.is_socket():
            pid = probe(str(entry))
            if pid is not None:
                request(str(entry), {"op": "exit"})
                assert _until(partial(_gone, pid))
        entry.unlink(missing_ok=True)
    directory.rmdir()


def _options(peer: Peer, directory: Path) -> list[str]:
    return [
        *peer.cli_options(),
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={directory}/m",
        "-o",
        "ControlPersist=30",
    ]


def _run_dumping(
    dump: Path, *args: str, cwd: Path, wait: bool = True
) -> subprocess.Popen[str] | subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"} | {"DUMP": str(dump)}
    argv = [sys.executable, "-c", _DUMP, *args]
    if not wait:
        return subprocess.Popen(
            argv, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    return subprocess.run(argv, cwd=cwd, env=env, text=True, capture_output=True, timeout=30)


def test_later_get_and_put_run_in_the_master(
    openssh_peer: Peer, tmp_path: Path, mux_dir: Path
) -> None:
    data = random_file(openssh_peer.root / "src.bin", 3 * 1024 * 1024 + 17)
    options = _options(openssh_peer, mux_dir)
    first = run_cli("get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    master = probe(str(mux_dir / "m"))
    assert master is not None
    # The master's own cwd is "/" (or wherever it started): the file lands in
    # the client's, given as a relative name.
    work = tmp_path / "work"
    work.mkdir()
    dump = tmp_path / "modules"
    got = _run_dumping(dump, "get", *options, openssh_peer.spec("src.bin"), "b", cwd=work)
    assert isinstance(got, subprocess.CompletedProcess)
    assert got.returncode == 0, got.stderr
    assert (work / "b").read_bytes() == data
    assert [p.name for p in work.iterdir()] == ["b"]  # no temporary file left
    assert "src.bin -> b: 3.0 MiB" in got.stdout  # the report, names as given
    modules = dump.read_text().split()
    assert "sshpipe.cli.thin" in modules
    assert not {"asyncssh", "asyncio", "sshpipe.cli.command"} & set(modules)
    put = _run_dumping(dump, "put", "-q", *options, "b", openssh_peer.spec("up.bin"), cwd=work)
    assert isinstance(put, subprocess.CompletedProcess)
    assert (put.returncode, put.stdout, put.stderr) == (0, "", "")
    assert (openssh_peer.root / "up.bin").read_bytes() == data
    assert "asyncssh" not in dump.read_text().split()
    (openssh_peer.root / "tree" / "sub").mkdir(parents=True)
    (openssh_peer.root / "tree" / "sub" / "c").write_bytes(b"c" * 100)
    tree = _run_dumping(dump, "get", "-q", "-r", *options, openssh_peer.spec("tree"), "t", cwd=work)
    assert isinstance(tree, subprocess.CompletedProcess)
    assert (tree.returncode, tree.stderr) == (0, "")
    assert (work / "t" / "sub" / "c").read_bytes() == b"c" * 100
    assert "asyncssh" not in dump.read_text().split()
    assert probe(str(mux_dir / "m")) == master  # the same master served all


def test_parallel_later_commands_share_the_masters_connection(
    openssh_peer: Peer, openssh: SSHServerInfo, tmp_path: Path, mux_dir: Path
) -> None:
    data = random_file(openssh_peer.root / "src.bin", 512 * 1024)
    options = _options(openssh_peer, mux_dir)
    first = run_cli("get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    logins = openssh.log_file.read_text(errors="replace").count("Accepted publickey")
    spec = openssh_peer.spec("src.bin")
    slow = ["-l", "4000"]  # Kbit/s: ~1 s each, so that the three overlap
    runs = [
        _run_dumping(
            tmp_path / f"modules{n}",
            "get",
            "-q",
            *slow,
            *options,
            spec,
            f"p{n}",
            cwd=tmp_path,
            wait=False,
        )
        for n in range(3)
    ]
    for n, proc in enumerate(runs):
        assert isinstance(proc, subprocess.Popen)
        _, err = proc.communicate(timeout=30)
        assert (proc.returncode, err) == (0, "")
        assert (tmp_path / f"p{n}").read_bytes() == data
        assert "asyncssh" not in (tmp_path / f"modules{n}").read_text().split()
    # Each run in the master counts its links from slot 0, as separate processes did.
    assert openssh.log_file.read_text(errors="replace").count("Accepted publickey") == logins


def test_errors_are_the_direct_commands(openssh_peer: Peer, tmp_path: Path, mux_dir: Path) -> None:
    options = _options(openssh_peer, mux_dir)
    random_file(openssh_peer.root / "src.bin", 1000)
    first = run_cli("get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    missing = openssh_peer.spec("missing.bin")
    direct = run_cli("get", "-q", *openssh_peer.cli_options(), missing, str(tmp_path / "x"))
    dump = tmp_path / "modules"
    thin = _run_dumping(dump, "get", "-q", *options, missing, "x", cwd=tmp_path)
    assert isinstance(thin, subprocess.CompletedProcess)
    assert "asyncssh" not in dump.read_text().split()
    assert direct.returncode not in (0, 70)
    assert (thin.returncode, thin.stderr) == (direct.returncode, direct.stderr)
    assert thin.stderr.count("\n") == 1
    # A local error names the path as the user wrote it, not as the master reached it.
    local = run_cli("put", "-q", *options, "nope/x", openssh_peer.spec("y"), cwd=tmp_path)
    direct_local = run_cli("put", "-q", *openssh_peer.cli_options(), "nope/x", "h:y", cwd=tmp_path)
    assert (local.returncode, local.stderr) == (direct_local.returncode, direct_local.stderr)


def test_ctrl_c_is_relayed_and_the_master_cancels(
    openssh_peer: Peer, tmp_path: Path, mux_dir: Path
) -> None:
    options = _options(openssh_peer, mux_dir)
    random_file(openssh_peer.root / "small.bin", 1000)
    first = run_cli("get", "-q", *options, openssh_peer.spec("small.bin"), str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    # Slow enough to interrupt on loopback: one request in flight at a time.
    random_file(openssh_peer.root / "big.bin", 4 * 1024 * 1024)
    work = tmp_path / "work"
    work.mkdir()
    dump = tmp_path / "modules"
    limit = ["-l", "8000"]  # Kbit/s: 4 MiB takes 4 s
    proc = _run_dumping(
        dump, "get", "-q", *limit, *options, openssh_peer.spec("big.bin"), "b", cwd=work, wait=False
    )
    assert isinstance(proc, subprocess.Popen)
    assert _until(lambda: any(work.iterdir()))  # the master's temporary file
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    assert (proc.returncode, err) == (130, "sshpipe: interrupted\n")
    assert list(work.iterdir()) == []  # the temporary file removed
    assert "asyncssh" not in dump.read_text().split()
    assert probe(str(mux_dir / "m")) is not None  # the master serves on


def test_no_master_left_the_command_runs_itself(
    openssh_peer: Peer, tmp_path: Path, mux_dir: Path
) -> None:
    options = _options(openssh_peer, mux_dir)
    data = random_file(openssh_peer.root / "src.bin", 1000)
    first = run_cli("get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    pid = probe(str(mux_dir / "m"))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # its socket stays behind, stale
    assert _until(partial(_gone, pid))
    dump = tmp_path / "modules"
    spec = openssh_peer.spec("src.bin")
    second = _run_dumping(dump, "get", "-q", *options, spec, "b", cwd=tmp_path)
    assert isinstance(second, subprocess.CompletedProcess)
    assert (second.returncode, second.stderr) == (0, "")
    assert (tmp_path / "b").read_bytes() == data
    assert "sshpipe.cli.command" in dump.read_text().split()  # it ran here
