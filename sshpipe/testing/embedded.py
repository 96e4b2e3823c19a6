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
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
from asyncssh.stream import SSHServerStreamSession

SFTPFactory = Callable[[asyncssh.SSHServerChannel[bytes], Path], asyncssh.SFTPServer]
ProcessFactory = Callable[[asyncssh.SSHServerProcess[str]], Awaitable[None]]
# The SFTP server of one channel, its root already chosen.
ChannelSFTP = Callable[[Any], asyncssh.SFTPServer]
# What asyncssh's server speaks unless told otherwise (and what sshpipe asks for).
SFTP_VERSION = 3


def chrooted_sftp(chan: asyncssh.SSHServerChannel[bytes], root: Path) -> asyncssh.SFTPServer:
    return asyncssh.SFTPServer(chan, chroot=os.fsencode(root))


class SFTPOnlySession(SSHServerStreamSession[bytes]):
    """A session channel that serves the SFTP subsystem and nothing else.

    A subclass sees the channel's bytes before asyncssh's SFTP server does
    (``sshpipe.testing.restrictive`` taps them there). ``closed`` is called
    once the channel is gone, so a per-connection count can go down again.
    """

    def __init__(self, sftp: ChannelSFTP) -> None:
        super().__init__(None, sftp, SFTP_VERSION)
        self.closed: Callable[[], None] = lambda: None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed()
        super().connection_lost(exc)


SessionFactory = Callable[[ChannelSFTP], SFTPOnlySession]


class _Sessions(asyncssh.SSHServer):
    """Opens each session itself: to refuse those past ``max_sessions``, or to tap them.

    One instance per connection (asyncssh calls the factory for each), so the
    count is per connection, as sshd's MaxSessions is.
    """

    def __init__(
        self,
        sftp: ChannelSFTP,
        max_sessions: int | None,
        session: SessionFactory,
        refused: Callable[[], None],
    ) -> None:
        self._sftp = sftp
        self._max = max_sessions
        self._session = session
        self._refused = refused
        self._open = 0

    def session_requested(self) -> SFTPOnlySession:
        if self._max is not None and self._open >= self._max:
            self._refused()
            # sshd's answer past MaxSessions: "open failed", administratively prohibited.
            refused = asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED
            raise asyncssh.ChannelOpenError(refused, "open failed")
        self._open += 1
        session = self._session(self._sftp)
        session.closed = self._release
        return session

    def _release(self) -> None:
        self._open -= 1


@dataclass(frozen=True, kw_only=True)
class EmbeddedServer:
    """Where the embedded server listens and how to log in to it.

    Attributes:
        host, port: the loopback address it listens on.
        username: the login name it accepts.
        client_key: private key file it authorises.
        known_hosts: a known_hosts file holding its host key.
        root: the directory served as "/" (remote paths are relative to it).
        listener: asyncssh's acceptor, for a test that takes the server down
            from inside (``close()`` stops it accepting; connections stay).
    """

    host: str
    port: int
    username: str
    client_key: Path
    known_hosts: Path
    root: Path
    listener: asyncssh.SSHAcceptor = field(repr=False, compare=False)

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


def _key(path: Path, reuse: bool) -> asyncssh.SSHKey:
    """A fresh ed25519 key written to ``path``, or with ``reuse`` the one already there."""
    if reuse and path.exists():
        return asyncssh.read_private_key(path)
    key = asyncssh.generate_private_key("ssh-ed25519")
    path.write_bytes(key.export_private_key())
    path.chmod(0o600)
    return key


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
    max_sessions: int | None = None,
    session_factory: SessionFactory | None = None,
    session_refused: Callable[[], None] = lambda: None,
    reuse_keys: bool = False,
    compression_algs: Sequence[str] | None = None,
    connection_factory: Callable[[], asyncssh.SSHServer] | None = None,
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
        max_sessions: session channels one connection may hold open at once;
            one more is refused as sshd refuses past its MaxSessions. SFTP
            sessions only (no ``process_factory``).
        session_refused: called at each session refused for ``max_sessions``.
        session_factory: builds each session channel around the SFTP server
            (an ``SFTPOnlySession`` subclass that sees its bytes); SFTP only.
        reuse_keys: take the host and client keys a server left in
            ``workdir`` (a restart: the same command still logs in).
        compression_algs: what it offers (default asyncssh's: zlib@openssh.com,
            zlib, none); ``["none"]`` is a server without compression.
        connection_factory: an ``asyncssh.SSHServer`` for each connection
            that sees its events (log-in, ...) while ``sftp_factory`` still
            serves its sessions: a server misbehaving below SFTP.

    Raises:
        ValueError: a session option together with ``process_factory`` or
            ``server_factory``, which serve sessions their own way.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    root = root or workdir / "root"
    root.mkdir(parents=True, exist_ok=True)
    host_key = _key(workdir / "host_key", reuse_keys)
    client_key = _key(workdir / "client_key", reuse_keys)
    client_key_path = workdir / "client_key"
    username = getpass.getuser()
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())

    def sftp(chan: Any) -> asyncssh.SFTPServer:
        return sftp_factory(chan, root)

    sessions: dict[str, Any] = {"sftp_factory": sftp}
    if max_sessions is not None or session_factory is not None:
        if process_factory is not None or server_factory is not None:
            raise ValueError("max_sessions and session_factory serve SFTP sessions only")
        opener = session_factory or SFTPOnlySession
        sessions = {
            "server_factory": lambda: _Sessions(sftp, max_sessions, opener, session_refused),
            "encoding": None,
        }
    elif server_factory is not None:
        sessions = {"server_factory": server_factory, "encoding": None}
    if connection_factory is not None:
        if "server_factory" in sessions:
            raise ValueError("connection_factory goes with sftp_factory's sessions only")
        sessions["server_factory"] = connection_factory
    if process_factory is not None:
        sessions["process_factory"] = process_factory
    if server_version is not None:
        sessions["server_version"] = server_version
    if compression_algs is not None:
        sessions["compression_algs"] = list(compression_algs)
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
            listener=server,
        )
    finally:
        server.close()
        await server.wait_closed()
