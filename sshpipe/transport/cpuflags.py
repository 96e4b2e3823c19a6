"""The CPU's flags read once per process, and the cipher order they choose.

The decision is ``core.cipherorder``'s; this is its one read of
``/proc/cpuinfo``, made the first time a connection needs our default (never
at import) and cached: the CPU does not change under a running process.
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path

from ..core.cipherorder import CipherChoice, choose_ciphers, cpu_flags
from ..core.config import DEFAULT_CIPHERS

__all__ = ["default_ciphers", "forget"]

logger = logging.getLogger("sshpipe.ssh")

CPUINFO = Path("/proc/cpuinfo")
# The first processor's block is all the decision reads; a 256-core machine's
# whole file is ~400 KiB.
_READ_LIMIT = 64 * 1024


# read_options runs in threads (asyncio.to_thread), several connections at
# once: the lock makes the first one read and log, the others wait for it.
_lock = threading.Lock()


def default_ciphers() -> CipherChoice:
    """The cipher order for this machine's CPU; DEFAULT_CIPHERS where the flags are unreadable."""
    with _lock:
        return _choose()


def forget() -> None:
    """Drop the cached choice, so the next call reads ``CPUINFO`` again (for tests)."""
    with _lock:
        _choose.cache_clear()


@functools.cache
def _choose() -> CipherChoice:
    try:
        with CPUINFO.open("r", encoding="ascii", errors="replace") as file:
            text = file.read(_READ_LIMIT)
    except OSError:
        text = ""  # not Linux, or /proc not mounted
    choice = choose_ciphers(cpu_flags(text), DEFAULT_CIPHERS)
    logger.debug("default cipher order %s: %s", ",".join(choice.order), choice.reason)
    return choice
