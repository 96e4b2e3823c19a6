"""A client's life: made unopened, bound to one event loop, opened once, closed once.

``ClientBase`` holds what every transfer of :class:`sshpipe.Client` starts
with (``_ready``: the pool, the engine imported without stalling the loop)
and ends with; the transfers themselves are in ``_client``.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from types import TracebackType
from typing import TYPE_CHECKING, Self

from ..core.config import ConnectConfig, TransferConfig
from ..core.errors import ClosedError, UsageError
from ..core.flight import SharedBytes
from .choices import by_workers

if TYPE_CHECKING:
    from ..transport.compressroute import CompressRoute
    from ..transport.lease import ChannelSpec
    from ..transport.pool import ChannelPool

# The engine (asyncssh, cryptography and the transfer modules: 0.3 s and more
# of imports) loads on the client's first use, in a worker thread, so the
# caller's event loop keeps running meanwhile.
ENGINE = "sshpipe.client.engine"
# How an unopened client's pool would show itself (``ChannelPool.state``).
_NO_CHANNELS = "connections=0 idle_channels=0 busy_channels=0"


async def imported(module: str) -> None:
    """``module`` imported, in a worker thread unless it already is (no stall of the loop)."""
    if module not in sys.modules:
        await asyncio.to_thread(importlib.import_module, module)


class ClientBase:
    """Opening, closing and the event loop of :class:`sshpipe.Client` (see there)."""

    def __init__(self, connect_config: ConnectConfig, transfer_config: TransferConfig) -> None:
        self.connect_config = connect_config
        self.config = transfer_config
        self._pool: ChannelPool | None = None  # made on first use (``_ready``)
        self._closed = False  # closed before its pool was made
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of its first use
        self._entered = 0  # ``async with`` blocks open on it now
        # Tasks entering at once wait for one log-in, not one each.
        self._opening = asyncio.Lock()
        self.left_temps: tuple[str, ...] = ()  # see ``aclose``
        self._swept_local = False  # a download looked for what dead runs left here
        self._route: CompressRoute | None = None  # Compression auto's, made with the pool
        # The engine's import, one for every caller: they go on in the order
        # they asked (an early ``warm`` counts its channels before a call made
        # meanwhile looks for them, ``ChannelPool._leased``).
        self._engine: asyncio.Future[None] | None = None

    def __repr__(self) -> str:
        if self._pool is not None:
            return f"<Client {self.connect_config.host} {self._pool.state}>"
        state = "closed" if self._closed else "new"
        return f"<Client {self.connect_config.host} {state} {_NO_CHANNELS}>"

    async def __aenter__(self) -> Self:
        self._entered += 1  # counted first: an exit always matches an entry
        try:
            await self._connect()
        except BaseException:
            self._entered -= 1
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._entered -= 1
        if self._entered == 0:
            await self.aclose()

    def _on_its_loop(self) -> None:
        """Bind the client to the running loop on first use; refuse any other loop.

        Raises:
            UsageError: the loop is not the one the client was first used on.
        """
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif loop is not self._loop:
            raise UsageError(
                "this client belongs to another event loop (the one it was first used on: "
                "each asyncio.run() starts a new loop); connect a new client on this one"
            )

    async def _ready(self) -> ChannelPool:
        """The pool, made (the engine imported) on first use on the client's own loop.

        Raises:
            UsageError: another event loop. ClosedError: the client was closed.
        """
        self._on_its_loop()
        if self._pool is None:
            if self._closed:
                raise ClosedError("this client was closed")
            failed = (
                self._engine is not None
                and self._engine.done()
                and (self._engine.cancelled() or self._engine.exception() is not None)
            )
            if self._engine is None or failed:  # a failed import is tried again
                self._engine = asyncio.ensure_future(imported(ENGINE))
            await asyncio.shield(self._engine)  # a cancelled caller leaves it to the others
            from .engine import ChannelPool

            if self._pool is None:  # another task may have made it meanwhile
                from .engine import CompressRoute, ledger

                self._pool = ChannelPool(
                    self.connect_config,
                    self._spec(self.config),
                    client_bytes=SharedBytes(self.config.max_bytes_in_flight),
                )
                ledger.record_remote(self._pool)
                self._route = CompressRoute(self._pool)
        return self._pool

    def _spec(self, config: TransferConfig) -> ChannelSpec:
        """What a lease under ``config`` asks the pool for (the engine is imported)."""
        from .engine import channel_spec

        return channel_spec(config)

    async def _auto_route(self, config: TransferConfig | None = None) -> CompressRoute | None:
        """The compression route when compression is auto (the server may offer none).

        None for one file asked to go by worker processes (``config``'s
        ``workers``) where auto is only the default or ssh_config's: the
        workers go plain (``workers.common.hello_for``); an explicit
        ``compression="auto"`` keeps the file in one process.
        """
        route = self._route
        if route is None or await route.mode() != "auto":
            return None
        if (
            config is not None
            and self.connect_config.compression != "auto"
            and by_workers(config, None)
        ):
            return None
        return route

    async def _connect(self) -> None:
        """Connect and authenticate (``open()``, ``async with``; a transfer does it too).

        Raises:
            ConnectError, AuthenticationError, HostKeyError: see the exception tree.
            ClosedError: the client was closed. UsageError: another event loop.
        """
        pool = await self._ready()
        async with self._opening:
            if self._route is not None:
                self._route.speculate()  # beside this log-in, not after it
            try:
                await pool.open()
            except BaseException:
                if self._route is not None:
                    await self._route.cancel_early()
                raise

    async def _sweep_local(self, config: TransferConfig) -> None:
        """Before the client's first download: the local temporary files dead runs left go."""
        if self._swept_local:
            return
        self._swept_local = True
        from .engine import ledger

        if config.local_io_in_thread:
            from ..local.target import run_blocking

            await run_blocking(ledger.sweep_local_quietly)
        else:
            ledger.sweep_local_quietly()

    async def warm(self, channels: int = 1) -> None:
        """Connect, and open up to ``channels`` SFTP channels to keep idle for what comes.

        The first request then pays no log-in or channel set-up (5 or 6
        round trips); it never waits for room the client does not have.

        Raises:
            as :meth:`open` (connecting).
        """
        pool = await self._ready()
        await pool.warm(
            self._spec(self.config), channels
        )  # it logs in first (``ChannelPool.open``)

    async def aclose(self) -> None:
        """Close every channel and connection; calling it twice is fine.

        This closes the client whatever ``async with`` blocks are open on it.
        Temp files of failed uploads that the server could not be made to
        remove (it went away) are logged in one warning line and listed in
        ``left_temps`` (those whose OPEN was answered; the line also counts
        those that may have been made, an OPEN or REMOVE unanswered). All of
        them are in the ledger (``$XDG_STATE_HOME/sshpipe/ledger/``): the next
        upload to that server removes them first, as ``sshpipe clean`` does.

        Raises:
            UsageError: the client has connections on another event loop.
        """
        if self._pool is None:
            self._closed = True
            return
        self._on_its_loop()
        from .engine import ledger

        try:
            await self._pool.aclose()  # first: a cancelled upload's REMOVE may be settling
            if self._route is not None:
                await self._route.aclose()
        finally:
            self.left_temps = tuple(ledger.report_left(self._pool.temps))
            ledger.release_local()

    def abort(self) -> None:
        """Drop every connection at once, without waiting for the server.

        Everything in flight fails at once with ConnectionBroken; what the
        transfers clean up locally (temporary files) they still do, but
        nothing more is asked of the server. For a server that stopped
        answering, or a user's second Ctrl-C. ``aclose()`` is still the way out.
        """
        if self._pool is not None:
            self._pool.abort()
        if self._route is not None:
            self._route.abort()

    @property
    def connections(self) -> int:
        """SSH connections open now."""
        return self._pool.connections if self._pool is not None else 0

    @property
    def server(self) -> dict[str, object]:
        """What the server is and offers (its banner's software, SYMLINK order, the
        extensions that matter, its stated limits) and the caps sshpipe found by
        trying ("learned": handles, read/write block, requests, sequential writes).
        Empty until a channel is open; ``--json`` shows it as "server"."""
        return self._pool.server() if self._pool is not None else {}
