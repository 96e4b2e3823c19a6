"""What parent and worker say to each other: framed pickles over the child's pipes.

Both ends are this package in processes of one user started by one another,
so pickle is safe here (nothing from a server is unpickled: a worker pickles
only its own counts, stats and errors). A frame is a 4-byte big-endian length
and the pickle. An error crosses as (class, message, attributes): the class's
``__init__`` is not called again (its arguments are not kept), so the parent
raises the very class with the very one-line message and exit code the worker
had.
"""

from __future__ import annotations

import dataclasses
import pickle
import struct
from typing import Any, Literal

from ..core import errors
from ..core.config import ConnectConfig, TransferConfig
from ..core.errors import SSHPipeError
from ..core.identity import LocalIdentity
from ..core.readplan import Range
from ..core.stats import TransferStats

_LENGTH = struct.Struct(">I")
# A job or a report is a few KiB (a resumed copy's stripes, a stats record);
# a frame larger than this is a broken pipe's garbage, not a message.
MAX_FRAME = 16 << 20


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Hello:
    """Sent first: how to connect (the worker logs in while the parent plans)."""

    connect: ConnectConfig
    config: TransferConfig


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    """One worker's part of the file: its ranges, and where they go."""

    direction: Literal["get", "put"]
    remote: str  # get: the source; put: the temporary file the parent created
    shown: str  # the remote path as errors name it (the user's, not a temp name)
    local: str  # get: shown in errors (the bytes go to the inherited ``fd``); put: the source
    size: int
    ranges: tuple[Range, ...]
    fd: int = -1  # get: the partial file, inherited (never reopened by name)
    journal: bool = False  # get: report each range written, for the parent's journal
    identity: LocalIdentity | None = None  # put: the source as the parent opened it


@dataclasses.dataclass(frozen=True, slots=True)
class Moved:
    """Bytes written (get) or acknowledged (put) since the last report."""

    count: int
    journal: tuple[tuple[int, int, str], ...] = ()  # (offset, length, sha256 hex) written


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    stats: TransferStats
    final_size: int  # what the worker's plan found the file's size to be (get)


@dataclasses.dataclass(frozen=True, slots=True)
class Failed:
    kind: str  # the class's name in ``sshpipe.core.errors``
    message: str
    attrs: dict[str, Any]


Message = Moved | Done | Failed


def frame(message: object) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


def length_of(header: bytes) -> int:
    (length,) = _LENGTH.unpack(header)
    if length > MAX_FRAME:
        raise ValueError(f"a frame of {length} bytes")
    return int(length)


HEADER = _LENGTH.size


def failed(exc: BaseException) -> Failed:
    """An error as it crosses to the parent; anything not ours is named as a bug's would be."""
    if isinstance(exc, SSHPipeError):
        attrs = {
            key: value
            for key, value in vars(exc).items()
            if isinstance(value, str | int | float | bool | type(None))
        }
        return Failed(type(exc).__name__, exc.args[0] if exc.args else str(exc), attrs)
    return Failed("SSHPipeError", f"worker process: {type(exc).__name__}: {exc}", {})


def rebuilt(failure: Failed) -> SSHPipeError:
    """The worker's error, as the parent raises it: same class, message and exit code."""
    kind = getattr(errors, failure.kind, None)
    if not (isinstance(kind, type) and issubclass(kind, SSHPipeError)):
        kind = SSHPipeError
    exc = kind.__new__(kind)
    Exception.__init__(exc, failure.message)
    for key, value in failure.attrs.items():
        if key != "exit_code":
            setattr(exc, key, value)
    if "exit_code" in failure.attrs:  # IncompleteTransfer's is set per instance
        exc.exit_code = failure.attrs["exit_code"]
    return exc
