"""Shared fixtures: a real OpenSSH sshd (session-wide), the in-process asyncssh server,
both behind the link emulator, and a throwaway state directory for journals."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from sshpipe.linkemu import LinkEmulator, LinkSpec
from sshpipe.testing.embedded import SFTPFactory, chrooted_sftp, embedded_server
from sshpipe.testing.sshd import SSHServerInfo
from tests.support.peers import Peer, from_embedded, from_openssh

# The real sshd: ``openssh`` (session-wide) and ``sshd_executable``.
pytest_plugins = ["sshpipe.testing.plugin"]

__all__ = [
    "asyncssh_peer",
    "faulty_server",
    "link",
    "openssh_peer",
    "peer",
    "slow_link",
    "state_home",
]


@pytest.fixture
def openssh_peer(openssh: SSHServerInfo, tmp_path: Path) -> Peer:
    """The real sshd, with a fresh directory of its own for this test."""
    root = openssh.root / tmp_path.name
    root.mkdir()
    return from_openssh(openssh, root)


@pytest.fixture
async def asyncssh_peer(tmp_path: Path) -> AsyncIterator[Peer]:
    async with embedded_server(tmp_path / "embedded") as server:
        yield from_embedded(server)


@pytest.fixture(params=["openssh", "asyncssh"])
def peer(request: pytest.FixtureRequest) -> Peer:
    """Each test taking ``peer`` runs once against each real server."""
    fixture: Peer = request.getfixturevalue(f"{request.param}_peer")
    return fixture


@pytest.fixture
def faulty_server(
    tmp_path: Path,
) -> Callable[[SFTPFactory], contextlib.AbstractAsyncContextManager[Peer]]:
    """Start the embedded server with a fault-injecting SFTPServer factory."""

    @contextlib.asynccontextmanager
    async def start(factory: SFTPFactory = chrooted_sftp) -> AsyncIterator[Peer]:
        async with embedded_server(tmp_path / "faulty", sftp_factory=factory) as server:
            yield from_embedded(server)

    return start


@pytest.fixture
async def link(openssh_peer: Peer, tmp_path: Path) -> AsyncIterator[tuple[LinkEmulator, Peer]]:
    """sshd seen through a 2 ms emulated link whose connections the test can cut."""
    async with LinkEmulator(openssh_peer.host, openssh_peer.port, LinkSpec(rtt=0.002)) as emu:
        yield emu, openssh_peer.behind(emu.port, tmp_path)


@pytest.fixture
async def slow_link(openssh_peer: Peer, tmp_path: Path) -> AsyncIterator[tuple[Peer, LinkEmulator]]:
    """sshd behind a 40 Mbit/s link: 24 MiB take ~5 s, time to kill the copy mid-way."""
    async with LinkEmulator(
        openssh_peer.host, openssh_peer.port, LinkSpec(rtt=0.004, rate=40e6)
    ) as emu:
        yield openssh_peer.behind(emu.port, tmp_path), emu


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Journals go to a throwaway state directory (CLI subprocesses inherit it).

    Modules whose every test writes journals use it with ``usefixtures``.
    """
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "sshpipe" / "resume"
