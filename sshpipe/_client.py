"""The public async API: ``async with sshpipe.connect(...) as sp: await sp.get(...)``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, overload

from ._config import (
    DEFAULT_CIPHERS,
    ConnectConfig,
    HostKeyPolicy,
    TransferConfig,
    parse_destination,
)
from ._errors import ChannelRefused, ClosedError, SSHPipeError, UsageError
from ._stats import TransferStats, TreeProgress, TreeStats
from .core.codec import Limits, reply_cap
from .transfer.download import download, stream
from .transfer.upload import upload, upload_stream
from .transport.remotefs import glob as remote_glob
from .transport.sftp import SFTPSession
from .transport.ssh import SSHLink, open_link
from .tree.get import TreeGet, download_preserving
from .tree.put import TreePut, upload_preserving
from .tree.run import TreeOptions

# (window, max_packet_size, longest reply) a channel was opened with
_ChannelKey = tuple[int, int, int]


def _key(config: TransferConfig) -> _ChannelKey:
    return (config.window, config.max_packet_size, reply_cap(config.block_size))


logger = logging.getLogger("sshpipe.client")


@dataclass(slots=True, eq=False)
class _Slot:
    """One SSH connection of the client and how many channels it carries."""

    link: SSHLink
    cap: int  # channels it may carry; lowered when the server refuses one
    open: int = 0  # channels open on it (idle, busy, or being opened)

    @property
    def room(self) -> int:
        return max(0, self.cap - self.open)


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
        self._slots: list[_Slot] = []
        self._slot_of: dict[SFTPSession, _Slot] = {}
        self._idle: dict[_ChannelKey, list[SFTPSession]] = {}
        self._busy: set[SFTPSession] = set()
        self._connecting = 0
        self._closed = False
        # The server's limits@openssh.com answer, learned on the first channel:
        # every connection reaches the same server.
        self._server_limits: Limits | None = None
        self._freed = asyncio.Event()  # set when a transfer gives channels back

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("open" if self._slots else "new")
        idle = sum(len(v) for v in self._idle.values())
        return (
            f"<Client {self.connect_config.host} {state} connections={len(self._slots)} "
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
        if not self._slots:
            link = await open_link(self.connect_config)
            if self._closed:  # closed while we connected
                await link.close()
                raise ClosedError("this client was closed")
            self._slots.append(_Slot(link, self.config.channels_per_connection))

    async def aclose(self) -> None:
        """Close every channel and connection; calling it twice is fine."""
        self._closed = True
        self._freed.set()  # transfers waiting for a channel see the client closed
        slots, self._slots = self._slots, []
        for sessions in self._idle.values():
            for sftp in sessions:
                sftp.close()
        self._idle.clear()
        self._slot_of.clear()
        for slot in slots:
            await slot.link.close()

    def abort(self) -> None:
        """Drop every connection at once, without waiting for the server.

        Everything in flight fails at once with ConnectionBroken; what the
        transfers clean up locally (temporary files) they still do, but
        nothing more is asked of the server. For a server that stopped
        answering, or a user's second Ctrl-C. ``aclose()`` is still the way out.
        """
        for slot in self._slots:
            slot.link.abort()

    @property
    def connections(self) -> int:
        """SSH connections open now."""
        return len(self._slots)

    # -- channels ------------------------------------------------------------

    async def _take_channels(
        self,
        config: TransferConfig,
        count: int,
        *,
        required: int,
        ready: Callable[[SFTPSession], None] | None = None,
    ) -> list[SFTPSession]:
        """Up to ``count`` channels: idle ones first, then new ones, on new connections if needed.

        Fewer than ``count`` is not an error (a server may refuse channels or
        connections); fewer than ``required`` raises the first failure.
        """
        while True:
            taken = await self._try_take_channels(config, count, required=required, ready=ready)
            if taken is not None:
                return taken
            if self._evict_idle(keep=_key(config)):
                continue  # idle channels of other settings made room
            # Every connection we may open is full of busy channels: wait for a
            # transfer to give one back rather than fail (many transfers at once).
            self._freed.clear()
            await self._freed.wait()

    def _evict_idle(self, *, keep: _ChannelKey) -> bool:
        """Close idle channels opened with other settings; True if there were any."""
        evicted = False
        for key, sessions in self._idle.items():
            if key != keep:
                for sftp in sessions:
                    sftp.close()
                    self._forget(sftp)
                evicted = evicted or bool(sessions)
                sessions.clear()
        return evicted

    async def _try_take_channels(
        self,
        config: TransferConfig,
        count: int,
        *,
        required: int,
        ready: Callable[[SFTPSession], None] | None,
    ) -> list[SFTPSession] | None:
        """One attempt of ``_take_channels``; None when no room is left anywhere yet."""
        if self._closed:
            raise ClosedError("this client was closed")
        if not self._slots:
            await self.open()
        idle = self._idle.setdefault(_key(config), [])
        taken: list[SFTPSession] = []
        while idle and len(taken) < count:
            sftp = idle.pop()
            if sftp.broken is None:
                sftp.stall_timeout = config.stall_timeout  # this transfer's
                taken.append(sftp)
            else:
                self._forget(sftp)
        self._busy.update(taken)
        if ready is not None:
            for sftp in taken:
                ready(sftp)
        errors: list[BaseException] = []
        try:
            opened = await self._open_channels(config, count - len(taken), errors, ready)
        except BaseException:
            self._give_back(config, taken)
            raise
        taken += opened
        if len(taken) < required:
            self._give_back(config, taken)
            if errors:
                raise errors[0]
            return None
        return taken

    async def _open_channels(
        self,
        config: TransferConfig,
        count: int,
        errors: list[BaseException],
        ready: Callable[[SFTPSession], None] | None = None,
    ) -> list[SFTPSession]:
        """Open ``count`` channels concurrently over the connections with room and new ones."""
        if count <= 0:
            return []
        # Bookkeeping first: reserve room on each connection before awaiting.
        plan: list[_Slot] = []  # a channel to open on each existing connection listed
        for slot in self._slots:
            take = min(slot.room, count - len(plan))
            slot.open += take
            plan += [slot] * take
        per_new = config.channels_per_connection
        new_links = min(
            -(-(count - len(plan)) // per_new),
            config.max_connections - len(self._slots) - self._connecting,
        )
        new_counts = [
            min(per_new, count - len(plan) - i * per_new) for i in range(max(new_links, 0))
        ]
        # Reserved now, before any await: transfers asking at the same moment
        # must see these connections as already coming (64 concurrent gets
        # opened 55 connections when each counted only the ones under way).
        self._connecting += len(new_counts)
        unsettled = [len(new_counts)]  # reservations not yet given back
        opened: list[SFTPSession] = []

        async def on_slot(slot: _Slot) -> None:
            try:
                sftp = await slot.link.open_sftp(
                    window=config.window,
                    max_packet_size=config.max_packet_size,
                    max_reply=reply_cap(config.block_size),
                    stall_timeout=config.stall_timeout,
                    known_limits=self._server_limits,
                )
            except ChannelRefused as exc:
                slot.open -= 1
                slot.cap = slot.open  # the server said how many it allows
                errors.append(exc)
                return
            except SSHPipeError as exc:
                slot.open -= 1
                errors.append(exc)
                return
            except BaseException:
                slot.open -= 1
                raise
            if self._closed:
                sftp.close()
                slot.open -= 1
                return
            self._server_limits = self._server_limits or sftp.limits
            self._slot_of[sftp] = slot
            self._busy.add(sftp)
            opened.append(sftp)
            if ready is not None:
                ready(sftp)

        async def on_new_link(channels: int) -> None:
            try:
                link = await open_link(self.connect_config)
            except SSHPipeError as exc:
                errors.append(exc)
                return
            finally:
                self._connecting -= 1
                unsettled[0] -= 1
            if self._closed:
                await link.close()
                return
            slot = _Slot(link, per_new, open=channels)
            self._slots.append(slot)
            async with asyncio.TaskGroup() as group:
                for _ in range(channels):
                    group.create_task(on_slot(slot))

        try:
            async with asyncio.TaskGroup() as group:
                for slot in plan:
                    group.create_task(on_slot(slot))
                for channels in new_counts:
                    group.create_task(on_new_link(channels))
        except BaseException:
            for sftp in opened:
                self._busy.discard(sftp)
                self._forget(sftp)
                sftp.close()
            raise
        finally:
            self._connecting -= unsettled[0]  # tasks cancelled before they started
        if errors:
            logger.debug("%d channel(s) not opened: %s", len(errors), errors[0])
        return opened

    def _prune(self, also: list[_Slot] | None = None) -> None:
        """Forget connections that are gone (and ``also``), and every channel on them."""
        dead = [slot for slot in self._slots if slot.link.closed or slot in (also or [])]
        if not dead:
            return
        self._slots = [slot for slot in self._slots if slot not in dead]
        for sessions in self._idle.values():
            sessions[:] = [sftp for sftp in sessions if self._slot_of.get(sftp) not in dead]
        for sftp in [s for s, slot in self._slot_of.items() if slot in dead]:
            sftp.close()
            del self._slot_of[sftp]
        self._freed.set()  # room for new connections

    def _abort_links_of(self, channels: list[SFTPSession]) -> None:
        """Drop the connections these channels are on (they stalled), and forget them."""
        slots = {id(self._slot_of[s]): self._slot_of[s] for s in channels if s in self._slot_of}
        for slot in slots.values():
            slot.link.abort()
        self._prune(also=list(slots.values()))

    def _forget(self, sftp: SFTPSession) -> None:
        slot = self._slot_of.pop(sftp, None)
        if slot is not None:
            slot.open -= 1

    def _give_back(self, config: TransferConfig, channels: list[SFTPSession]) -> None:
        key = _key(config)
        if channels:
            self._freed.set()
        for sftp in channels:
            self._busy.discard(sftp)
            if sftp.broken is None and not self._closed:
                self._idle.setdefault(key, []).append(sftp)
            else:
                sftp.close()
                self._forget(sftp)

    def _connections_of(self, channels: list[SFTPSession]) -> int:
        return len({id(self._slot_of[s]) for s in channels if s in self._slot_of}) or 1

    @contextlib.asynccontextmanager
    async def _lease(self, config: TransferConfig) -> AsyncIterator[_Lease]:
        """Channels for one transfer, given back to the pool when it ends."""
        first = config.channels or 1
        lease = _Lease(self, config, await self._take_channels(config, first, required=first))
        try:
            yield lease
        finally:
            self._give_back(config, lease.channels)

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
            async with self._lease(cfg) as lease:
                if preserve:
                    return await download_preserving(lease, remote, local, cfg)
                return await download(lease, remote, local, cfg)
        sources = [remote] if isinstance(remote, str) else list(remote)
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
            async with self._lease(cfg) as lease:
                if preserve:
                    return await upload_preserving(lease, local, remote, cfg)
                return await upload(lease, local, remote, cfg)
        sources = [local] if isinstance(local, str) else list(local)
        return await self._tree(TreePut, sources, remote, options, cfg)

    async def glob(self, pattern: str) -> list[str]:
        """Remote paths matching ``pattern``, sorted (``*``, ``?``, ``[...]`` per component).

        As in a shell, a name starting with "." is matched only by a pattern
        component that starts with "." too.

        Raises:
            RemoteNotFound: nothing matches.
        """
        async with self._lease(self.config) as lease:
            return await remote_glob(lease.channels[0], pattern)

    async def _tree(
        self,
        kind: type[TreeGet | TreePut],
        sources: list[str],
        dest: str,
        options: TreeOptions,
        config: TransferConfig,
    ) -> TreeStats:
        if not sources:
            raise UsageError("nothing to copy: no sources given")
        if config.resume and not options.recursive:
            raise UsageError("resume works on single files and trees (-r), not several files")
        # One channel to start with; the run adds the rest of its
        # PIPELINE_CHANNELS as they open (unless --channels fixes them).
        async with self._lease(config) as lease:
            run = kind(lease, _TreePool(self), options, config, sources, dest)
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
            self._lease(cfg) as lease,
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
        async with self._lease(cfg) as lease:
            return await upload_stream(lease, chunks, remote, cfg, mode)


class _TreePool:
    """The client as a tree transfer sees it: leases for big files, warm channels."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def lease(self, config: TransferConfig) -> contextlib.AbstractAsyncContextManager[_Lease]:
        return self._client._lease(config)

    async def warm(self, config: TransferConfig, count: int) -> None:
        client = self._client
        client._give_back(config, await client._take_channels(config, count, required=0))


class _Lease:
    """The channels of one transfer; the engine asks it for more as the controller wants."""

    def __init__(self, client: Client, config: TransferConfig, channels: list[SFTPSession]):
        self._client = client
        self._config = config
        self.channels = channels
        self.max_channels = config.channels or min(
            64, config.channels_per_connection * config.max_connections
        )
        self.can_grow = config.channels is None

    def __repr__(self) -> str:
        return f"<_Lease channels={len(self.channels)}/{self.max_channels}>"

    def connections_of(self, channels: list[SFTPSession]) -> int:
        """How many connections these channels (of this lease) belong to."""
        return self._client._connections_of(channels)

    async def add(
        self, count: int, ready: Callable[[SFTPSession], None] | None = None
    ) -> list[SFTPSession]:
        """Up to ``count`` more channels (fewer, or none, if the server says no).

        ``ready(channel)`` is called for each as soon as it is open, before the
        rest are; the channel already belongs to this lease then.
        """
        count = min(count, self.max_channels - len(self.channels))
        if count <= 0 or not self.can_grow:
            return []

        def arrived(sftp: SFTPSession) -> None:
            self.channels.append(sftp)
            if ready is not None:
                ready(sftp)

        return await self._client._take_channels(self._config, count, required=0, ready=arrived)

    async def recover(self, *, stalled: bool) -> None:
        """After a dropped (or, ``stalled``, silent) connection: fresh channels.

        Channels whose connection is gone are given back (closed); if none is
        left, one is opened, on a new connection if need be.

        Raises:
            ConnectError: no connection could be made (the caller retries).
        """
        client = self._client
        if stalled:
            client._abort_links_of(self.channels)
        client._prune()
        dead = [sftp for sftp in self.channels if sftp.broken is not None]
        self.channels = [sftp for sftp in self.channels if sftp.broken is None]
        client._give_back(self._config, dead)
        if not self.channels:
            self.channels = await client._take_channels(self._config, 1, required=1)


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
