"""Set-up packets we answer with nothing, acknowledged at once (``prompt_ack``).

OpenSSH's sshd leaves Nagle's algorithm on for a session without a terminal:
a small packet it sends waits until the one before it is acknowledged. Twice
in a log-in, the one before is a packet our client answers with nothing, so
our kernel delays its ACK (Linux: 40 ms) and sshd's next packet waits that long:

- SERVICE_ACCEPT: our USERAUTH_REQUEST went out before it (``pipelined_auth``),
  and USERAUTH_SUCCESS waits behind it;
- ``hostkeys-00@openssh.com``, a global request wanting no reply, sent after
  the log-in: our CHANNEL_OPEN crosses it, and OPEN_CONFIRMATION waits.

Measured on loopback, 8 log-ins each: the first SFTP channel took 42-46 ms to
open in 7, the log-in 42 ms in the 8th (2-3 ms and 7-9 ms otherwise); OpenSSH's
own client waits the same 40 ms (seen in its system calls). ``TCP_QUICKACK``
sends the ACK the kernel was holding back: set once each of those packets is
handled (two system calls a connection). Where there is no TCP socket under the
connection (a ProxyCommand's pipe) or no such option (not Linux), nothing is done.
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from asyncssh.constants import MSG_GLOBAL_REQUEST, MSG_SERVICE_ACCEPT
from asyncssh.packet import SSHPacket

_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)
QUICKACK_HERE = _QUICKACK is not None  # Linux: elsewhere the patch has nothing to do
UNANSWERED = (MSG_SERVICE_ACCEPT, MSG_GLOBAL_REQUEST)


def ack_unanswered_at_once(conn: Any) -> bool:
    """Have the packets in ``UNANSWERED`` acknowledged once handled; False if it does not fit.

    Wraps whatever handles them now (``pipelined_auth``'s SERVICE_ACCEPT).
    """
    handlers: Any = getattr(conn, "_packet_handlers", None)
    if not (
        _QUICKACK is not None
        and isinstance(handlers, dict)
        and all(callable(handlers.get(pkttype)) for pkttype in UNANSWERED)
        and callable(getattr(conn, "get_extra_info", None))
    ):
        return False
    conn._packet_handlers = {
        **handlers,
        **{pkttype: _acked(handlers[pkttype]) for pkttype in UNANSWERED},
    }
    return True


def _acked(handler: Any) -> Any:
    def handle_then_ack(self: Any, pkttype: int, pktid: int, packet: SSHPacket) -> None:
        handler(self, pkttype, pktid, packet)
        ack_now(self)

    return handle_then_ack


def ack_now(conn: Any) -> None:
    """Send the ACK the kernel holds back for what ``conn`` last received, if any."""
    sock = conn.get_extra_info("socket")
    if sock is None or _QUICKACK is None:
        return
    # Not TCP (a Unix socket under a test), or closing: nothing to hurry.
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
