"""The server's version line read as OpenSSH reads it: any byte taken, the lines before it heard.

asyncssh decodes the server's version line as ASCII (``_recv_version``): one
byte past 127 (``SSH-2.0-Caf\\xe9_9.9``) raised UnicodeDecodeError out of
``asyncssh.connect``, which no caller expects. OpenSSH takes any byte there
but NUL. The bytes stay exactly as they came (the key exchange hashes them,
RFC 4253 §8); only the text asyncssh shows as ``server_version`` is decoded
without failing: UTF-8, and a byte that is not UTF-8 kept as a surrogate
(``surrogateescape``), which ``core.text.printable`` shows as ``\\xe9``.

The lines a server sends before its version (RFC 4253 §4.2 allows them),
which asyncssh reads and drops, are handed to ``heard``: the last of them says
why a server that closes at once did so (sshd's "Exceeded MaxStartups").

A copy of asyncssh's ``SSHConnection._recv_version`` (2.22.0 to 2.24.1, the
same in each) for a client, with those two changes; it stands in for the
connection's receive handler before the first byte comes (the client's
``connection_made``), and only where that handler is still the stock one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncssh

LENIENT_VERSION = "lenient_version"

# asyncssh's own bounds (connection.py), read where they are, else their values.
_MAX_BANNER_LINES = 1024
_MAX_BANNER_LINE_LEN = 8192
_MAX_VERSION_LINE_LEN = 255


def read_version_leniently(
    conn: asyncssh.SSHClientConnection, heard: Callable[[bytes], None]
) -> bool:
    """Replace the connection's version reader (see the module); False if it does not fit."""
    if not _fits(conn):
        return False
    from asyncssh import connection

    max_lines: int = getattr(connection, "_MAX_BANNER_LINES", _MAX_BANNER_LINES)
    max_line: int = getattr(connection, "_MAX_BANNER_LINE_LEN", _MAX_BANNER_LINE_LEN)
    max_version: int = getattr(connection, "_MAX_VERSION_LINE_LEN", _MAX_VERSION_LINE_LEN)
    state: Any = conn  # its private attributes, read and written as its own method does

    def recv_version() -> bool:
        buffer: bytes = state._inpbuf
        end = buffer.find(b"\n", 0, max_line)
        if end < 0:
            if len(buffer) >= max_line:
                state._force_close(asyncssh.ProtocolError("Banner line too long"))
            return False
        line = buffer[:end].removesuffix(b"\r")
        state._inpbuf = buffer[end + 1 :]
        if line.startswith((b"SSH-2.0-", b"SSH-1.99-")):
            if len(line) > max_version:
                state._force_close(asyncssh.ProtocolError("Version too long"))
                return False
            state._server_version = line  # as sent: the exchange hash covers these bytes
            state.set_extra_info(server_version=line.decode("utf-8", "surrogateescape"))
            state.logger.debug1("Received version %s", line)
            state._send_kexinit()
            state._kexinit_sent = True
            state._recv_handler = state._recv_pkthdr
            return True
        if line.startswith(b"SSH-"):
            state._force_close(asyncssh.ProtocolNotSupported("Unsupported SSH version"))
            return False
        heard(line)  # a line before the version: the client ignores it, as asyncssh does
        state._banner_lines += 1
        if state._banner_lines > max_lines:
            state._force_close(asyncssh.ProtocolError("Too many banner lines"))
            return False
        return True

    state._recv_version = recv_version
    state._recv_handler = recv_version
    return True


def _fits(conn: asyncssh.SSHClientConnection) -> bool:
    """asyncssh's client waiting for the version line, with what its reader uses."""
    state: Any = conn
    stock = getattr(state, "_recv_version", None)
    return (
        callable(stock)
        and getattr(state, "_recv_handler", None) == stock  # nothing read yet
        and isinstance(getattr(state, "_inpbuf", None), bytes)
        and isinstance(getattr(state, "_banner_lines", None), int)
        and hasattr(state, "_server_version")
        and hasattr(state, "_kexinit_sent")
        and hasattr(state, "logger")
        and all(
            callable(getattr(state, name, None))
            for name in ("_force_close", "_send_kexinit", "_recv_pkthdr", "set_extra_info")
        )
    )
