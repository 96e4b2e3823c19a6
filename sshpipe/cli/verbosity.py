"""``-q``, ``-v``, ``-vv``, ``-vvv``: what the log says, on stderr, escaped.

- ``-q``: errors only (no warning such as "Permanently added ...", no result),
  except what a transfer left undone: a tree's skipped or refused entries and
  a temporary file it could not remove are said even then (nothing silent);
- none: warnings (OpenSSH's default);
- ``-v``: what each connection negotiated (server version, key exchange,
  host key, cipher, MAC, compression, log-in method) and its set-up's
  phases (``transport.ssh``), then the transfer's phases and the connections
  and channels it used (``log_used``);
- ``-vv``: sshpipe's debug log: the flow controller's rounds, retries, pool;
- ``-vvv``: asyncssh's own debug log as well (its level 2: messages and
  algorithms, never a packet's bytes, which its level 3 would dump).

``SSHPIPE_DEBUG=1`` is ``-vv`` with tracebacks; ``=asyncssh`` is ``-vvv``
with them. Every line goes through ``Escaped``: servers' strings (a banner, a
file name) reach the terminal as printable text. No level logs a secret:
passwords and passphrases are never handed to a logger, and asyncssh's
level 2 logs only the names of the methods it tries.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from ..core.text import printable
from ..core.timeline import describe
from .output import TERMINAL

if TYPE_CHECKING:
    from ..client.client import Client
    from ..core.stats import TransferStats

__all__ = ["Escaped", "StderrHandler", "log_used", "set_verbosity"]

logger = logging.getLogger("sshpipe.cli")

# asyncssh's debug level at -vvv: 2 logs the messages and the algorithms
# offered; 3 would dump raw packets (a password's among them).
ASYNCSSH_DEBUG_LEVEL = 2

_handler: StderrHandler | None = None

# Their warnings say what was not copied or not cleaned up: shown with -q too.
_SAID_EVEN_WHEN_QUIET = ("sshpipe.tree", "sshpipe.upload", "sshpipe.temps")


def set_verbosity(verbose: int, *, quiet: bool = False, debug: str = "") -> None:
    """Set the log's levels and format for ``-v`` given ``verbose`` times (or ``-q``).

    Args:
        debug: the ``SSHPIPE_DEBUG`` variable: "asyncssh" is ``-vvv``, any
            other non-empty value at least ``-vv``.
    """
    global _handler
    if debug:
        verbose = max(verbose, 3 if debug == "asyncssh" else 2)
    if _handler is None:
        _handler = StderrHandler()
        root = logging.getLogger()
        root.addHandler(_handler)
    timed = verbose >= 2  # the debug log's lines carry their time since the start
    _handler.setFormatter(
        Escaped("sshpipe: %(relativeCreated)d ms: %(message)s" if timed else "sshpipe: %(message)s")
    )
    if quiet and verbose == 0:
        level = logging.ERROR
    else:
        level = (logging.WARNING, logging.INFO)[verbose] if verbose < 2 else logging.DEBUG
    logging.getLogger().setLevel(level)
    logging.getLogger("sshpipe").setLevel(level)
    for name in _SAID_EVEN_WHEN_QUIET:
        quieted = quiet and verbose == 0
        logging.getLogger(name).setLevel(logging.WARNING if quieted else logging.NOTSET)
    if verbose >= 3:
        from ..transport.negotiation import asyncssh_debug

        asyncssh_debug(ASYNCSSH_DEBUG_LEVEL)
    logging.getLogger("asyncssh").setLevel(logging.DEBUG if verbose >= 3 else logging.CRITICAL)


def log_used(client: Client, stats: TransferStats | None) -> None:
    """``-v``'s last lines: the transfer's set-up phases (a file), and what it used."""
    if not logger.isEnabledFor(logging.INFO):
        return
    if stats is not None:
        if stats.setup:
            logger.info("transfer set-up: %s", describe(stats.setup))
        logger.info(
            "used %d SFTP channel(s) on %d SSH connection(s); %d reconnect(s)",
            stats.channels,
            stats.connections,
            stats.reconnects,
        )
    logger.info("client at the end: %r", client)


class StderrHandler(logging.Handler):
    """Log lines to ``sys.stderr`` as it is at each line.

    A live progress display swaps in its own stderr while it runs, which
    prints the lines above the bar; a plain progress line is ended first.
    """

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            TERMINAL.break_line()
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except Exception:  # logging's own rule: a broken handler never breaks the program
            self.handleError(record)


class Escaped(logging.Formatter):
    """Log lines escaped as everything else on the terminal (a message may quote a server)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))
