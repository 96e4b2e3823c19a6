"""sshpipe: pipelined SSH/SFTP transfers for asyncio.

Example::

    async with sshpipe.connect("me@example.org") as sp:
        stats = await sp.get("/var/log/big.log", "big.log")
        print(stats.throughput)

Nothing is done at import time; uvloop is loaded only by the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._config import DEFAULT_REQUESTS, ConnectConfig, TransferConfig
from ._errors import (
    AuthenticationError,
    ChannelRefused,
    ClosedError,
    ConnectError,
    ConnectionBroken,
    ConnectTimeout,
    HostKeyError,
    HostKeyMismatch,
    IncompleteTransfer,
    IntegrityError,
    LocalError,
    LocalNoSpace,
    PoolExhausted,
    ProtocolError,
    RemoteError,
    RemoteIsADirectory,
    RemoteNotFound,
    RemotePermissionDenied,
    SSHPipeError,
    Stalled,
    TimedOut,
    TransferError,
    UnknownHostKey,
    UnsafePath,
    UsageError,
)
from ._stats import SetupPhase, TransferStats, TreeFailure, TreeProgress, TreeStats

if TYPE_CHECKING:
    from ._client import Client, connect


def __getattr__(name: str) -> Any:
    # The client pulls in asyncio and asyncssh; loading it on first use keeps
    # ``import sshpipe.core.readplan`` (the pure core) free of both.
    if name in ("Client", "connect"):
        from . import _client

        return getattr(_client, name)
    raise AttributeError(f"module 'sshpipe' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "DEFAULT_REQUESTS",
    "AuthenticationError",
    "ChannelRefused",
    "Client",
    "ClosedError",
    "ConnectConfig",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionBroken",
    "HostKeyError",
    "HostKeyMismatch",
    "IncompleteTransfer",
    "IntegrityError",
    "LocalError",
    "LocalNoSpace",
    "PoolExhausted",
    "ProtocolError",
    "RemoteError",
    "RemoteIsADirectory",
    "RemoteNotFound",
    "RemotePermissionDenied",
    "SSHPipeError",
    "SetupPhase",
    "Stalled",
    "TimedOut",
    "TransferConfig",
    "TransferError",
    "TransferStats",
    "TreeFailure",
    "TreeProgress",
    "TreeStats",
    "UnknownHostKey",
    "UnsafePath",
    "UsageError",
    "__version__",
    "connect",
]
