"""Where the pool's links come from: a mux master's socket, else a connection of our own.

The one place that decides direct vs mux (``ConnectConfig.control_path``):
a master answering there gives a ``muxclient.MuxLink``; none answering (never
started, exited, its connection died) falls back to ``ssh.open_link``, so a
transfer whose master went away reconnects directly. ``ssh`` (and asyncssh
with it) is imported only for a direct connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

from ..core.codec import Limits
from ..core.compresspolicy import CompressionMode
from ..core.config import DEFAULT_CONNECT_TIMEOUT, ConnectConfig
from ..core.errors import ConnectDropped, ConnectionBroken
from .replies import ReplyClock
from .sftp import SFTPSession

if TYPE_CHECKING:
    from .auth import AuthMemory  # imports asyncssh: only a direct log-in needs it


class Link(Protocol):
    """What the pool uses of a link: ``sshlink.SSHLink`` and ``muxclient.MuxLink`` both are one."""

    rtt_estimate: float
    compression: str  # the algorithm agreed on at key exchange ("none", "zlib@openssh.com")
    compression_mode: CompressionMode  # the Compression setting in force: "auto", "yes" or "no"
    refuses_exec: bool
    replies: ReplyClock  # when a whole reply last came on any of its channels

    @property
    def closed(self) -> bool: ...

    async def open_sftp(
        self,
        *,
        window: int,
        max_packet_size: int,
        max_reply: int,
        stall_timeout: float,
        known_limits: Limits | None = None,
    ) -> SFTPSession: ...

    def abort(self, *, stalled: bool = False) -> None: ...

    async def close(self) -> None: ...


__all__ = ["Link", "LoginTurns", "open_link"]

logger = logging.getLogger("sshpipe.mux")


class LoginTurns:
    """One log-in at a time; those who waited behind one that failed hear its error,
    unless the server was only busy.

    A filesystem's early log-in and its first call (``fsspec._clients``), or
    two transfers starting at once, would otherwise each connect: a caller
    arriving while a log-in runs takes its outcome. A connection the server
    dropped before the log-in (``ConnectDropped``: sshd's MaxStartups, busy
    now) stays the attempt's own: each waiter then tries itself, in turn, so
    one dropped pre-auth connection does not fail every transfer waiting on
    it. Anything else is the same for all of them now (credentials refused, a
    host key not trusted, nothing listening, a timeout: one try per waiter
    would only multiply the wait), and they hear it. A caller arriving after
    a failure tries again itself.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._failures = 0
        self._error: Exception | None = None

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """The body logs in (or finds it done); raises the failure it waited behind."""
        failures = self._failures
        async with self._lock:
            error = self._error
            if self._failures != failures and error is not None and not _busy(error):
                raise error
            try:
                yield
            except Exception as exc:
                self._failures, self._error = self._failures + 1, exc
                raise


def _busy(error: Exception) -> bool:
    """A log-in failure that says the server is busy now, not that it refuses us."""
    return isinstance(error, ConnectDropped)


_SSH = "sshpipe.transport.ssh"


async def open_link(
    cfg: ConnectConfig, memory: AuthMemory | None = None, *, retries: int = 0
) -> Link:
    """A link to ``cfg``'s server: through its master if one answers, else direct.

    Args:
        memory: for a direct log-in, what earlier ones learnt (``ssh.open_link``).
        retries: for a direct log-in, the tries more after the server closed
            the connection before the log-in (``ssh.open_link``).

    Raises:
        as ``ssh.open_link``; ConnectError (its kinds) when the master could
        not open a connection for another link.
    """
    if cfg.control_path is not None:
        from .muxclient import open_mux_link  # only with a ControlPath: not in a direct get

        try:
            within = cfg.connect_timeout or DEFAULT_CONNECT_TIMEOUT
            return await open_mux_link(cfg.control_path, within)
        except ConnectionBroken as exc:
            logger.debug("mux: %s; connecting directly", exc)
    if _SSH not in sys.modules:
        # asyncssh and cryptography with it: 0.3 s and more, off the caller's loop.
        await asyncio.to_thread(importlib.import_module, _SSH)
    from .ssh import open_link as open_direct

    return await open_direct(cfg, memory, retries=retries)
