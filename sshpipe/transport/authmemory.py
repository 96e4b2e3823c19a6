"""``AuthMemory``: what a client's log-ins learnt, kept for its later ones (``auth``).

A module of its own, without asyncssh: the pool holds one from its start,
and a pool whose links all go through a mux master never imports asyncssh.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncssh

    from ..core.compresspolicy import CompressionMode

__all__ = ["AuthMemory"]


class AuthMemory:
    """What a client's log-ins learnt, in memory only: reused by every later connection.

    Attributes:
        password: the password the server accepted.
        unlocked: the keys a passphrase opened, by file.
        abandoned: key files given up on (no answer, or every try wrong):
            not asked about again.
        answers: keyboard-interactive answers that worked, by (name, prompt):
            replayed once per connection (a one-time code the server refuses
            is asked again).
    """

    def __init__(self) -> None:
        self.password: str | None = None
        self.unlocked: dict[str, list[asyncssh.SSHKeyPair]] = {}
        self.abandoned: set[str] = set()
        self.answers: dict[tuple[str, str], str] = {}
        self.lock = asyncio.Lock()  # one prompt at a time across connections
        # The first log-in's round trip from its SERVICE_REQUEST to the
        # SERVICE_ACCEPT (``asyncssh_patches``): no server work in it, where the
        # log-in's phases carry sshd's signature check and fork. None where
        # not measured. ``rtt_known`` is set once it is, or once that log-in
        # is over without it: either way past its key exchange, so a log-in
        # begun then (Compression auto's, ``compressroute``) reads a new host's
        # key as recorded, not as one more to record (or as changed).
        # ``compression`` is the setting that first log-in was opened with.
        self.rtt: float | None = None
        self.rtt_known = asyncio.Event()
        self.compression: CompressionMode | None = None

    def round_trip(self, seconds: float) -> None:
        """A log-in's clean round trip: the first one is kept."""
        if self.rtt is None:
            self.rtt = seconds
        self.rtt_known.set()

    def __repr__(self) -> str:  # never the secrets
        return (
            f"<AuthMemory password={'kept' if self.password is not None else 'none'} "
            f"unlocked={len(self.unlocked)} answers={len(self.answers)}>"
        )
