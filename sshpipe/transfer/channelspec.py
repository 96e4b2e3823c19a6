"""A transfer's config unpacked, once, into what the pool reads of it.

The pool (``transport.pool``) never sees a ``TransferConfig``: each lease is
asked with a ``transport.lease.ChannelSpec``, made here by whichever driver
takes the lease (one file, a tree's big files, a worker process, the API's
remote operations).
"""

from __future__ import annotations

from ..core.config import TransferConfig, connections_per_host
from ..core.sizing import reply_cap
from ..transport.lease import ChannelSpec


def channel_spec(config: TransferConfig) -> ChannelSpec:
    """The channels a transfer under ``config`` asks the pool for, and how."""
    return ChannelSpec(
        window=config.window,
        max_packet_size=config.max_packet_size,
        # A channel carries replies as long as the READs its transfer asks for.
        max_reply=reply_cap(config.block_size),
        stall_timeout=config.stall_timeout,
        queue_timeout=config.queue_timeout,
        channels=config.channels,
        channels_per_connection=config.channels_per_connection,
        max_connections=config.max_connections,
        retries=config.retries,
        rate_limit=config.rate_limit,
        server_profile=config.server_profile,
        max_connections_per_host=connections_per_host(
            config.max_connections_per_host, config.max_connections
        ),
    )
