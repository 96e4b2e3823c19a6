"""Connection reuse through the CLI against a real sshd: ControlMaster auto, ControlPersist, -O.

Each test has its own 0700 socket directory, and ends every master it
started (``-O exit``, then the pid is gone), so no process outlives it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.linkemu import LinkEmulator
from sshpipe.testing.sshd import SSHServerInfo
from sshpipe.transport.muxclient import probe, request
from tests.support.cli import assert_one_line_error, run_cli, run_cli_async
from tests.support.files import random_file
from tests.support.peers import Peer

pytestmark = pytest.mark.openssh


def _socket_dir(tmp_path: Path) -> Path:
    # A short path: a UNIX socket's name holds at most 107 bytes.
    directory = Path(f"/tmp/sshpipe-mux-test-{os.getpid()}-{tmp_path.name[-12:]}")
    directory.mkdir(mode=0o700)
    return directory


def _accepted(peer_log: Path) -> int:
    """Log-ins sshd accepted so far (LogLevel VERBOSE logs each)."""
    return peer_log.read_text(errors="replace").count("Accepted publickey")


def _alive(pid: int) -> bool:
    """Running: a zombie is gone too (a PID 1 that reaps no orphans keeps it listed)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def _gone(pid: int, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)  # polling a pid: nothing to wait on for a non-child
    return False


def _master_pid(directory: Path) -> int:
    """The pid of the one master in ``directory``, asked over its socket (no CLI start-up)."""
    (socket_path,) = [p for p in directory.iterdir() if p.is_socket()]
    pid = probe(str(socket_path))
    assert pid is not None
    return pid


@pytest.fixture
def openssh_log(openssh: SSHServerInfo) -> Path:
    return openssh.log_file


@pytest.fixture
def mux_dir(tmp_path: Path) -> Iterator[Path]:
    directory = _socket_dir(tmp_path)
    yield directory
    for entry in directory.iterdir():
        entry.unlink()
    directory.rmdir()


def _mux_options(peer: Peer, directory: Path, persist: str = "30") -> list[str]:
    return [
        *peer.cli_options(),
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={directory}/%r@%h:%p",
        "-o",
        f"ControlPersist={persist}",
    ]


# Compression auto too: a compressed connection of its own would bypass the master.
@pytest.mark.parametrize("compression", [[], ["-o", "Compression=auto"]], ids=["default", "auto"])
def test_second_command_reuses_the_masters_connection(
    openssh_peer: Peer, openssh_log: Path, tmp_path: Path, mux_dir: Path, compression: list[str]
) -> None:
    data = random_file(openssh_peer.root / "src.bin", 300_000)
    options = [*compression, *_mux_options(openssh_peer, mux_dir)]
    before = _accepted(openssh_log)
    first = run_cli("get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    pid = _master_pid(mux_dir)
    assert _alive(pid)
    second = run_cli("get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "b"))
    assert second.returncode == 0, second.stderr
    put = run_cli("put", "-q", *options, str(tmp_path / "b"), openssh_peer.spec("up.bin"))
    assert put.returncode == 0, put.stderr
    assert (tmp_path / "a").read_bytes() == data
    assert (tmp_path / "b").read_bytes() == data
    assert (openssh_peer.root / "up.bin").read_bytes() == data
    assert _accepted(openssh_log) - before == 1  # one log-in for three commands
    check = run_cli("-O", "check", *options, f"{openssh_peer.user}@{openssh_peer.host}")
    assert (check.returncode, check.stderr.strip()) == (0, f"Master running (pid={pid})")
    if os.geteuid() == 0:
        _another_uid_is_refused(mux_dir)
    # A master killed leaves its socket behind: the next command replaces it.
    os.kill(pid, signal.SIGKILL)
    assert _gone(pid)
    again = run_cli("get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "c"))
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "c").read_bytes() == data
    exit_ = run_cli("-O", "exit", *options, f"{openssh_peer.user}@{openssh_peer.host}")
    assert exit_.returncode == 0 and "Exit request sent." in exit_.stderr
    assert list(mux_dir.iterdir()) == [] or _wait_empty(mux_dir)  # the socket goes with it
    gone = run_cli("-O", "check", *options, f"{openssh_peer.user}@{openssh_peer.host}")
    assert_one_line_error(gone, 5, "Control socket connect(")
    assert _accepted(openssh_log) - before == 2


def _another_uid_is_refused(directory: Path) -> None:
    """With the directory and socket opened to all, a client of uid nobody is still dropped."""
    (sock,) = [p for p in directory.iterdir() if p.is_socket()]
    directory.chmod(0o755)
    sock.chmod(0o666)
    try:
        asked = subprocess.run(
            [sys.executable, "-c", _ASK_AS_NOBODY, str(sock)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        directory.chmod(0o700)
        sock.chmod(0o600)
    assert asked.stdout.strip() == "refused", asked.stderr
    assert probe(str(sock)) is not None  # and the master serves its own uid on


_ASK_AS_NOBODY = """
import os, socket, sys
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
try:
    s.sendall(b'{"op": "check"}\\n')
    answer = s.recv(100)
except OSError:
    answer = b""
print("refused" if not answer else answer.decode())
"""


def _wait_empty(directory: Path, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not list(directory.iterdir()):
            return True
        time.sleep(0.02)  # the master removes it as it exits: nothing to wait on
    return False


def test_a_tree_runs_its_commands_in_the_masters_shell(
    openssh_peer: Peer, tmp_path: Path, mux_dir: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    files = {f"f{i}": random_file(tree / f"f{i}", 1000 * i) for i in range(1, 6)}
    files["sub/big"] = random_file(tree / "sub" / "big", 600_000)
    options = _mux_options(openssh_peer, mux_dir, persist="no")
    put = run_cli("put", "-r", "--verify", *options, str(tree), openssh_peer.spec(""))
    assert put.returncode == 0, put.stderr
    # sha256sum ran in the shell the master keeps (as a direct tree would):
    # not the size-only fallback of a link with no shell.
    assert "verified: hash-remote" in put.stdout
    for name, data in files.items():
        assert (openssh_peer.root / "tree" / name).read_bytes() == data
    assert _wait_empty(mux_dir)  # ControlPersist=no: gone with its one command


def test_a_master_persists_for_control_persist_then_goes(
    openssh_peer: Peer, tmp_path: Path, mux_dir: Path
) -> None:
    data = random_file(openssh_peer.root / "src.bin", 1000)
    options = _mux_options(openssh_peer, mux_dir, persist="1")
    got = run_cli("get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "a"))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "a").read_bytes() == data
    pid = _master_pid(mux_dir)  # still there after its only client left
    assert _gone(pid, within=5.0)
    assert _wait_empty(mux_dir)


def test_a_socket_directory_others_can_enter_is_refused(
    openssh_peer: Peer, tmp_path: Path, mux_dir: Path
) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"x")
    mux_dir.chmod(0o755)
    result = run_cli(
        "get", *_mux_options(openssh_peer, mux_dir), openssh_peer.spec("src.bin"), str(tmp_path)
    )
    assert_one_line_error(result, 3, "mode 0700", str(mux_dir))
    assert not (tmp_path / "src.bin").exists()


def test_a_failed_log_in_is_the_commands_own_error(
    openssh_peer: Peer, tmp_path: Path, mux_dir: Path
) -> None:
    options = _mux_options(openssh_peer, mux_dir)
    options[options.index("-i") + 1] = str(tmp_path / "no-such-key")
    result = run_cli("get", *options, openssh_peer.spec("src.bin"), str(tmp_path))
    assert_one_line_error(result, 6, "no-such-key")
    assert list(mux_dir.iterdir()) == []  # no master, no socket left


async def test_a_master_whose_connection_breaks_leaves_and_the_copy_goes_on_directly(
    link: tuple[LinkEmulator, Peer], tmp_path: Path, mux_dir: Path
) -> None:
    emu, far = link
    data = random_file(far.root / "big.bin", 6 * 1024 * 1024)
    options = _mux_options(far, mux_dir)
    first = await run_cli_async("get", "-q", *options, far.spec("big.bin"), str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    pid = _master_pid(mux_dir)
    # The master's connection (the only one through the link) is reset 2 MiB
    # into the next command's copy: the master goes, the copy reconnects by
    # itself, directly, and finishes.
    emu.cut_after(2 * 1024 * 1024)
    second = await run_cli_async(
        "get", "--retries", "3", *options, far.spec("big.bin"), str(tmp_path / "b")
    )
    assert second.returncode == 0, second.stderr
    assert (tmp_path / "b").read_bytes() == data
    assert (tmp_path / "a").read_bytes() == data
    assert _gone(pid)
    assert _wait_empty(mux_dir)


async def test_the_api_runs_over_a_master_given_its_control_path(
    openssh_peer: Peer, openssh_log: Path, tmp_path: Path, mux_dir: Path
) -> None:
    data = random_file(openssh_peer.root / "src.bin", 200_000)
    options = _mux_options(openssh_peer, mux_dir, persist="30")
    first = await run_cli_async(
        "get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "a")
    )
    assert first.returncode == 0, first.stderr
    (sock,) = [p for p in mux_dir.iterdir() if p.is_socket()]
    before = _accepted(openssh_log)
    client = sshpipe.connect(
        f"{openssh_peer.user}@{openssh_peer.host}",
        port=openssh_peer.port,
        identity_files=[openssh_peer.client_key],
        known_hosts=[openssh_peer.known_hosts],
        ssh_config=[],
        control_path=sock,
    )
    async with client:
        stats = await client.get(openssh_peer.remote("src.bin"), tmp_path / "b")
        await client.put(tmp_path / "b", openssh_peer.remote("up.bin"))
    assert stats.bytes == len(data)
    assert (tmp_path / "b").read_bytes() == data
    assert (openssh_peer.root / "up.bin").read_bytes() == data
    assert _accepted(openssh_log) == before  # no log-in of its own
    request(str(sock), {"op": "exit"})
    assert _wait_empty(mux_dir)


async def test_a_stall_drops_the_masters_connection_as_it_would_a_direct_one(
    link: tuple[LinkEmulator, Peer], tmp_path: Path, mux_dir: Path
) -> None:
    emu, far = link
    data = random_file(far.root / "src.bin", 100_000)
    options = _mux_options(far, mux_dir)
    first = await run_cli_async("get", "-q", *options, far.spec("src.bin"), str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    pid = _master_pid(mux_dir)
    # Nothing moves for 2.5 s: the command's channel through the master counts
    # as stalled after 1 s, the master drops its connection (and leaves), and
    # the copy reconnects directly, through once the link moves again.
    emu.stall(2.5)
    second = await run_cli_async(
        "get", "-q", "--stall-timeout", "1", *options, far.spec("src.bin"), str(tmp_path / "b")
    )
    assert second.returncode == 0, second.stderr
    assert (tmp_path / "b").read_bytes() == data
    assert _gone(pid)
    assert _wait_empty(mux_dir)


def test_ssh_config_can_ask_for_a_master(openssh_peer: Peer, tmp_path: Path, mux_dir: Path) -> None:
    data = random_file(openssh_peer.root / "src.bin", 1000)
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host {openssh_peer.host}\n"
        "  ControlMaster auto\n"
        f"  ControlPath {mux_dir}/%C\n"
        "  ControlPersist 30\n"
    )
    options = [*openssh_peer.cli_options(), "-F", str(config)]  # the last -F is read
    got = run_cli("get", "-q", *options, openssh_peer.spec("src.bin"), str(tmp_path / "a"))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "a").read_bytes() == data
    pid = _master_pid(mux_dir)  # started from the file's ControlMaster, at its ControlPath
    # -O finds it from the same file, as ssh -O does.
    where = ["-F", str(config), "-P", str(openssh_peer.port)]
    exit_ = run_cli("-O", "exit", *where, f"{openssh_peer.user}@{openssh_peer.host}")
    assert exit_.returncode == 0, exit_.stderr
    assert _gone(pid)
