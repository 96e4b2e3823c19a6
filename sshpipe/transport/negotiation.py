"""What ``-v`` shows of a connection: the algorithms agreed on, and how long its set-up took.

Logged at INFO on "sshpipe.ssh"; the CLI sets the level (``cli/verbosity``).
"""

from __future__ import annotations

import logging

import asyncssh

__all__ = ["asyncssh_debug", "log_negotiated"]

logger = logging.getLogger("sshpipe.ssh")


def log_negotiated(
    conn: asyncssh.SSHClientConnection,
    label: str,
    negotiated: dict[str, str],
    phases: list[tuple[str, float]],
) -> None:
    """What ``-v`` shows of a new connection: what was agreed on, and its set-up's phases.

    From asyncssh's public ``get_extra_info`` and host key; the key exchange
    and the log-in method from ``asyncssh_patches`` ("unknown" where asyncssh
    did not fit). The server's words are escaped by the CLI's formatter.
    """
    info = conn.get_extra_info
    key = conn.get_server_host_key()
    host_key = f"{key.get_algorithm()} {key.get_fingerprint()}" if key is not None else "none"
    cipher, mac = info("send_cipher", "?"), info("send_mac", "")
    if info("recv_cipher", cipher) != cipher:  # each way its own: both shown
        cipher = f"{cipher} (to the server), {info('recv_cipher')} (from it)"
    logger.info(
        "%s: server %s; kex %s; host key %s; cipher %s; MAC %s; compression %s; auth %s",
        label,
        info("server_version", "?"),
        negotiated.get("kex", "unknown"),
        host_key,
        cipher,
        "implicit (AEAD cipher)" if mac in ("", cipher) else mac,
        info("send_compression", "none"),
        negotiated.get("auth", "unknown"),
    )
    logger.info(
        "%s: connection set-up: %s",
        label,
        ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in phases),
    )


def asyncssh_debug(level: int) -> None:
    """asyncssh's own debug log at ``level`` (1-3; 3 dumps packets): ``-vvv``'s."""
    asyncssh.set_debug_level(level)
