"""What one server allows this process: connections under a budget, channels per connection.

A server's limits are the process's to respect, not each client's: sshd's
``MaxStartups`` counts every unauthenticated connection from anywhere, and
its ``MaxSessions`` every channel of a connection, whichever client opened
it. So every pool of the process reaching one server (``host``, ``port``,
``user``) shares one ``HostLimits``:

- ``connections``: held (open or being opened) by every pool of the process;
  a client grows past its first connection only while the count is under its
  ``max_connections_per_host``. A client's first connection is always its
  own: waiting for another client to close one could wait for ever (an idle
  pool keeps its connections), and every client needs one to do anything.
  A Dask worker's threads share fsspec's one filesystem instance, so one
  client; the budget bounds the growth of clients made by hand (a web app's,
  a script's ``gather`` of clients) and of filesystems made apart.
- ``channels``: channels one connection carries, learned from a refusal
  (sshd's ``MaxSessions``), so every new connection of every client asks for
  no more and pays no refused opens.

``ConnectionBudget`` is one client's view: its own cap (``max_connections``,
counting every pool of the client: Compression auto's compressed connection
too) and its server's. Bookkeeping only, under a lock: pools on different
event loops (fsspec's loop thread and the caller's) may share a server.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

from ..core.config import ConnectConfig

__all__ = ["ConnectionBudget", "HostLimits", "host_limits"]


@dataclass(eq=False)
class HostLimits:
    """One server's clients in this process, and the channels it lets one connection carry."""

    channels: int | None = None  # learned from a refusal; None: none seen
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Every client's budget, weakly: a client dropped without being closed
    # takes its count with it instead of holding the server's budget for ever.
    budgets: weakref.WeakSet[ConnectionBudget] = field(default_factory=weakref.WeakSet, repr=False)

    @property
    def connections(self) -> int:
        """Connections the process holds to the server (open or being opened)."""
        return sum(budget.held for budget in list(self.budgets))

    def refused_channel(self, carried: int) -> None:
        """A connection carrying (or opening) ``carried`` channels was refused one more."""
        if carried >= 1:
            with self.lock:
                self.channels = min(self.channels or carried, carried)


_SERVERS: dict[tuple[str, int | None, str | None], HostLimits] = {}
_SERVERS_LOCK = threading.Lock()


def host_limits(cfg: ConnectConfig) -> HostLimits:
    """The process's ``HostLimits`` for ``cfg``'s server, made on first use."""
    key = (cfg.host, cfg.port, cfg.username)
    with _SERVERS_LOCK:
        found = _SERVERS.get(key)
        if found is None:
            found = _SERVERS[key] = HostLimits()
        return found


class ConnectionBudget:
    """One client's connections: under its own cap and its server's per-process budget.

    Args:
        server: the server's ``HostLimits``, shared by the process.
        cap: connections this client may hold (``max_connections``).
        per_host: connections the process may hold to the server before this
            client stops growing (``max_connections_per_host``).
    """

    def __init__(self, server: HostLimits, *, cap: int, per_host: int) -> None:
        self.server = server
        self.cap = cap
        self.per_host = per_host
        self.held = 0  # this client's, open or being opened, over all its pools
        with server.lock:
            server.budgets.add(self)

    def __repr__(self) -> str:
        return (
            f"<ConnectionBudget held={self.held}/{self.cap} "
            f"server={self.server.connections}/{self.per_host}>"
        )

    def take(self, wanted: int) -> int:
        """Reserve up to ``wanted`` new connections now; how many were granted.

        The client's first connection is granted whatever the server's budget
        says (see the module's docstring); never more than the client's cap.
        """
        with self.server.lock:
            granted = max(0, min(wanted, self.cap - self.held))
            if self.held > 0:
                granted = max(0, min(granted, self.per_host - self.server.connections))
            elif granted:
                granted = max(1, min(granted, self.per_host - self.server.connections))
            self.held += granted
            return granted

    def give_back(self, count: int = 1) -> None:
        """``count`` connections closed, lost, or never opened."""
        with self.server.lock:
            self.held -= min(count, self.held)
