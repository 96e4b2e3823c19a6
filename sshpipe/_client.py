"""The public async API: ``async with sshpipe.connect(...) as sp: await sp.get(...)``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from types import TracebackType

from . import _engine as engine
from ._config import (
    DEFAULT_CIPHERS,
    ConnectConfig,
    HostKeyPolicy,
    TransferConfig,
    parse_destination,
)
from ._errors import ClosedError
from ._sftp import SFTPSession
from ._ssh import SSHLink, open_link
from ._stats import TransferStats

_ChannelKey = tuple[int, int]  # (window, max_packet_size) a channel was opened with


class Client:
    """An SSH connection and a pool of SFTP channels, used by one or many transfers.

    Create it with :func:`connect`. Idle SFTP channels are kept per
    (window, packet size) and reused, so a second transfer pays no channel set-up.
    """

    def __init__(self, connect_config: ConnectConfig, transfer_config: TransferConfig) -> None:
        self.connect_config = connect_config
        self.config = transfer_config
        self._link: SSHLink | None = None
        self._idle: dict[_ChannelKey, list[SFTPSession]] = {}
        self._busy: set[SFTPSession] = set()
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("open" if self._link else "new")
        idle = sum(len(v) for v in self._idle.values())
        return (
            f"<Client {self.connect_config.host} {state} "
            f"idle_channels={idle} busy_channels={len(self._busy)}>"
        )

    async def __aenter__(self) -> Client:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Connect and authenticate (done by ``async with``).

        Raises:
            ConnectError, AuthenticationError, HostKeyError: see the exception tree.
        """
        if self._closed:
            raise ClosedError("this client was closed")
        if self._link is None:
            self._link = await open_link(self.connect_config)

    async def aclose(self) -> None:
        """Close every channel and the connection; calling it twice is fine."""
        self._closed = True
        link, self._link = self._link, None
        for sessions in self._idle.values():
            for sftp in sessions:
                sftp.close()
        self._idle.clear()
        if link is not None:
            await link.close()

    # -- channels ------------------------------------------------------------

    async def _take_channels(self, config: TransferConfig) -> list[SFTPSession]:
        if self._closed:
            raise ClosedError("this client was closed")
        if self._link is None:
            await self.open()
        assert self._link is not None
        key = (config.window, config.max_packet_size)
        idle = self._idle.setdefault(key, [])
        taken = [idle.pop() for _ in range(min(config.channels, len(idle)))]
        taken = [sftp for sftp in taken if sftp.broken is None]
        missing = config.channels - len(taken)
        tasks: list[asyncio.Task[SFTPSession]] = []
        try:
            async with asyncio.TaskGroup() as group:
                tasks += [
                    group.create_task(
                        self._link.open_sftp(
                            window=config.window, max_packet_size=config.max_packet_size
                        )
                    )
                    for _ in range(missing)
                ]
        except BaseExceptionGroup as group_error:
            for task in tasks:
                if task.done() and not task.cancelled() and task.exception() is None:
                    task.result().close()
            for sftp in taken:
                sftp.close()
            raise group_error.exceptions[0] from None
        taken += [task.result() for task in tasks]
        self._busy.update(taken)
        return taken

    def _give_back(self, config: TransferConfig, channels: list[SFTPSession]) -> None:
        key = (config.window, config.max_packet_size)
        for sftp in channels:
            self._busy.discard(sftp)
            if sftp.broken is None and not self._closed:
                self._idle.setdefault(key, []).append(sftp)
            else:
                sftp.close()

    @contextlib.asynccontextmanager
    async def _lease(self, config: TransferConfig) -> AsyncIterator[list[SFTPSession]]:
        """Channels for one transfer, given back to the pool when it ends."""
        channels = await self._take_channels(config)
        try:
            yield channels
        finally:
            self._give_back(config, channels)

    def _config(self, override: TransferConfig | None) -> TransferConfig:
        return override if override is not None else self.config

    # -- transfers -----------------------------------------------------------

    async def get(
        self, remote: str, local: str, *, config: TransferConfig | None = None
    ) -> TransferStats:
        """Download one remote file.

        The bytes go to a temporary file beside ``local`` that is renamed over it
        only when complete, so a failure never leaves a truncated ``local``.

        Args:
            remote: path on the server.
            local: destination file path (its directory must exist).
            config: per-transfer override of the client's TransferConfig.

        Returns:
            TransferStats of the transfer.

        Raises:
            RemoteError, LocalError, ConnectionBroken, ProtocolError.
        """
        cfg = self._config(config)
        async with self._lease(cfg) as channels:
            return await engine.download(channels, remote, local, cfg)

    async def put(
        self, local: str, remote: str, *, config: TransferConfig | None = None
    ) -> TransferStats:
        """Upload one local file (to a temporary remote name, then renamed into place).

        Args:
            local: source file path.
            remote: destination path on the server.
            config: per-transfer override of the client's TransferConfig.

        Returns:
            TransferStats of the transfer.

        Raises:
            LocalError, RemoteError, ConnectionBroken, ProtocolError.
        """
        cfg = self._config(config)
        async with self._lease(cfg) as channels:
            return await engine.upload(channels, local, remote, cfg)

    async def stream(
        self, remote: str, *, config: TransferConfig | None = None
    ) -> AsyncGenerator[bytes, None]:
        """Yield a remote file's bytes in order, pipelined, with bounded memory.

        Args:
            remote: path on the server.
            config: per-transfer override of the client's TransferConfig.

        Yields:
            Consecutive pieces of the file (sizes vary).

        Raises:
            RemoteError, ConnectionBroken, ProtocolError.
        """
        cfg = self._config(config)
        # aclosing: when our caller closes us, the engine's generator must close
        # now (its handles with it), not whenever the garbage collector gets to it.
        async with (
            self._lease(cfg) as channels,
            contextlib.aclosing(engine.stream(channels, remote, cfg)) as pieces,
        ):
            async for piece in pieces:
                yield piece

    async def put_stream(
        self,
        chunks: AsyncIterable[bytes],
        remote: str,
        *,
        mode: int = 0o644,
        config: TransferConfig | None = None,
    ) -> TransferStats:
        """Upload from a non-seekable source, e.g. a generator or a pipe reader.

        Args:
            chunks: async iterable of bytes pieces of any size.
            remote: destination path on the server.
            mode: permissions of the new remote file.
            config: per-transfer override of the client's TransferConfig.

        Returns:
            TransferStats of the transfer.

        Raises:
            RemoteError, ConnectionBroken, ProtocolError, TypeError (non-bytes piece).
        """
        cfg = self._config(config)
        async with self._lease(cfg) as channels:
            return await engine.upload_stream(channels, chunks, remote, cfg, mode)


def connect(
    destination: str,
    *,
    port: int | None = None,
    username: str | None = None,
    identity_files: tuple[str, ...] | list[str] = (),
    password: str | None = None,
    known_hosts: tuple[str, ...] | list[str] | None = None,
    strict_host_key_checking: HostKeyPolicy = "yes",
    ssh_config: tuple[str, ...] | list[str] | None = None,
    connect_timeout: float = 30.0,
    compression: bool = False,
    ciphers: tuple[str, ...] | list[str] = DEFAULT_CIPHERS,
    config: TransferConfig | None = None,
) -> Client:
    """A client for ``[user@]host``; connects on ``async with`` (or ``await client.open()``).

    Args:
        destination: ``host`` or ``user@host``; ssh_config Host aliases work.
        port, username: override ssh_config's Port and User.
        identity_files: private keys to offer, like ``ssh -i``.
        password: tried only if given; never logged.
        known_hosts: files to check host keys against (default: ssh_config's
            UserKnownHostsFile, else ~/.ssh/known_hosts).
        strict_host_key_checking: "yes" (default), "accept-new" or "no".
        ssh_config: OpenSSH config files to read (default ~/.ssh/config).
        connect_timeout: seconds for TCP connect plus handshake.
        compression: offer zlib compression.
        ciphers: encryption algorithms in preference order ("none" is refused).
        config: TransferConfig for every transfer of this client.

    Returns:
        An unopened :class:`Client`.

    Raises:
        UsageError: invalid arguments.
    """
    user, host = parse_destination(destination)
    connect_config = ConnectConfig(
        host=host,
        port=port,
        username=username or user,
        identity_files=tuple(identity_files),
        password=password,
        known_hosts=tuple(known_hosts) if known_hosts is not None else None,
        strict_host_key_checking=strict_host_key_checking,
        ssh_config=tuple(ssh_config) if ssh_config is not None else None,
        connect_timeout=connect_timeout,
        compression=compression,
        ciphers=tuple(ciphers),
    )
    return Client(connect_config, config or TransferConfig())
