"""Shared fixtures: a real OpenSSH sshd (session-wide) and the in-process asyncssh server."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.embedded import (
    EmbeddedServer,
    SFTPFactory,
    chrooted_sftp,
    cli_options,
    embedded_server,
)
from tests.support.fixtures import openssh
from tests.support.openssh import SSHServerInfo

__all__ = ["Peer", "asyncssh_peer", "openssh", "openssh_peer", "peer"]


@dataclass(frozen=True)
class Peer:
    """A server under test, seen the way a test needs it.

    ``root`` is a local directory the server sees; ``remote(name)`` is the path
    of ``root / name`` as the client must spell it (the embedded server is
    chrooted at ``root``, sshd is not).
    """

    name: str
    host: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    root: Path
    chrooted: bool

    def remote(self, name: str) -> str:
        return f"/{name}" if self.chrooted else str(self.root / name)

    def client(self, config: sshpipe.TransferConfig | None = None) -> sshpipe.Client:
        return sshpipe.connect(
            f"{self.user}@{self.host}",
            port=self.port,
            identity_files=[str(self.client_key)],
            known_hosts=[str(self.known_hosts)],
            ssh_config=[],
            config=config,
        )

    def cli_options(self) -> list[str]:
        return cli_options(self.port, self.client_key, self.known_hosts)

    def spec(self, name: str) -> str:
        return f"{self.user}@{self.host}:{self.remote(name)}"

    def behind(self, port: int, workdir: Path) -> Peer:
        """This peer reached through a proxy (the link emulator) on ``port``.

        The same host key, known under the proxy's port: checking stays on.
        """
        known = workdir / "known_hosts_link"
        text = self.known_hosts.read_text()
        known.write_text(text.replace(f"]:{self.port} ", f"]:{port} "))
        return dataclasses.replace(self, port=port, known_hosts=known)


def _from_openssh(info: SSHServerInfo, root: Path) -> Peer:
    return Peer(
        "openssh",
        info.host,
        info.port,
        info.user,
        info.client_key,
        info.known_hosts,
        root,
        chrooted=False,
    )


def from_embedded(server: EmbeddedServer) -> Peer:
    return Peer(
        "asyncssh",
        server.host,
        server.port,
        server.username,
        server.client_key,
        server.known_hosts,
        server.root,
        chrooted=True,
    )


@pytest.fixture
def openssh_peer(openssh: SSHServerInfo, tmp_path: Path) -> Peer:
    """The real sshd, with a fresh directory of its own for this test."""
    root = openssh.root / tmp_path.name
    root.mkdir()
    return _from_openssh(openssh, root)


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
