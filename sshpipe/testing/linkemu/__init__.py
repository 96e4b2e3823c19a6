"""A user-space WAN link emulator: a TCP proxy on loopback with delay, rate, queue and faults.

Made for machines without ``tc netem`` (containers, CI), to run tests,
benchmarks and the demo over a path that behaves like a long fat network.

The model, per direction (client to target is "up", target to client is
"down"), is the one netem builds with ``delay`` + ``rate`` + ``limit``::

    sender ──► bottleneck queue ──► serializer at `rate` ──► delay rtt/2 ──► receiver

* A chunk of ``n`` bytes arriving at ``now`` finishes serialization at
  ``t_s = max(now, previous t_s) + n * 8 / rate`` and reaches the receiver at
  ``t_s + rtt / 2``. Nothing is reordered, dropped or duplicated.
* The queue holds the bytes not yet serialized. While it is above ``queue``
  bytes the proxy stops reading the sender's socket, so TCP flow control
  pushes back on the sender as a full router buffer would -- without drops,
  so there is no loss-driven congestion control to emulate.
* A receiver that reads slower than the link makes its socket push back on
  the proxy, which holds the data (bounded) and stops reading the sender.
* Faults act on the live connections: ``cut_after`` (reset after N bytes),
  ``stall`` (nothing moves for a while), ``close_direction`` (half-close).

What it does not emulate: loss, reordering, jitter, the handshake's round
trip (the client's connect completes at once), and TCP's own slow start over
the long path (each hop is a loopback connection).

Example::

    from sshpipe.testing.linkemu import LinkEmulator, LinkSpec

    async with LinkEmulator("127.0.0.1", sshd_port, LinkSpec(rtt=0.1, rate=1e9)) as link:
        await sshpipe.connect("me@127.0.0.1", port=link.port)  # 100 ms, 1 Gbit/s away

From the shell (prints ``listening on 127.0.0.1:PORT``, then a JSON line of
stats when stopped by SIGINT or SIGTERM)::

    python -m sshpipe.testing.linkemu --target 127.0.0.1:22 --rtt 100 --rate 1000

The pure model is in ``_model`` (no sockets, no clock), the asyncio proxy in
``_proxy`` (one direction in ``_pipe``, one proxied connection in ``_connection``).
"""

from __future__ import annotations

from ._model import LinkSpec, LinkStats
from ._proxy import Direction, LinkEmulator

__all__ = ["Direction", "LinkEmulator", "LinkSpec", "LinkStats"]
