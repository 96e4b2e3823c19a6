"""An in-process SFTP server on loopback with throwaway keys (asyncssh's server).

It backs ``python -m sshpipe demo`` and ``serve`` (no server of the user's
needed) and the integration tests, where subclasses of ``asyncssh.SFTPServer``
inject faults. This is the one module besides ``_ssh.py`` that imports
asyncssh: it is the server side, which the client never touches.
"""

from __future__ import annotations

import contextlib
import getpass
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

SFTPFactory = Callable[[asyncssh.SSHServerChannel[bytes], Path], asyncssh.SFTPServer]
ProcessFactory = Callable[[asyncssh.SSHServerProcess[str]], Awaitable[None]]


def chrooted_sftp(chan: asyncssh.SSHServerChannel[bytes], root: Path) -> asyncssh.SFTPServer:
    return asyncssh.SFTPServer(chan, chroot=os.fsencode(root))


@dataclass(frozen=True, kw_only=True)
class EmbeddedServer:
    """Where the embedded server listens and how to log in to it.

    Attributes:
        host, port: the loopback address it listens on.
        username: the login name it accepts.
        client_key: private key file it authorises.
        known_hosts: a known_hosts file holding its host key.
        root: the directory served as "/" (remote paths are relative to it).
    """

    host: str
    port: int
    username: str
    client_key: Path
    known_hosts: Path
    root: Path

    @property
    def destination(self) -> str:
        return f"{self.username}@{self.host}"

    def cli_options(self) -> list[str]:
        """Options that point ``python -m sshpipe`` at this server."""
        return cli_options(self.port, self.client_key, self.known_hosts)


def cli_options(port: int, client_key: Path, known_hosts: Path) -> list[str]:
    """``python -m sshpipe`` options for a loopback server with its own keys, no ssh_config."""
    return [
        "-P",
        str(port),
        "-i",
        str(client_key),
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-F",
        "/dev/null",
    ]


def _write_key(key: asyncssh.SSHKey, path: Path) -> None:
    path.write_bytes(key.export_private_key())
    path.chmod(0o600)


@contextlib.asynccontextmanager
async def embedded_server(
    workdir: Path,
    *,
    root: Path | None = None,
    sftp_factory: SFTPFactory = chrooted_sftp,
    process_factory: ProcessFactory | None = None,
    server_factory: Callable[[], asyncssh.SSHServer] | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    server_version: str | None = None,
) -> AsyncIterator[EmbeddedServer]:
    """Run the server for the duration of the ``async with`` block.

    Args:
        workdir: where keys and known_hosts are written.
        root: directory to serve (default ``workdir/root``).
        sftp_factory: builds the SFTPServer for each session (fault injection).
        process_factory: runs exec and shell requests (none by default).
        server_factory: an ``asyncssh.SSHServer`` whose ``session_requested``
            serves every session itself (``sftp_factory`` is then unused): a
            server written from the wire up (``sshpipe.testing.rawsftp``).
        host, port: listen address; port 0 picks a free one.
        server_version: the software part of the server's banner
            (``SSH-2.0-<this>``; default asyncssh's own).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    root = root or workdir / "root"
    root.mkdir(parents=True, exist_ok=True)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key_path = workdir / "client_key"
    _write_key(client_key, client_key_path)
    username = getpass.getuser()
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())

    sessions: dict[str, Any] = (
        {"server_factory": server_factory, "encoding": None}
        if server_factory is not None
        else {"sftp_factory": lambda chan: sftp_factory(chan, root)}
    )
    if process_factory is not None:
        sessions["process_factory"] = process_factory
    if server_version is not None:
        sessions["server_version"] = server_version
    server = await asyncssh.listen(
        host,
        port,
        server_host_keys=[host_key],
        authorized_client_keys=authorized,
        allow_scp=False,
        **sessions,
    )
    bound_port = server.sockets[0].getsockname()[1]
    known_hosts = workdir / "known_hosts"
    label = host if bound_port == 22 else f"[{host}]:{bound_port}"
    known_hosts.write_text(f"{label} {host_key.export_public_key().decode().strip()}\n")
    try:
        yield EmbeddedServer(
            host=host,
            port=bound_port,
            username=username,
            client_key=client_key_path,
            known_hosts=known_hosts,
            root=root,
        )
    finally:
        server.close()
        await server.wait_closed()
