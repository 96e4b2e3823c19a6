"""The garbage collector paused while a command starts (``pause``, ``resume``).

A command's start builds some 65,000 objects that live as long as the
process: sshpipe's, asyncssh's and cryptography's modules and classes, the
methods each dataclass generates, the connection. Every 700 new ones the
collector walks the youngest generation, and every tenth time the middle one:
about 90 collections that find nothing, and pausing them alone only defers
them (the first collection after walks everything made meanwhile). So the
command pauses the collector from its first import (``__main__``) until its
connection is up, then freezes what exists (``gc.freeze``: never walked
again) and turns it back on: 5-10 % of a 1-byte get's CPU and wall time on
loopback (paired runs against the commit before: CPU 0.90-0.95x, wall
0.91-0.92x). The price is the few hundred unreachable objects start-up
leaves (about 470 when asyncssh has loaded), kept once, never growing.

Only for the command line: a library user's process is not ours to freeze.
Loops that outlive their start (the demo, the server, a mux master) resume
before they run.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """No collection until ``resume``; nothing if the collector was off already."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Start-up is over: what exists now is frozen and the collector is back on.

    Only undoes ``pause``: a process that never paused (a test, an application
    calling ``main``) is left as it is; a second call does nothing.
    """
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
