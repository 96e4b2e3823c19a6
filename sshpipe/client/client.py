"""The public async API: ``async with sshpipe.connect(...) as sp: await sp.get(...)``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, Sequence
from typing import TYPE_CHECKING, Literal, overload

from ..core.config import TransferConfig
from ..core.errors import RemoteError, UsageError
from ..core.paths import StrPath, fspath, fspaths, is_one
from ..core.stats import ProgressCallback, TransferStats, TreeStats
from .base import imported
from .choices import by_workers, local_size, reported, tree_options
from .remoteops import RemoteOps

# The engine loads on the client's first use, in a worker thread
# (``ClientBase._ready``). The tree machinery (tree/get.py, put.py) loads the
# same way when a tree or a -p copy runs: a single file starts a dozen modules lighter.
if TYPE_CHECKING:
    from ..transfer.progress import FileTally
    from ..tree.get import TreeGet
    from ..tree.item import TreeOptions
    from ..tree.put import TreePut


class Client(RemoteOps):
    """SSH connections and a pool of SFTP channels, used by one or many transfers.

    Create it with :func:`connect`. Idle SFTP channels are kept per
    (window, packet size) and reused, so a second transfer pays no channel
    set-up. A transfer that needs more channels than one connection carries
    (sshd's ``MaxSessions``) gets more connections, opened with the same
    settings and kept until the client closes.

    ``async with client:`` may be nested (or entered by several tasks): the
    entries are counted, the client opens at the first and closes at the
    exit of the last. Once closed it stays closed (``ClosedError``), as an
    httpx client refuses to be opened again. A client belongs to the event
    loop it is first used on, where its connections live: using it from
    another (a second ``asyncio.run()``) raises ``UsageError``.
    """

    def _config(self, override: TransferConfig | None) -> TransferConfig:
        return override if override is not None else self.config

    # -- transfers -----------------------------------------------------------

    # A str is also a Sequence[str]: it matches the last overload too, and the
    # ones before it (one path) win, at run time as for the type checker.
    @overload
    async def get(  # type: ignore[overload-overlap]
        self,
        remote: StrPath,
        local: StrPath,
        *,
        recursive: Literal[False] = False,
        preserve: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        glob: Literal[False] = False,
    ) -> TransferStats: ...

    @overload
    async def get(
        self,
        remote: StrPath | Sequence[StrPath],
        local: StrPath,
        *,
        recursive: Literal[True],
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        glob: bool = False,
    ) -> TreeStats: ...

    @overload
    async def get(  # type: ignore[overload-overlap]  # as the first: a str is one path
        self,
        remote: StrPath,
        local: StrPath,
        *,
        recursive: bool,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        glob: bool = False,
    ) -> TransferStats | TreeStats: ...

    @overload
    async def get(
        self,
        remote: Sequence[StrPath],
        local: StrPath,
        *,
        recursive: bool = False,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        glob: bool = False,
    ) -> TreeStats: ...

    async def get(
        self,
        remote: StrPath | Sequence[StrPath],
        local: StrPath,
        *,
        recursive: bool = False,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        glob: bool = False,
    ) -> TransferStats | TreeStats:
        """Download a remote file, or with ``recursive`` (or several sources) a tree.

        Files go to a temporary name beside their destination, made durable
        and renamed over it only when complete (``config.fsync``, on by
        default), so a failure never leaves a truncated file. Where things
        land follows scp: into ``local`` if it is a directory, else as
        ``local``; a FIFO or character device there (/dev/null, /dev/stdout)
        is written into in order instead, never replaced (a tree's entries
        that are one are refused). ``config.verify`` checks each file against
        the server's before it takes its name; ``config.resume`` continues an
        interrupted copy (a tree skips the files an earlier run finished); a
        dropped connection is reopened and the copy goes on (``config.retries``).

        Args:
            remote: a remote path, or a list of them (see :meth:`glob`).
            local: destination file or directory.
            recursive: copy directories and everything in them (``-r``).
            preserve: keep permissions and access/modification times (``-p``).
            follow_symlinks: copy what links point to instead of the links (``-L``).
            fail_fast: stop at the first failure instead of copying the rest.
            progress: given a :class:`Progress` up to 10 times a second, and at the end
                (``finished``); sync or async (a task; busy, reports are skipped).
                What it raises fails the transfer.
            config: per-transfer override of the client's TransferConfig.
            glob: the remote paths are patterns (as for :meth:`glob`), each standing for
                its matches; they are copied as the server's listings give them, as a
                tree (never collected first: a glob of millions holds a few listings).
                A pattern that matches nothing fails (RemoteNotFound). Always a tree.

        Returns:
            TransferStats for one file; TreeStats for a tree, several sources or a glob.

        Raises:
            RemoteError, LocalError, ConnectionBroken, ProtocolError; for a tree,
            IncompleteTransfer when some entries failed (all others are copied).
        """
        cfg = self._config(config)
        sources, dest = fspaths(remote), fspath(local)
        pool = await self._ready()
        await self._sweep_local(cfg)
        if is_one(remote) and not recursive and not glob:
            from .engine import channels_at_start, download

            if preserve:
                await imported("sshpipe.tree.get")
            from .engine import tracked

            path = sources[0]

            async def get_one(tally: FileTally | None) -> TransferStats:
                at_start = channels_at_start(cfg, size=None, write=False)
                route = await self._auto_route(cfg)
                leasing = pool.lease if route is None else route.lease
                async with leasing(self._spec(cfg), at_start=at_start) as lease:
                    if preserve:
                        from ..tree.get import download_preserving

                        stats = await download_preserving(lease, path, dest, cfg, tally)
                        return reported(stats, lease)
                    if by_workers(cfg, route):
                        from ..workers.get import shared_download

                        shared = await shared_download(
                            self.connect_config, pool, lease, path, dest, cfg, tally
                        )
                        if shared is not None:
                            return shared
                    stats = await download(lease, path, dest, cfg, tally=tally)
                    return reported(stats, lease)

            return await tracked(progress, path, get_one)
        await imported("sshpipe.tree.get")
        from ..tree.get import TreeGet

        options = tree_options(
            recursive, preserve, follow_symlinks, fail_fast, progress, patterns=glob
        )
        return await self._tree(TreeGet, sources, dest, options, cfg)

    # A str is also a Sequence[str]: it matches the last overload too, and the
    # ones before it (one path) win, at run time as for the type checker.
    @overload
    async def put(  # type: ignore[overload-overlap]
        self,
        local: StrPath,
        remote: StrPath,
        *,
        recursive: Literal[False] = False,
        preserve: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        overwrite: bool = True,
    ) -> TransferStats: ...

    @overload
    async def put(
        self,
        local: StrPath | Sequence[StrPath],
        remote: StrPath,
        *,
        recursive: Literal[True],
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        overwrite: bool = True,
    ) -> TreeStats: ...

    @overload
    async def put(  # type: ignore[overload-overlap]  # as the first: a str is one path
        self,
        local: StrPath,
        remote: StrPath,
        *,
        recursive: bool,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        overwrite: bool = True,
    ) -> TransferStats | TreeStats: ...

    @overload
    async def put(
        self,
        local: Sequence[StrPath],
        remote: StrPath,
        *,
        recursive: bool = False,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        overwrite: bool = True,
    ) -> TreeStats: ...

    async def put(
        self,
        local: StrPath | Sequence[StrPath],
        remote: StrPath,
        *,
        recursive: bool = False,
        preserve: bool = False,
        follow_symlinks: bool = False,
        fail_fast: bool = False,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
        overwrite: bool = True,
    ) -> TransferStats | TreeStats:
        """Upload a local file, or with ``recursive`` (or several sources) a tree.

        Each file goes to a temporary remote name, renamed into place when
        complete; a pipe (a FIFO) is streamed as :meth:`put_stream` streams,
        a device or socket refused. Layout, arguments and errors mirror
        :meth:`get`. With ``config.resume`` (one file) the temporary name is
        fixed and kept on failure, with a journal in the user's state directory; the next
        resume reads the journaled ranges back and sends only the rest. A
        tree with ``config.resume`` skips the files an earlier run finished.
        ``overwrite=False`` (one file): an existing ``remote`` is never
        replaced, decided by the server as the file takes its name
        (hardlink@openssh.com, or a RENAME that refuses one).

        Returns:
            TransferStats for one file; TreeStats for a tree or several sources.

        Raises:
            LocalError, RemoteError, ConnectionBroken, ProtocolError; for a tree,
            IncompleteTransfer when some entries failed (all others are copied).
            RemoteExists: ``overwrite`` is False and something is at ``remote``.
            UsageError: ``overwrite=False`` for a tree (one file only).
        """
        cfg = self._config(config)
        sources, dest = fspaths(local), fspath(remote)
        pool = await self._ready()
        if is_one(local) and not recursive:
            from .engine import in_order, is_pipe, refused_out_of_order, tracked

            caps, path = pool.server_caps, sources[0]
            # Connected first: the banner may name a profile that writes in order
            # (``in_order``), which decides how many channels the upload leases.
            await pool.open()

            async def put_one(tally: FileTally | None) -> TransferStats:
                try:
                    return await self._put_one(
                        path, dest, in_order(cfg, caps), preserve, tally, overwrite
                    )
                except RemoteError as exc:
                    # A pipe was read once: it cannot be sent again, in order or not.
                    if not refused_out_of_order(exc, in_order(cfg, caps)) or is_pipe(path):
                        raise
                    caps.sequential_writes = True
                    if tally is not None:
                        tally.restart()  # all of it goes again, in order
                    return await self._put_one(
                        path, dest, in_order(cfg, caps), preserve, tally, overwrite
                    )

            return await tracked(progress, path, put_one)
        if not overwrite:
            raise UsageError("overwrite=False is for one file, not a tree")
        await imported("sshpipe.tree.put")
        from ..tree.put import TreePut

        options = tree_options(recursive, preserve, follow_symlinks, fail_fast, progress)
        return await self._tree(TreePut, sources, dest, options, cfg, uploads=True)

    async def _put_one(
        self,
        local: str,
        remote: str,
        cfg: TransferConfig,
        preserve: bool,
        tally: FileTally | None,
        overwrite: bool,
    ) -> TransferStats:
        from .engine import channels_at_start, ledger, upload

        pool = await self._ready()
        if preserve:
            await imported("sshpipe.tree.preserving")
        at_start = channels_at_start(cfg, size=local_size(local), write=True)
        route = await self._auto_route(cfg)
        leasing = pool.lease if route is None else route.lease
        async with leasing(self._spec(cfg), at_start=at_start) as lease:
            await ledger.sweep(pool, lease.channels[0])
            if preserve:
                from ..tree.preserving import upload_preserving

                stats = await upload_preserving(
                    lease, local, remote, cfg, tally, overwrite=overwrite
                )
                return reported(stats, lease)
            # Workers commit by a plain rename: a no-clobber put stays in one process.
            if overwrite and by_workers(cfg, route):
                from ..workers.put import shared_upload

                shared = await shared_upload(
                    self.connect_config, pool, lease, local, remote, cfg, tally
                )
                if shared is not None:
                    return shared
            stats = await upload(lease, local, remote, cfg, tally=tally, overwrite=overwrite)
            return reported(stats, lease)

    async def glob(self, pattern: StrPath) -> list[str]:
        """Remote paths matching ``pattern``, sorted (``*``, ``?``, ``[...]`` per component).

        As in a shell, a name starting with "." is matched only by a pattern
        component that starts with "." too.

        Raises:
            RemoteNotFound: nothing matches.
        """
        path = fspath(pattern)
        pool = await self._ready()
        from .engine import remote_glob

        async with pool.lease(self._spec(self.config)) as lease:
            return await remote_glob(lease.channels[0], path)

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
        from .engine import RoutedPool, ledger

        pool = await self._ready()
        async with pool.lease(self._spec(config)) as lease:
            await lease.channels[0].learn_limits()  # the run is sized from them
            if uploads:
                await ledger.sweep(pool, lease.channels[0])
            route = await self._auto_route()
            routed = pool if route is None else RoutedPool(route)
            run = kind(lease, routed, options, config, sources, dest)
            return await run.run()

    async def stream(
        self,
        remote: StrPath,
        *,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
    ) -> AsyncGenerator[bytes, None]:
        """Yield a remote file's bytes in order, pipelined, with bounded memory.

        Args:
            remote: path on the server.
            progress: as for :meth:`get`, counting the bytes yielded; what it
                raises comes out of the ``async for`` at the next piece.
            config: per-transfer override of the client's TransferConfig.

        Yields:
            Consecutive pieces of the file (sizes vary).

        Raises:
            RemoteError, ConnectionBroken, ProtocolError.
        """
        cfg, path = self._config(config), fspath(remote)
        pool = await self._ready()
        from .engine import stream, stream_reporting

        tally, reporting = stream_reporting(progress, path)
        # aclosing: when our caller closes us, the engine's generator must close
        # now (its handles with it), not whenever the garbage collector gets to it.
        async with (
            reporting as reporter,
            pool.lease(self._spec(cfg)) as lease,
            contextlib.aclosing(stream(lease, path, cfg, tally)) as pieces,
        ):
            async for piece in pieces:
                yield piece
                if reporter is not None:
                    reporter.check()
            if tally is not None:
                tally.complete = True

    async def put_stream(
        self,
        chunks: AsyncIterable[bytes],
        remote: StrPath,
        *,
        mode: int = 0o644,
        progress: ProgressCallback | None = None,
        config: TransferConfig | None = None,
    ) -> TransferStats:
        """Upload from a non-seekable source, e.g. a generator or a pipe reader.

        Args:
            chunks: async iterable of bytes pieces of any size.
            remote: destination path on the server.
            mode: permissions of the new remote file (one replaced keeps its own).
            progress: as for :meth:`get`; the totals grow until the stream ends.
            config: per-transfer override of the client's TransferConfig.

        Returns:
            TransferStats of the transfer.

        Raises:
            RemoteError, ConnectionBroken, ProtocolError, TypeError (non-bytes piece);
            UsageError: ``config.resume`` (a stream cannot be read again).
        """
        cfg, path = self._config(config), fspath(remote)
        if cfg.resume:
            raise UsageError("resume needs a file it can read again, not a stream")
        pool = await self._ready()
        from .engine import in_order, ledger, tracked, upload_stream

        cfg = in_order(cfg, pool.server_caps)  # a stream cannot be sent twice

        async def put_one(tally: FileTally | None) -> TransferStats:
            async with pool.lease(self._spec(cfg)) as lease:
                await ledger.sweep(pool, lease.channels[0])
                return await upload_stream(lease, chunks, path, cfg, mode, tally=tally)

        return await tracked(progress, path, put_one)
