"""ssh_config honoured as ssh honours it, through the command line against the real sshd.

Each test writes its own config and hands it over with ``-F``: an alias,
``Include``, ``Match``, ``StrictHostKeyChecking`` and ``IdentitiesOnly`` from
the file, ``-o`` beating it, and ``ProxyJump``/``-J`` through a second sshd
whose log (at DEBUG1) shows the forward it made to the target's port: on
loopback everything reaches everything, so the jump host's word is the proof.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

import sshpipe
from sshpipe.testing.linkemu import LinkEmulator
from sshpipe.testing.sshd import SSHServerInfo, openssh_server
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.peers import Peer
from tests.support.waits import eventually

pytestmark = pytest.mark.openssh


@pytest.fixture(scope="module")
def jump(
    sshd_executable: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SSHServerInfo]:
    """A second sshd, the jump host, logging the forwards it makes (DEBUG1).

    sshd keeps the first LogLevel it reads, so the launcher's VERBOSE is
    raised inside a Match block, which does override it.
    """
    workdir = tmp_path_factory.mktemp("jump")
    with openssh_server(workdir, extra_config=["Match User *", "  LogLevel DEBUG1"]) as info:
        yield info


def _forwards_to(jump: SSHServerInfo, port: int) -> int:
    """How many direct-tcpip forwards the jump host made to ``port``."""
    pattern = re.compile(rf"server_request_direct_tcpip: .* target 127\.0\.0\.1 port {port}\b")
    return len(pattern.findall(jump.log_file.read_text()))


def _refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(tmp_path: Path, body: str, *keys: Path, known: Path | None = None) -> Path:
    """A config: ``body``, then a ``Host *`` block with the keys and known_hosts."""
    lines = [body, "Host *"]
    lines += [f"  IdentityFile {key}" for key in keys]
    if known is not None:
        lines.append(f"  UserKnownHostsFile {known}")
    lines.append("  IdentityAgent none")
    path = tmp_path / "config"
    path.write_text("\n".join(lines) + "\n")
    return path


def _known(tmp_path: Path, *servers: SSHServerInfo | Peer) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text("".join(server.known_hosts.read_text() for server in servers))
    return path


def _get(config: Path, source: str, target: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    # One connection a command: the jump host's forwards are counted, and
    # Compression auto's second connection would be forwarded too.
    return run_cli("get", "-F", str(config), "-o", "Compression=no", *extra, source, str(target))


def test_an_alias_its_include_and_its_match_blocks(openssh_peer: Peer, tmp_path: Path) -> None:
    """HostName from the alias, User from an Include, Port from the Match that applies."""
    data = os.urandom(50_000)
    (openssh_peer.root / "src.bin").write_bytes(data)
    (tmp_path / "extra.conf").write_text(f"User {openssh_peer.user}\n")
    body = f"""
Host box
  HostName 127.0.0.1
  Include {tmp_path / "extra.conf"}
# The first Port that applies wins: these two must not.
Match originalhost 127.0.0.1
  Port 1
Match host 127.0.0.1 user nobody-else
  Port 1
Match host 127.0.0.1 user {openssh_peer.user}
  Port {openssh_peer.port}
"""
    known = _known(tmp_path, openssh_peer)
    config = _config(tmp_path, body, openssh_peer.client_key, known=known)
    result = _get(config, f"box:{openssh_peer.remote('src.bin')}", tmp_path / "got.bin")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "got.bin").read_bytes() == data


@pytest.mark.parametrize(
    ("in_file", "option", "recorded"),
    # -o beating the file costs a run of its own here only for this keyword;
    # IdentitiesOnly's test shows -o over the file for the asyncssh side.
    [("yes", None, False), ("accept-new", None, True)],
)
def test_strict_host_key_checking_from_the_file(
    openssh_peer: Peer, tmp_path: Path, in_file: str, option: str | None, recorded: bool
) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"x" * 1000)
    known = tmp_path / "fresh_known_hosts"  # the server's key is not in it
    body = f"Host box\n  HostName 127.0.0.1\n  Port {openssh_peer.port}\n"
    body += f"  StrictHostKeyChecking {in_file}\n"
    config = _config(tmp_path, body, openssh_peer.client_key, known=known)
    extra = ["-o", f"StrictHostKeyChecking={option}"] if option else []
    result = _get(config, f"box:{openssh_peer.remote('src.bin')}", tmp_path / "got", *extra)
    if not recorded:
        assert_one_line_error(result, 7, "not known")
        assert not known.exists()
        return
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "got").read_bytes() == b"x" * 1000
    entry = known.read_text().split()
    assert entry[0] == f"[127.0.0.1]:{openssh_peer.port}"
    assert entry[1:3] == openssh_peer.known_hosts.read_text().split()[1:3]


@pytest.fixture
def agent(openssh_peer: Peer, tmp_path: Path) -> Iterator[Path]:
    """An ssh-agent holding the key sshd accepts.

    Without -D the agent binds its socket, then forks and prints its pid: the
    socket is there when the command returns.
    """
    socket_path = tmp_path / "agent.sock"
    started = subprocess.run(
        ["ssh-agent", "-s", "-a", str(socket_path)], capture_output=True, text=True, timeout=10
    )
    found = re.search(r"SSH_AGENT_PID=(\d+)", started.stdout)
    assert started.returncode == 0 and found, started.stderr
    pid = int(found[1])
    try:
        env = {**os.environ, "SSH_AUTH_SOCK": str(socket_path)}
        subprocess.run(
            ["ssh-add", "-q", str(openssh_peer.client_key)], env=env, check=True, timeout=10
        )
        yield socket_path
    finally:
        os.kill(pid, signal.SIGTERM)


def test_identities_only_and_hostname_from_the_file_and_o_beating_them(
    openssh_peer: Peer, tmp_path: Path, agent: Path
) -> None:
    """The agent holds the right key, the config names a wrong one: IdentitiesOnly decides."""
    (openssh_peer.root / "src.bin").write_bytes(b"y" * 1000)
    wrong = tmp_path / "wrong_key"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(wrong))
    # -o HostName beats the file's, and Match host in the file sees it (the Port).
    body = f"""
Host box
  HostName no-such-host.invalid
  IdentityFile {wrong}
  IdentityAgent {agent}
  IdentitiesOnly yes
  UserKnownHostsFile {openssh_peer.known_hosts}
Match host 127.0.0.1
  Port {openssh_peer.port}
"""
    config = _config(tmp_path, body)
    source = f"box:{openssh_peer.remote('src.bin')}"
    address = ["-o", "HostName=127.0.0.1"]
    refused = _get(config, source, tmp_path / "got", *address)
    assert_one_line_error(refused, 6, "authentication failed")
    allowed = _get(config, source, tmp_path / "got", *address, "-o", "IdentitiesOnly=no")
    assert allowed.returncode == 0, allowed.stderr
    assert (tmp_path / "got").read_bytes() == b"y" * 1000


async def test_proxy_jump_from_the_file_then_J_then_J_none(
    openssh_peer: Peer, jump: SSHServerInfo, tmp_path: Path
) -> None:
    data = os.urandom(200_000)
    (openssh_peer.root / "src.bin").write_bytes(data)
    body = f"""
Host target
  HostName 127.0.0.1
  Port {openssh_peer.port}
  ProxyJump hop
Host direct
  HostName 127.0.0.1
  Port {openssh_peer.port}
  ProxyJump 127.0.0.1:{_refused_port()}
Host hop
  HostName 127.0.0.1
  Port {jump.port}
"""
    known = _known(tmp_path, openssh_peer, jump)
    config = _config(tmp_path, body, openssh_peer.client_key, jump.client_key, known=known)
    before = _forwards_to(jump, openssh_peer.port)
    via_file = _get(config, f"target:{openssh_peer.remote('src.bin')}", tmp_path / "a.bin")
    assert via_file.returncode == 0, via_file.stderr
    assert _forwards_to(jump, openssh_peer.port) == before + 1
    # -J beats the file's ProxyJump (a dead port for "direct") and takes
    # a hop in ssh's spelling: the hop's own block still gives it its port.
    via_j = _get(
        config, f"direct:{openssh_peer.remote('src.bin')}", tmp_path / "b.bin", "-J", "hop"
    )
    assert via_j.returncode == 0, via_j.stderr
    assert _forwards_to(jump, openssh_peer.port) == before + 2
    for name in ("a.bin", "b.bin"):
        assert (tmp_path / name).read_bytes() == data
    # proxy_jump "none" (-J none): straight to the target, whatever the file
    # says (the API in-process: a third command would cost a second).
    async with sshpipe.connect(
        "target", ssh_config=[config], proxy_jump="none", compression=False
    ) as client:
        await client.get(openssh_peer.remote("src.bin"), tmp_path / "c.bin")
    assert (tmp_path / "c.bin").read_bytes() == data
    assert _forwards_to(jump, openssh_peer.port) == before + 2


# A ProxyCommand that proves it ran: it notes a line in a file, then relays
# stdin and stdout to the port it is given.
_RELAY = """\
import os, socket, sys, threading
with open(sys.argv[1], "a") as note:
    note.write("ran\\n")
sock = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
def up():
    while data := os.read(0, 65536):
        sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while data := sock.recv(65536):
    os.write(1, data)
"""


async def test_proxy_command_or_proxy_jump_the_first_obtained_wins(
    openssh_peer: Peer, jump: SSHServerInfo, tmp_path: Path
) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"through")
    relay, ran = tmp_path / "relay.py", tmp_path / "ran"
    relay.write_text(_RELAY)
    command = f"{sys.executable} {relay} {ran} {openssh_peer.port}"
    body = f"""
Host command-first
  HostName 127.0.0.1
  Port {openssh_peer.port}
  ProxyCommand {command}
  ProxyJump 127.0.0.1:{_refused_port()}
Host jump-first
  HostName 127.0.0.1
  Port {openssh_peer.port}
  ProxyJump hop
  ProxyCommand /bin/false
Host hop
  HostName 127.0.0.1
  Port {jump.port}
"""
    known = _known(tmp_path, openssh_peer, jump)
    config = _config(tmp_path, body, openssh_peer.client_key, jump.client_key, known=known)
    before = _forwards_to(jump, openssh_peer.port)

    async def fetch(host: str, **options: Any) -> bytes:
        # One connection each (Compression auto's second would be forwarded too).
        async with sshpipe.connect(
            host, ssh_config=[config], compression=False, **options
        ) as client:
            await client.get(openssh_peer.remote("src.bin"), tmp_path / "got")
        return (tmp_path / "got").read_bytes()

    def runs() -> int:
        return len(ran.read_text().splitlines()) if ran.exists() else 0

    # ProxyCommand first: the ProxyJump after it (a dead port) never applies.
    assert await fetch("command-first") == b"through"
    assert (runs(), _forwards_to(jump, openssh_peer.port)) == (1, before)
    # ProxyJump first: through the hop; the ProxyCommand after it (false) never runs.
    assert await fetch("jump-first") == b"through"
    assert _forwards_to(jump, openssh_peer.port) == before + 1
    # -J none comes before the file: straight there, no ProxyCommand either.
    assert await fetch("command-first", proxy_jump="none") == b"through"
    # -o ProxyCommand comes before the file's ProxyJump.
    assert await fetch("jump-first", ssh_options={"ProxyCommand": command}) == b"through"
    assert (runs(), _forwards_to(jump, openssh_peer.port)) == (2, before + 1)


async def test_a_jump_host_that_fails_is_named(
    openssh_peer: Peer, jump: SSHServerInfo, tmp_path: Path
) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"z")
    body = f"Host target\n  HostName 127.0.0.1\n  Port {openssh_peer.port}\n"
    known = _known(tmp_path, openssh_peer)  # the jump host's key is not in it
    config = _config(tmp_path, body, openssh_peer.client_key, jump.client_key, known=known)
    source = f"target:{openssh_peer.remote('src.bin')}"
    unknown = _get(config, source, tmp_path / "got", "-J", f"127.0.0.1:{jump.port}")
    assert_one_line_error(unknown, 7, f"jump host 127.0.0.1:{jump.port}: ", "not known")
    assert not (tmp_path / "got").exists()
    # Refused (in-process: the exit code is the class's, shown above).
    port = _refused_port()
    client = sshpipe.connect("target", ssh_config=[config], proxy_jump=f"me@127.0.0.1:{port}")
    with pytest.raises(sshpipe.ConnectError) as caught:
        await client.open()
    assert (
        str(caught.value) == f"jump host me@127.0.0.1:{port}: 127.0.0.1:{port}: connection refused"
    )
    assert caught.value.exit_code == 5


async def test_a_reconnect_goes_through_the_jump_host_again(
    link: tuple[LinkEmulator, Peer], jump: SSHServerInfo, tmp_path: Path
) -> None:
    """The API's proxy_jump: a connection cut behind the jump host is reopened through it."""
    emu, far = link
    data = os.urandom(4 * 1024 * 1024)
    (far.root / "big.bin").write_bytes(data)
    known = _known(tmp_path, far, jump)
    client = sshpipe.connect(
        f"{far.user}@127.0.0.1",
        port=far.port,
        identity_files=[far.client_key, jump.client_key],
        known_hosts=[known],
        ssh_config=[],
        proxy_jump=f"127.0.0.1:{jump.port}",
        compression=False,  # one connection to cut (auto's second would go through the hop too)
    )
    before = _forwards_to(jump, far.port)
    logins, logouts = _count(jump, "Accepted publickey"), _count(jump, "Disconnected from user")
    async with client:
        emu.cut_after(512 * 1024, direction="down")
        stats = await client.get(far.remote("big.bin"), tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data
    assert stats.reconnects == 1
    assert _forwards_to(jump, far.port) >= before + 2
    # Closing the client closed every hop it opened, the cut one's too.
    opened = _count(jump, "Accepted publickey") - logins
    await eventually(lambda: _count(jump, "Disconnected from user") - logouts == opened)


def _count(server: SSHServerInfo, text: str) -> int:
    return server.log_file.read_text().count(text)
