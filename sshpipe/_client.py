"""The public async API: ``async with sshpipe.connect(...) as sp: await sp.get(...)``."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator, AsyncIterable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Literal, overload

from ._config import (
    DEFAULT_CIPHERS,
    ConnectConfig,
    HostKeyPolicy,
    TransferConfig,
    parse_destination,
)
from ._errors import RemoteError, UsageError
from ._stats import TransferStats, TreeProgress, TreeStats
from .durability import lefttemps
from .transfer.download import download
from .transfer.inorder import in_order, refused_out_of_order
from .transfer.lanes import channels_at_start
from .transfer.stream import stream
from .transfer.upload import upload, upload_stream
from .transport.pool import ChannelPool
from .transport.remotefs import glob as remote_glob
from .tree.item import TreeOptions

# The tree machinery (tree/get.py, put.py and what they import) loads when a
# tree or a -p copy runs: a single file starts a dozen modules lighter.
if TYPE_CHECKING:
    from .tree.get import TreeGet
    from .tree.put import TreePut


class Client:
    """SSH connections and a pool of SFTP channels, used by one or many transfers.

    Create it with :func:`connect`. Idle SFTP channels are kept per
    (window, packet size) and reused, so a second transfer pays no channel
    set-up. A transfer that needs more channels than one connection carries
    (sshd's ``MaxSessions``) gets more connections, opened with the same
    settings and kept until the client closes.
    """

    def __init__(self, connect_config: ConnectConfig, transfer_config: TransferConfig) -> None:
        self.connect_config = connect_config
        self.config = transfer_config
        self._pool = ChannelPool(connect_config, transfer_config)
        self.left_temps: tuple[str, ...] = ()  # see ``aclose``

    def __repr__(self) -> str:
        return f"<Client {self.connect_config.host} {self._pool.state}>"

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
        await self._pool.open()

    async def aclose(self) -> None:
        """Close every channel and connection; calling it twice is fine.

        Temp files of failed uploads that the server could not be made to
        remove (it went away) are recorded, logged as one warning and listed
        in ``left_temps``; the next upload to that server removes them first.
        """
        try:
            await self._pool.aclose()  # first: a cancelled upload's REMOVE may be settling
        finally:
            self.left_temps = tuple(lefttemps.keep(self._pool))

    def abort(self) -> None:
        """Drop every connection at once, without waiting for the server.

        Everything in flight fails at once with ConnectionBroken; what the
        transfers clean up locally (temporary files) they still do, but
        nothing more is asked of the server. For a server that stopped
        answering, or a user's second Ctrl-C. ``aclose()`` is still the way out.
        """
        self._pool.abort()

    @property
    def connections(self) -> int:
        """SSH connections open now."""
        return self._pool.connections

    @property
    def server(self) -> dict[str, object]:
        """What the server is and offers (its banner's software, SYMLINK order, the
        extensions that matter, its stated limits) and the caps sshpipe found by
        trying ("learned": handles, read/write block, requests, sequential writes).
        Empty until a channel is open; ``--json`` shows it as "server"."""
        return self._pool.server()

    def _config(self, override: TransferConfig | None) -> TransferConfig:
        return override if override is not None else self.config

    # -- transfers -----------------------------------------------------------

    @overload
    async def get(
        self,
        remote: str,
        local: str,
        *,
        recursive: Literal[False] = False,
        preserve: bool = False,
        config: TransferConfig | None = None,
    ) -> TransferStats: ...

    @overload
    async def get(
        self,
        remote: str | list[str] | tuple[str, ...],
        local: str,
        *,
        recursive: Literal[True],
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: Callable[[TreeProgress], None] | None = None,
        config: TransferConfig | None = None,
    ) -> TreeStats: ...

    @overload
    async def get(
        self,
        remote: list[str] | tuple[str, ...],
        local: str,
        *,
        recursive: bool = False,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: Callable[[TreeProgress], None] | None = None,
        config: TransferConfig | None = None,
    ) -> TreeStats: ...

    async def get(
        self,
        remote: str | list[str] | tuple[str, ...],
        local: str,
        *,
        recursive: bool = False,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: Callable[[TreeProgress], None] | None = None,
        config: TransferConfig | None = None,
    ) -> TransferStats | TreeStats:
        """Download a remote file, or with ``recursive`` (or several sources) a tree.

        Files go to a temporary name beside their destination, made durable
        and renamed over it only when complete (``config.fsync``, on by
        default), so a failure never leaves a truncated file. Where things
        land follows scp: into ``local`` if it is a directory, else as
        ``local``. ``config.verify`` checks each file against the server's
        before it takes its name; ``config.resume`` continues an interrupted
        copy (a tree skips the files an earlier run finished); a dropped
        connection is reopened and the copy goes on (``config.retries``).

        Args:
            remote: a remote path, or a list of them (see :meth:`glob`).
            local: destination file or directory.
            recursive: copy directories and everything in them (``-r``).
            preserve: keep permissions and access/modification times (``-p``).
            follow_symlinks: copy what links point to instead of the links (``-L``).
            fail_fast: stop at the first failure instead of copying the rest.
            progress: called a few times a second with a TreeProgress.
            config: per-transfer override of the client's TransferConfig.

        Returns:
            TransferStats for one file; TreeStats for a tree or several sources.

        Raises:
            RemoteError, LocalError, ConnectionBroken, ProtocolError; for a tree,
            IncompleteTransfer when some entries failed (all others are copied).
        """
        cfg = self._config(config)
        options = TreeOptions(
            recursive=recursive,
            preserve=preserve,
            follow_symlinks=follow_symlinks,
            fail_fast=fail_fast,
            progress=progress,
        )
        if isinstance(remote, str) and not recursive:
            at_start = channels_at_start(cfg, size=None, write=False)
            async with self._pool.lease(cfg, at_start=at_start) as lease:
                if preserve:
                    from .tree.get import download_preserving

                    return await download_preserving(lease, remote, local, cfg)
                return await download(lease, remote, local, cfg)
        sources = [remote] if isinstance(remote, str) else list(remote)
        from .tree.get import TreeGet

        return await self._tree(TreeGet, sources, local, options, cfg)

    @overload
    async def put(
        self,
        local: str,
        remote: str,
        *,
        recursive: Literal[False] = False,
        preserve: bool = False,
        config: TransferConfig | None = None,
    ) -> TransferStats: ...

    @overload
    async def put(
        self,
        local: str | list[str] | tuple[str, ...],
        remote: str,
        *,
        recursive: Literal[True],
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: Callable[[TreeProgress], None] | None = None,
        config: TransferConfig | None = None,
    ) -> TreeStats: ...

    @overload
    async def put(
        self,
        local: list[str] | tuple[str, ...],
        remote: str,
        *,
        recursive: bool = False,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: Callable[[TreeProgress], None] | None = None,
        config: TransferConfig | None = None,
    ) -> TreeStats: ...

    async def put(
        self,
        local: str | list[str] | tuple[str, ...],
        remote: str,
        *,
        recursive: bool = False,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: Callable[[TreeProgress], None] | None = None,
        config: TransferConfig | None = None,
    ) -> TransferStats | TreeStats:
        """Upload a local file, or with ``recursive`` (or several sources) a tree.

        Each file goes to a temporary remote name, renamed into place when
        complete. Layout, arguments and errors mirror :meth:`get`. With
        ``config.resume`` (one file) the temporary name is fixed and kept on
        failure, with a journal in the user's state directory; the next
        resume reads the journaled ranges back and sends only the rest. A
        tree with ``config.resume`` skips the files an earlier run finished.

        Returns:
            TransferStats for one file; TreeStats for a tree or several sources.

        Raises:
            LocalError, RemoteError, ConnectionBroken, ProtocolError; for a tree,
            IncompleteTransfer when some entries failed (all others are copied).
        """
        cfg = self._config(config)
        options = TreeOptions(
            recursive=recursive,
            preserve=preserve,
            follow_symlinks=follow_symlinks,
            fail_fast=fail_fast,
            progress=progress,
        )
        if isinstance(local, str) and not recursive:
            caps = self._pool.server_caps
            try:
                return await self._put_one(local, remote, in_order(cfg, caps), preserve=preserve)
            except RemoteError as exc:
                if not refused_out_of_order(exc, in_order(cfg, caps)):
                    raise
                caps.sequential_writes = True
                return await self._put_one(local, remote, in_order(cfg, caps), preserve=preserve)
        sources = [local] if isinstance(local, str) else list(local)
        from .tree.put import TreePut

        return await self._tree(TreePut, sources, remote, options, cfg, uploads=True)

    async def _put_one(
        self, local: str, remote: str, cfg: TransferConfig, *, preserve: bool
    ) -> TransferStats:
        at_start = channels_at_start(cfg, size=_size_of(local), write=True)
        async with self._pool.lease(cfg, at_start=at_start) as lease:
            await lefttemps.sweep(self._pool, lease.channels[0])
            if preserve:
                from .tree.put import upload_preserving

                return await upload_preserving(lease, local, remote, cfg)
            return await upload(lease, local, remote, cfg)

    async def glob(self, pattern: str) -> list[str]:
        """Remote paths matching ``pattern``, sorted (``*``, ``?``, ``[...]`` per component).

        As in a shell, a name starting with "." is matched only by a pattern
        component that starts with "." too.

        Raises:
            RemoteNotFound: nothing matches.
        """
        async with self._pool.lease(self.config) as lease:
            return await remote_glob(lease.channels[0], pattern)

    async def _tree(
        self,
        kind: type[TreeGet | TreePut],
        sources: list[str],
        dest: str,
        options: TreeOptions,
        config: TransferConfig,
        *,
        uploads: bool = False,
    ) -> TreeStats:
        if not sources:
            raise UsageError("nothing to copy: no sources given")
        if config.resume and not options.recursive:
            raise UsageError("resume works on single files and trees (-r), not several files")
        # One channel to start with; the run adds the rest of its
        # PIPELINE_CHANNELS as they open (unless --channels fixes them).
        async with self._pool.lease(config) as lease:
            await lease.channels[0].learn_limits()  # the run is sized from them
            if uploads:
                await lefttemps.sweep(self._pool, lease.channels[0])
            run = kind(lease, self._pool, options, config, sources, dest)
            return await run.run()

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
            self._pool.lease(cfg) as lease,
            contextlib.aclosing(stream(lease, remote, cfg)) as pieces,
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
            RemoteError, ConnectionBroken, ProtocolError, TypeError (non-bytes piece);
            UsageError: ``config.resume`` (a stream cannot be read again).
        """
        cfg = self._config(config)
        if cfg.resume:
            raise UsageError("resume needs a file it can read again, not a stream")
        cfg = in_order(cfg, self._pool.server_caps)  # a stream cannot be sent twice
        async with self._pool.lease(cfg) as lease:
            return await upload_stream(lease, chunks, remote, cfg, mode)


def _size_of(path: str) -> int | None:
    """The local file's size, to size the start (None: the upload will say what is wrong)."""
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return None


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
