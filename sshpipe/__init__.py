"""sshpipe: pipelined SSH/SFTP transfers for asyncio.

Example::

    async with sshpipe.connect("me@example.org") as sp:
        stats = await sp.get("/var/log/big.log", "big.log")
        print(stats.throughput)

Nothing is done at import time; uvloop is loaded only by the command line.
"""

from __future__ import annotations

from ._client import Client, connect
from ._config import (
    DEFAULT_REQUESTS,
    ConnectConfig,
    TransferConfig,
)
from ._errors import (
    AuthenticationError,
    ClosedError,
    ConnectError,
    ConnectionBroken,
    HostKeyError,
    HostKeyMismatch,
    LocalError,
    ProtocolError,
    RemoteError,
    RemoteIsADirectory,
    RemoteNotFound,
    RemotePermissionDenied,
    SSHPipeError,
    TransferError,
    UnknownHostKey,
    UsageError,
)
from ._stats import TransferStats

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_REQUESTS",
    "AuthenticationError",
    "Client",
    "ClosedError",
    "ConnectConfig",
    "ConnectError",
    "ConnectionBroken",
    "HostKeyError",
    "HostKeyMismatch",
    "LocalError",
    "ProtocolError",
    "RemoteError",
    "RemoteIsADirectory",
    "RemoteNotFound",
    "RemotePermissionDenied",
    "SSHPipeError",
    "TransferConfig",
    "TransferError",
    "TransferStats",
    "UnknownHostKey",
    "UsageError",
    "__version__",
    "connect",
]
