"""sshpipe: pipelined SSH/SFTP transfers for asyncio.

Example::

    async with sshpipe.connect("me@example.org") as sp:
        stats = await sp.get("/var/log/big.log", "big.log")
        print(stats.throughput)

Nothing is done at import time: no import hook, no warnings filter (the
command line sets its own, ``transport.loading``); uvloop is loaded only by
the command line. Nothing else is even imported: each public name loads its
module on first use (``__getattr__``).
"""

from __future__ import annotations

# Not typing's TYPE_CHECKING: importing typing (and re, enum) would be most of
# ``import sshpipe``; type checkers take any TYPE_CHECKING as theirs.
TYPE_CHECKING = False
if TYPE_CHECKING:  # what ``__getattr__`` loads, seen by mypy and IDEs
    from typing import Any

    from .client.client import Client
    from .client.connect import connect
    from .client.remotefile import RemoteFile
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
    from .transport.keys import load_key

# Each public name's module, imported on the name's first use: ``import sshpipe``
# loads nothing else, so the command line's --version and --help, and the pure
# core (``import sshpipe.core.readplan``), pay for none of it; the client
# (asyncio, and asyncssh at the connect) loads only when it is asked for.
_ERRORS = (
    "AuthenticationError",
    "ChannelRefused",
    "ClosedError",
    "ConnectDropped",
    "ConnectError",
    "ConnectionBroken",
    "ConnectTimeout",
    "HashUnavailable",
    "HostKeyError",
    "HostKeyMismatch",
    "IncompleteTransfer",
    "IntegrityError",
    "KeyLoadError",
    "LocalError",
    "LocalNoSpace",
    "PoolExhausted",
    "ProtocolError",
    "RemoteError",
    "RemoteExists",
    "RemoteIsADirectory",
    "RemoteNotFound",
    "RemotePermissionDenied",
    "SSHPipeError",
    "Stalled",
    "TimedOut",
    "TooDeep",
    "TransferError",
    "UnknownHostKey",
    "UnsafePath",
    "UsageError",
)
_STATS = (
    "CompressionReport",
    "FlowPhase",
    "Progress",
    "RemoteFileStats",
    "SetupPhase",
    "TransferStats",
    "TreeFailure",
    "TreeProgress",
    "TreeStats",
    "Verified",
)
_HOMES: dict[str, str] = {
    **dict.fromkeys(
        ("DEFAULT_REQUESTS", "ConnectConfig", "TransferConfig", "VerifyLevel"), ".core.config"
    ),
    **dict.fromkeys(_ERRORS, ".core.errors"),
    **dict.fromkeys(("HostKey", "PrivateKey"), ".core.keys"),
    "Prompt": ".core.prompt",
    "RemoteStat": ".core.remotestat",
    **dict.fromkeys(_STATS, ".core.stats"),
    "Client": ".client.client",
    "connect": ".client.connect",
    "RemoteFile": ".client.remotefile",
    "load_key": ".transport.keys",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sshpipe' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(home, __name__), name)
    globals()[name] = value  # found here from now on: __getattr__ is not asked again
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
