"""Requests a server sends unasked, bounded (``flood_cap``).

A server may send GLOBAL_REQUESTs (``keepalive@openssh.com``,
``hostkeys-00@openssh.com``) and CHANNEL_OPENs (forwarded ports, the agent,
X11) at any time; asyncssh answers each at once (a CHANNEL_OPEN we asked
nothing for is refused), inside the receive callback that read it, however
many that read holds. A hostile server that sends them without end keeps the
event loop answering: one 256 KiB read of them took 0.3 s of CPU, 2.6 s of wall
time on a loaded two-core machine, and uvloop reads up to 32 x 64 KiB before it
looks at its timers again (the stall watchdog among them): a 10 s stall timeout
fired after 30 to 90 s, or not within two minutes. If the server also stops
reading, our answers pile up in memory.

Past ``core.untrusted.UNASKED_BURST`` of them, beyond ``UNASKED_RATE`` a second,
the connection is dropped as asyncssh drops a corrupt one (``Flooded``, a
``ProtocolError``: a DISCONNECT is sent, the channels end, their transfers
reconnect as from any dropped connection). Only after the log-in: before it,
asyncssh drops a connection at the first such packet. Only a bound: without it (another
asyncssh release) the stall watchdog still ends the transfer, its firing late
by what one read costs.
"""

from __future__ import annotations

import time
from typing import Any

import asyncssh
from asyncssh.constants import MSG_CHANNEL_OPEN, MSG_GLOBAL_REQUEST
from asyncssh.packet import SSHPacket

from ...core.ratelimit import TokenBucket
from ...core.untrusted import UNASKED_BURST, UNASKED_RATE

__all__ = ["CAPPED", "FLOOD_CAP", "Flooded", "cap_unasked"]

FLOOD_CAP = "flood_cap"
# The packets a server sends unasked and asyncssh answers itself.
CAPPED = (MSG_GLOBAL_REQUEST, MSG_CHANNEL_OPEN)


class Flooded(asyncssh.ProtocolError):
    """The server sent more requests unasked than any honest one does."""


def cap_unasked(conn: Any) -> bool:
    """Count the ``CAPPED`` packets ``conn`` receives; drop it past the bound. False if
    its handlers are not as read (then it stays stock).

    Wraps whatever handles them now (``prompt_ack``'s GLOBAL_REQUEST): a
    packet past the bound is refused before anything answers it.
    """
    handlers: Any = getattr(conn, "_packet_handlers", None)
    if not (isinstance(handlers, dict) and all(callable(handlers.get(t)) for t in CAPPED)):
        return False
    bucket = TokenBucket(UNASKED_RATE, UNASKED_BURST, now=time.monotonic())

    def capped(handler: Any) -> Any:
        def handle(self: Any, pkttype: int, pktid: int, packet: SSHPacket) -> None:
            now = time.monotonic()
            if bucket.delay(now, 1) > 0:
                raise Flooded(
                    f"the server sent {bucket.spent + 1} requests unasked (GLOBAL_REQUEST, "
                    f"CHANNEL_OPEN), over {UNASKED_RATE:g} a second: dropped as a flood"
                )
            bucket.take(now, 1)
            handler(self, pkttype, pktid, packet)

        return handle

    conn._packet_handlers = {**handlers, **{t: capped(handlers[t]) for t in CAPPED}}
    return True
