"""A server under test as a test sees it (``Peer``), made from any server the tests start.

Servers: OpenSSH's sshd, the embedded asyncssh server, and the foreign ones,
ProFTPD's mod_sftp and Green End's gesftpserver (behind sshd). The fixtures
that start them live in tests/conftest.py and ``sshpipe.testing.plugin``; this
is what they hand out.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

import sshpipe
from sshpipe.testing.embedded import EmbeddedServer, cli_options
from sshpipe.testing.linkemu import LinkEmulator, LinkSpec
from sshpipe.testing.proftpd import ProFTPDInfo
from sshpipe.testing.sshd import SSHServerInfo
from tests.support.files import random_file

__all__ = [
    "ALL_SERVER_PARAMS",
    "FOREIGN_PARAMS",
    "PEER_PARAMS",
    "EmulatedLink",
    "Peer",
    "StartServer",
    "from_embedded",
    "from_greenend",
    "from_openssh",
    "from_proftpd",
]

# The params of a fixture that runs each test against both real servers, each
# param carrying the marker of the server it starts.
PEER_PARAMS = [
    pytest.param("openssh", marks=pytest.mark.openssh),
    pytest.param("asyncssh", marks=pytest.mark.asyncssh_server),
]
# SFTP servers that are neither OpenSSH's nor asyncssh's. Green End sits behind
# sshd, so it needs (and is marked with) both.
FOREIGN_PARAMS = [
    pytest.param("proftpd", marks=pytest.mark.proftpd),
    pytest.param("greenend", marks=[pytest.mark.greenend, pytest.mark.openssh]),
]
ALL_SERVER_PARAMS = [*PEER_PARAMS, *FOREIGN_PARAMS]


@dataclass(frozen=True)
class Peer:
    """A server under test, seen the way a test needs it.

    ``root`` is a local directory the server sees; ``remote(name)`` is the path
    of ``root / name`` as the client must spell it (the embedded server is
    chrooted at ``root``; ProFTPD run as root is chrooted at a directory of
    which ``root`` is the child ``chroot_prefix``; sshd is not chrooted).
    """

    name: str
    host: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    root: Path
    chrooted: bool
    chroot_prefix: str = ""

    def remote(self, name: str) -> str:
        return f"{self.chroot_prefix}/{name}" if self.chrooted else str(self.root / name)

    # Compression off by default in the API clients this makes, where sshpipe's
    # default is auto: on loopback auto does nothing, but under three test
    # workers on two cores a log-in's round trip can take over 10 ms (1 in 60
    # with the cores 3x overloaded), auto then takes loopback for a WAN and logs
    # in a second connection, which tests that count connections or tasks would
    # see (a loaded loopback read as a WAN also trains a get: 3 requests in
    # flight where -R 4 was asked). Compression's own tests ask for auto (or
    # None: sshpipe's default).
    def client(
        self,
        config: sshpipe.TransferConfig | None = None,
        *,
        compression: bool | Literal["auto"] | None = False,
    ) -> sshpipe.Client:
        return sshpipe.connect(
            f"{self.user}@{self.host}",
            port=self.port,
            identity_files=[str(self.client_key)],
            known_hosts=[str(self.known_hosts)],
            ssh_config=[],
            compression=compression,
            config=config,
        )

    def cli_options(self) -> list[str]:
        # Compression off too (see ``client``); ``-o Compression=auto`` before
        # these wins (the first value of a keyword does).
        return [*cli_options(self.port, self.client_key, self.known_hosts), "-o", "Compression=no"]

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


# What the ``faulty_server`` fixture hands a test: start the embedded server with
# this SFTP factory (a fault-injecting one) for the ``async with`` block.
StartServer = Callable[..., contextlib.AbstractAsyncContextManager[Peer]]
# What the ``emulated_link`` fixture hands a test: ``async with emulated_link(peer,
# spec) as (emu, far)`` puts ``peer`` behind the link emulator, seen as ``far``.
EmulatedLink = Callable[
    [Peer, LinkSpec], contextlib.AbstractAsyncContextManager[tuple[LinkEmulator, Peer]]
]


def from_openssh(info: SSHServerInfo, root: Path) -> Peer:
    """sshd, with ``root`` (a directory it can reach, unchrooted) as the test's own."""
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


def from_greenend(info: SSHServerInfo, root: Path) -> Peer:
    """Green End's server behind sshd, with ``root`` (unchrooted) as the test's own."""
    return dataclasses.replace(from_openssh(info, root), name="greenend")


def from_proftpd(info: ProFTPDInfo, root: Path) -> Peer:
    """ProFTPD, with ``root`` (a directory under the one it serves) as the test's own."""
    return Peer(
        "proftpd",
        info.host,
        info.port,
        info.user,
        info.client_key,
        info.known_hosts,
        root,
        chrooted=info.chrooted,
        chroot_prefix=info.remote(root) if info.chrooted else "",
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


def write_source(peer: Peer, size: int, name: str = "src.bin") -> bytes:
    """A random file of ``size`` bytes in the server's root; its bytes."""
    return random_file(peer.root / name, size)
