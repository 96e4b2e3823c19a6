"""Uploads in file order, for servers that refuse any other (``sequential_writes``).

An object-store backed server (Azure Blob SFTP) takes a file only as one
stream: a WRITE that is not at the current end, as a pipelined upload over
several channels sends them, is refused. In order means one channel, fixed
(its WRITEs go out in offset order and a channel's requests are served in
order), and no block probe (its zeros are rewritten from offset 0).

Detected without being asked: an upload refused a WRITE with a bare failure
is run again in order, once, and the server's ``ServerCaps`` keeps it so for
the rest of the client's life. A refusal for another cause (a full disk)
costs that one attempt more, and then says what it says.
"""

from __future__ import annotations

from dataclasses import replace

from ..core import codec
from ..core.config import TransferConfig
from ..core.errors import RemoteError
from ..core.servercaps import ServerCaps


def in_order(config: TransferConfig, caps: ServerCaps) -> TransferConfig:
    """``config`` for an upload to this server: one fixed channel where it needs order.

    The server's profile may say so too (``quirks.sequential_writes``). In
    order, nothing is written before the end: no ``inplace`` (over the old
    bytes) and no worker processes (each writes its own stripe); a resume
    keeps only what it can append to (``quirks.appendable``).
    """
    if config.sequential_writes or caps.in_order:
        return replace(config, sequential_writes=True, channels=1, inplace=False, workers="auto")
    return config


def refused_out_of_order(exc: RemoteError, config: TransferConfig) -> bool:
    """Whether an upload failed with ``exc`` should run again in file order."""
    return (
        not config.sequential_writes
        and exc.offset is not None
        and exc.status in (codec.FX_FAILURE, codec.FX_OP_UNSUPPORTED)
    )
