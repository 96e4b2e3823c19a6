"""Opening channels for the pool: on its connections with room, and on new ones.

``open_channels`` is the pool's own half, as ``poollease`` is: it reserves
room in the pool's bookkeeping before every await (transfers asking at the
same moment must see each other's reservations), then opens everything at
once in one TaskGroup. Split out of ``pool.py`` for size alone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..core.config import TransferConfig
from ..core.errors import ChannelRefused, SSHPipeError, Stalled
from ..core.sizing import reply_cap
from .linkopen import open_link
from .poolshare import PooledLink, channel_key
from .sftp import SFTPSession

if TYPE_CHECKING:
    from .pool import ChannelPool

logger = logging.getLogger("sshpipe.client")


async def open_channels(
    pool: ChannelPool,
    config: TransferConfig,
    count: int,
    errors: list[BaseException],
    ready: Callable[[SFTPSession], None] | None = None,
) -> list[SFTPSession]:
    """Open ``count`` channels concurrently over the connections with room and new ones."""
    if count <= 0 or pool._closed:  # closed meanwhile: no new connection for nobody
        return []
    # Bookkeeping first: reserve room on each connection before awaiting.
    learned = pool.server_caps.channels  # channels the server sets up per connection
    plan: list[PooledLink] = []  # a channel to open on each existing connection listed
    for slot in pool._slots:
        if learned is not None:
            slot.cap = min(slot.cap, max(learned, slot.open))
        take = min(slot.room, count - len(plan))
        slot.open += take
        plan += [slot] * take
    per_new = min(config.channels_per_connection, learned or config.channels_per_connection)
    new_links = min(
        -(-(count - len(plan)) // per_new),
        config.max_connections - len(pool._slots) - pool._connecting,
    )
    new_counts = [min(per_new, count - len(plan) - i * per_new) for i in range(max(new_links, 0))]
    # Reserved now, before any await: transfers asking at the same moment
    # must see these connections as already coming (64 concurrent gets
    # opened 55 connections when each counted only the ones under way).
    pool._connecting += len(new_counts)
    unsettled = [len(new_counts)]  # reservations not yet given back
    opened: list[SFTPSession] = []

    async def on_slot(slot: PooledLink) -> None:
        try:
            await open_on(slot)
        finally:
            pool._room.wake()  # a channel to share came, or its room is free again

    async def open_on(slot: PooledLink) -> None:
        began = time.monotonic()
        try:
            sftp = await slot.link.open_sftp(
                window=config.window,
                max_packet_size=config.max_packet_size,
                max_reply=reply_cap(config.block_size),
                stall_timeout=config.stall_timeout,
                known_limits=pool._server_limits,
            )
        except (ChannelRefused, Stalled) as exc:
            # Refused: the server said how many it allows. Not set up in the
            # stall timeout: it answers no more here (a server that opens each
            # connection's first channels only), or the connection is dead, and
            # its channels' own watchdogs find that out. Either way this
            # connection takes no more: what it would not open goes elsewhere.
            slot.open -= 1
            slot.cap = slot.open
            errors.append(exc)
            if isinstance(exc, Stalled) and slot.link.replies.at > began:
                # It answered its other channels meanwhile: the silence was
                # aimed at this one. Each new connection then opens no more.
                pool.server_caps.channel_unanswered(slot.open)
            if slot.cap == 0:
                pool._drop_unused(slot)  # it may carry nothing: of no use
            return
        except SSHPipeError as exc:
            slot.open -= 1
            errors.append(exc)
            return
        except BaseException:
            slot.open -= 1
            raise
        if pool._closed:
            sftp.close()
            slot.open -= 1
            return
        sftp.on_limits = pool._learned
        sftp.caps = pool.server_caps
        sftp.temps = pool.temps
        sftp.client_bytes = pool.client_bytes
        pool.peer = pool.peer or sftp.peer
        pool.server_profile = pool.server_profile or sftp.profile
        pool._slot_of[sftp] = slot
        pool._busy.add(channel_key(config), [sftp])
        opened.append(sftp)
        if ready is not None:
            ready(sftp)

    async def on_new_link(channels: int) -> None:
        try:
            link = await open_link(pool.connect_config, pool.auth_memory, retries=config.retries)
        except SSHPipeError as exc:
            errors.append(exc)
            return
        finally:
            pool._connecting -= 1
            unsettled[0] -= 1
            pool._room.wake()  # waiters for it may share now, or find its room
        if pool._closed:
            await link.close()
            return
        slot = PooledLink(link, per_new, open=channels)
        pool._slots.append(slot)
        async with asyncio.TaskGroup() as group:
            for _ in range(channels):
                group.create_task(on_slot(slot))

    try:
        async with asyncio.TaskGroup() as group:
            for slot in plan:
                group.create_task(on_slot(slot))
            for channels in new_counts:
                group.create_task(on_new_link(channels))
    except BaseException:
        # Cancelled (or failed) midway: what opened is closed, unless it was
        # already handed to ``ready`` (a grower's lane, a lease's spare):
        # that is its holder's to give back.
        if ready is None:
            for sftp in opened:
                pool._busy.discard(sftp)
                pool._forget(sftp)
                sftp.close()
        raise
    finally:
        pool._connecting -= unsettled[0]  # tasks cancelled before they started
    if errors:
        logger.debug("%d channel(s) not opened: %s", len(errors), errors[0])
    return opened
