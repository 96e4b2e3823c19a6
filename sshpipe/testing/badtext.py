"""An asyncssh server whose SSH-level text is not what SSH says text is.

RFC 4253 §4.2 makes the version line US-ASCII and RFC 4252/4253 make banners,
debug messages and a disconnect's reason UTF-8; a server may send any bytes
there all the same. ``bad_text`` builds the ``connection_factory`` of
``embedded_server`` for such a server: each argument given is sent as raw
bytes, the rest of the server (its key exchange, log-in, SFTP) is the
embedded one's:

- ``version``: the software part of its version line (``b"Caf\\xe9_9.9"``),
  sent and hashed by the key exchange as these exact bytes (asyncssh's own
  server refuses anything but printable ASCII, so its sender is replaced);
- ``banner``: a USERAUTH_BANNER as the log-in begins;
- ``debug``: an SSH_MSG_DEBUG (always_display) then too;
- ``disconnect``: a DISCONNECT with this reason instead of the log-in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncssh
from asyncssh.constants import DISC_PROTOCOL_ERROR, MSG_DEBUG, MSG_USERAUTH_BANNER
from asyncssh.packet import Boolean, String

__all__ = ["BadText", "bad_text"]


class BadText(asyncssh.SSHServer):
    """One connection of the server (see the module)."""

    def __init__(
        self,
        *,
        version: bytes | None = None,
        banner: bytes | None = None,
        debug: bytes | None = None,
        disconnect: bytes | None = None,
    ) -> None:
        self._version = version
        self._banner = banner
        self._debug = debug
        self._disconnect = disconnect
        self._conn: Any = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        if self._version is None:
            return
        line = b"SSH-2.0-" + self._version
        server: Any = conn  # a test server's own private sender, never the client's

        def send_version() -> None:
            server._server_version = line  # what the key exchange hashes
            server.set_extra_info(server_version=line.decode("latin-1"))
            server._send(line + b"\r\n")

        server._send_version = send_version

    def begin_auth(self, username: str) -> bool:
        conn = self._conn
        if self._debug is not None:
            conn.send_packet(MSG_DEBUG, Boolean(True), String(self._debug), String(b""))
        if self._banner is not None:
            conn.send_packet(MSG_USERAUTH_BANNER, String(self._banner), String(b""))
        if self._disconnect is not None:
            # asyncssh's own disconnect (sent, then closed once written), given
            # bytes where it expects text: its String() sends them as they are.
            conn.disconnect(DISC_PROTOCOL_ERROR, self._disconnect)
        return True


def bad_text(
    *,
    version: bytes | None = None,
    banner: bytes | None = None,
    debug: bytes | None = None,
    disconnect: bytes | None = None,
) -> Callable[[], asyncssh.SSHServer]:
    """The ``connection_factory`` of a server sending these raw bytes (see the module)."""
    return lambda: BadText(version=version, banner=banner, debug=debug, disconnect=disconnect)
