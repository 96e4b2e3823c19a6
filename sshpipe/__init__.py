"""sshpipe: pipelined SSH/SFTP transfers for asyncio.

Example::

    async with sshpipe.connect("me@example.org") as sp:
        stats = await sp.get("/var/log/big.log", "big.log")
        print(stats.throughput)

Nothing is done at import time: no import hook, no warnings filter (the
command line sets its own, ``transport.loading``); uvloop is loaded only by
the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .core.config import DEFAULT_REQUESTS, ConnectConfig, TransferConfig, VerifyLevel
from .core.errors import (
    AuthenticationError,
    ChannelRefused,
    ClosedError,
    ConnectDropped,
    ConnectError,
    ConnectionBroken,
    ConnectTimeout,
    HashUnavailable,
    HostKeyError,
    HostKeyMismatch,
    IncompleteTransfer,
    IntegrityError,
    KeyLoadError,
    LocalError,
    LocalNoSpace,
    PoolExhausted,
    ProtocolError,
    RemoteError,
    RemoteExists,
    RemoteIsADirectory,
    RemoteNotFound,
    RemotePermissionDenied,
    SSHPipeError,
    Stalled,
    TimedOut,
    TooDeep,
    TransferError,
    UnknownHostKey,
    UnsafePath,
    UsageError,
)
from .core.keys import HostKey, PrivateKey
from .core.prompt import Prompt
from .core.remotestat import RemoteStat
from .core.stats import (
    CompressionReport,
    FlowPhase,
    Progress,
    RemoteFileStats,
    SetupPhase,
    TransferStats,
    TreeFailure,
    TreeProgress,
    TreeStats,
    Verified,
)

if TYPE_CHECKING:
    from .client.client import Client
    from .client.connect import connect
    from .client.remotefile import RemoteFile
    from .transport.keys import load_key


def __getattr__(name: str) -> Any:
    # The client pulls in asyncio and asyncssh; loading it on first use keeps
    # ``import sshpipe.core.readplan`` (the pure core) free of both.
    if name == "Client":
        from .client.client import Client

        return Client
    if name == "connect":
        from .client.connect import connect

        return connect
    if name == "RemoteFile":
        from .client.remotefile import RemoteFile

        return RemoteFile
    if name == "load_key":
        from .transport.keys import load_key

        return load_key
    raise AttributeError(f"module 'sshpipe' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "DEFAULT_REQUESTS",
    "AuthenticationError",
    "ChannelRefused",
    "Client",
    "ClosedError",
    "CompressionReport",
    "ConnectConfig",
    "ConnectDropped",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionBroken",
    "FlowPhase",
    "HashUnavailable",
    "HostKey",
    "HostKeyError",
    "HostKeyMismatch",
    "IncompleteTransfer",
    "IntegrityError",
    "KeyLoadError",
    "LocalError",
    "LocalNoSpace",
    "PoolExhausted",
    "PrivateKey",
    "Progress",
    "Prompt",
    "ProtocolError",
    "RemoteError",
    "RemoteExists",
    "RemoteFile",
    "RemoteFileStats",
    "RemoteIsADirectory",
    "RemoteNotFound",
    "RemotePermissionDenied",
    "RemoteStat",
    "SSHPipeError",
    "SetupPhase",
    "Stalled",
    "TimedOut",
    "TooDeep",
    "TransferConfig",
    "TransferError",
    "TransferStats",
    "TreeFailure",
    "TreeProgress",
    "TreeStats",
    "UnknownHostKey",
    "UnsafePath",
    "UsageError",
    "Verified",
    "VerifyLevel",
    "__version__",
    "connect",
    "load_key",
]
