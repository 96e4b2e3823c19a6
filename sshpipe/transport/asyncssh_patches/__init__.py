"""Tuning of asyncssh's internals: the one module that touches its private attributes.

These make a transfer faster without changing what goes on the wire:

- ``input_buffer``: the connection's receive buffer read where the socket put
  it (``inputbuffer.py``);
- ``batched_send``: one loop iteration's packets written in one ``writelines``,
  and our channels' data held back while a megabyte waits for the kernel
  (``sendbacklog.py``);
- ``window_top_up``: a channel's receive window granted again each eighth;
- ``peer_window``: the send window the server granted, read for the flow controller;
- ``aead_packets``: AES-GCM packets decrypted out of the receive buffer and
  channel data handed over as views, sent without asyncssh's copies and
  ``MSG_IGNORE`` packets (``packets.py``).

These cut round trips from the log-in (``prepare_handshake``, before the key
exchange), each allowed by RFC 4252:

- ``signed_first``: a public key is offered with its signature at once
  (§7 allows it), and the ``none`` probe for the server's methods is skipped:
  the failure of a key lists them as well (asyncssh: probe, query, then sign);
- ``pipelined_auth``: the first USERAUTH_REQUEST follows the ssh-userauth
  SERVICE_REQUEST without waiting for its SERVICE_ACCEPT. Only for servers
  known to read them in order (OpenSSH's sshd, asyncssh's). For every server,
  the time from that request to its SERVICE_ACCEPT is handed to the client's
  ``service_accepted`` (if it has one): a round trip the server adds no work
  to, where the log-in's own phases carry sshd's signature check and fork
  (10-45 ms on loopback).

One cuts a wait from the log-in and the first channel: ``prompt_ack``, the
server's SERVICE_ACCEPT and global requests acknowledged at once (sshd's next
packet otherwise waits for our delayed ACK: 40 ms, ``promptack.py``).

One lets its ssh_config reader take ``Compression auto`` (``configwords.py``);
one bounds what a server's compressed packet may inflate to (``zlibbound.py``);
one reads the server's version line as OpenSSH does, whatever its bytes, and
hears the lines before it (``lenient_version``, ``versionline.py``: stock
asyncssh raised UnicodeDecodeError at one byte past 127);
one drops a connection whose server floods it with requests we must answer
(``flood_cap``, before the key exchange: ``floodcap.py``).

Two read what asyncssh negotiated and does not tell (for ``-v``):

- ``watch_key_exchange``: the key exchange chosen, recorded as asyncssh chooses it;
- ``auth_method``: the log-in method that succeeded, read as it ends.

They rest on asyncssh's private attributes, so they are gated twice. By
version (``patches_enabled``, the one gate every patch asks): only the
releases whose source was read for them (``CHECKED_FROM`` to ``CHECKED_TO``)
get any, and none at all with ``SSHPIPE_ASYNCSSH_PATCHES=off``; otherwise
stock asyncssh runs, which a debug line says once. None of them is needed
for a transfer to be right: each caller copes with stock asyncssh (slower,
or a hostile server bounded later: the stall watchdog, a clean ConnectError).
By shape: each patch first checks that the attribute it replaces is there as
expected, and is skipped alone (a debug line says so) if not. ``tune_connection``
returns the names of the patches in force, which ``SSHLink.patches`` shows.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import asyncssh
import asyncssh.auth
from asyncssh.constants import MSG_CHANNEL_WINDOW_ADJUST, MSG_SERVICE_ACCEPT
from asyncssh.packet import Boolean, SSHPacket, String, UInt32

from .configwords import COMPRESSION_AUTO, accept_compression_auto
from .floodcap import FLOOD_CAP, cap_unasked
from .inputbuffer import InputBuffer
from .packets import AeadPackets, ViewWriter, accept_views
from .promptack import QUICKACK_HERE, ack_unanswered_at_once
from .sendbacklog import BACKLOGS, Backlog
from .versionline import LENIENT_VERSION, read_version_leniently
from .zlibbound import ZLIB_BOUND, bound_inflation

logger = logging.getLogger("sshpipe.ssh")

# Releases whose connection.py and channel.py were read for these patches:
# 2.22.0, 2.23.0, 2.23.1, 2.24.0 and 2.24.1 (every release in between).
CHECKED_FROM = (2, 22, 0)
CHECKED_TO = (2, 24, 1)

INPUT_BUFFER = "input_buffer"
BATCHED_SEND = "batched_send"
WINDOW_TOP_UP = "window_top_up"
PEER_WINDOW = "peer_window"
SIGNED_FIRST = "signed_first"
PIPELINED_AUTH = "pipelined_auth"
AEAD_PACKETS = "aead_packets"
PROMPT_ACK = "prompt_ack"
CHANNEL_PATCHES = frozenset({WINDOW_TOP_UP, PEER_WINDOW})


# The environment variable that turns every patch off (README, "Environment").
PATCHES_VARIABLE = "SSHPIPE_ASYNCSSH_PATCHES"
# What the debug line about running stock has said already: once per reason.
_STOCK_SAID: set[str] = set()


def version_checked(version: str) -> bool:
    """Whether ``version`` is one of the asyncssh releases the patches were checked against."""
    try:
        release = tuple(int(part) for part in version.split("."))
    except ValueError:  # a pre-release or local build: not checked
        return False
    return CHECKED_FROM <= release <= CHECKED_TO


def patches_enabled(version: str | None = None) -> bool:
    """Whether any patch may touch asyncssh ``version`` (the installed one by default).

    False where ``SSHPIPE_ASYNCSSH_PATCHES=off`` (read at each call, so a
    process's own setting counts) or the release was not checked
    (``version_checked``). Every gate in this package asks here; the first
    time stock asyncssh is chosen for a reason, a debug line says why.
    """
    version = asyncssh.__version__ if version is None else version
    if os.environ.get(PATCHES_VARIABLE, "").strip().lower() == "off":
        why = f"{PATCHES_VARIABLE}=off"
    elif not version_checked(version):
        why = (
            f"asyncssh {version} is outside the checked releases "
            f"{'.'.join(map(str, CHECKED_FROM))} to {'.'.join(map(str, CHECKED_TO))}"
        )
    else:
        return True
    if why not in _STOCK_SAID:
        _STOCK_SAID.add(why)
        logger.debug("%s: running asyncssh stock, no patch applied", why)
    return False


def read_compression_auto(version: str | None = None) -> bool:
    """Let asyncssh's ssh_config reader take ``Compression auto`` (see ``configwords``)."""
    if not patches_enabled(version):
        return False
    applied = accept_compression_auto(True)
    if not applied:
        _skipped(COMPRESSION_AUTO)
    return applied


def bound_zlib(version: str | None = None) -> bool:
    """Inflate a server's compressed packets only up to what a packet may hold
    (see ``zlibbound``)."""
    if not patches_enabled(version):
        return False
    applied = bound_inflation(True)
    if not applied:
        _skipped(ZLIB_BOUND)
    return applied


def _skipped(patch: str) -> None:
    logger.debug("asyncssh %s: %s does not fit, not applied", asyncssh.__version__, patch)


def _batch_sends(conn: asyncssh.SSHClientConnection) -> bool:
    """Hand the packets of one loop iteration to the transport in one ``writelines``.

    asyncssh writes every SSH packet separately (one send syscall each); an
    upload is cut into 32 KiB packets by OpenSSH's max packet size, so that is
    ~33,000 syscalls per GiB. Batching per loop iteration keeps order and adds
    no measurable latency. What the batch and the transport's buffer hold is
    the connection's ``Backlog``: past its mark our channels' data waits
    (``sendbacklog``), and goes on as it drains (each batch written, and the
    transport's ``resume_writing``, which asyncssh's connection ignores).
    False if the connection does not fit.
    """
    transport = getattr(conn, "_transport", None)
    if not (
        callable(getattr(conn, "_send", None))
        and callable(getattr(conn, "resume_writing", None))
        and callable(getattr(transport, "writelines", None))
        and callable(getattr(transport, "is_closing", None))
        and callable(getattr(transport, "get_write_buffer_size", None))
    ):
        return False
    assert transport is not None
    loop = asyncio.get_running_loop()
    pending: list[bytes] = []
    backlog = BACKLOGS[conn] = Backlog(transport)
    resume = conn.resume_writing

    def flush() -> None:
        # To the transport the packets were sent to: as it closes, asyncssh
        # queues DISCONNECT, lets go of conn._transport at once and aborts the
        # transport a loop turn later, so looking it up here lost the DISCONNECT.
        if not transport.is_closing():
            transport.writelines(pending)
        pending.clear()
        backlog.batched = 0
        backlog.drained()

    def send(data: bytes) -> None:
        if conn._transport is None:  # closed: asyncssh's own _send drops it too
            return
        if not pending:
            loop.call_soon(flush)
        pending.append(data)
        backlog.batched += len(data)

    def resume_writing() -> None:
        resume()
        backlog.drained()

    conn._send = send  # type: ignore[method-assign]
    conn.resume_writing = resume_writing  # type: ignore[method-assign]
    return True


def tune_connection(
    conn: asyncssh.SSHClientConnection, version: str | None = None
) -> frozenset[str]:
    """Apply the connection patches that fit; the names of the patches in force.

    The channel patches are in force when the release was checked; each
    channel still checks its own shape (``ChannelTuning``).

    Args:
        version: asyncssh's (the installed one unless a test says otherwise).
    """
    if not patches_enabled(version):
        return frozenset()
    applied = set(CHANNEL_PATCHES)
    buffer: InputBuffer | None = None
    if isinstance(getattr(conn, "_inpbuf", None), bytes):
        buffer = InputBuffer(conn._inpbuf)
        conn._inpbuf = buffer  # type: ignore[assignment]
        applied.add(INPUT_BUFFER)
    else:
        _skipped(INPUT_BUFFER)
    if _batch_sends(conn):
        applied.add(BATCHED_SEND)
    else:
        _skipped(BATCHED_SEND)
    # It reads packets straight out of our buffer: only on top of it.
    if buffer is not None and AeadPackets.fits(conn):
        AeadPackets(conn, buffer, BATCHED_SEND in applied).install()
        applied.add(AEAD_PACKETS)
    else:
        _skipped(AEAD_PACKETS)
    return frozenset(applied)


class ChannelTuning:
    """The channel patches on one channel: the early window top-up, the peer-window read.

    asyncssh grants more window only once half of it is used, so the server can
    have at most half a window in flight once the link's delay is longer than
    its own send time: a download ran at half of window / RTT. Granting again
    after each eighth keeps the whole window available, for one small
    WINDOW_ADJUST per eighth.

    Args:
        enabled: the patches in force on the connection (``tune_connection``).
        views: the channel's session takes its data as memoryviews as well
            as bytes: ``aead_packets`` may hand it views of the plaintext.
    """

    def __init__(
        self,
        chan: asyncssh.SSHClientChannel[bytes],
        window: int,
        enabled: frozenset[str],
        *,
        views: bool = False,
    ) -> None:
        self._chan = chan
        self._window = window
        self._top_up_at = window - max(window // 8, 1)
        applied: set[str] = set()
        for patch, fits in (
            (WINDOW_TOP_UP, _fits_top_up(chan)),
            (PEER_WINDOW, isinstance(getattr(chan, "_send_window", None), int)),
        ):
            if patch in enabled and fits:
                applied.add(patch)
            elif patch in enabled:
                _skipped(patch)
        self.applied = frozenset(applied)
        self._top_up = WINDOW_TOP_UP in applied
        # Writes as views of the caller's bytes (None: asyncssh's own write).
        self.writer: ViewWriter | None = (
            accept_views(chan) if views and AEAD_PACKETS in enabled else None
        )

    def after_data(self) -> None:
        """Call after each delivery of data: asyncssh has counted it off the window."""
        if not self._top_up:
            return
        chan = self._chan
        left: int = chan._recv_window
        if left < self._top_up_at and not chan.is_closing():
            chan.send_packet(MSG_CHANNEL_WINDOW_ADJUST, UInt32(self._window - left))
            chan._recv_window = self._window

    @property
    def peer_window(self) -> int:
        """The send window the server granted the channel (0 where it is not read)."""
        return int(self._chan._send_window) if PEER_WINDOW in self.applied else 0


def _fits_top_up(chan: asyncssh.SSHClientChannel[bytes]) -> bool:
    return (
        isinstance(getattr(chan, "_recv_window", None), int)
        and callable(getattr(chan, "send_packet", None))
        and callable(getattr(chan, "is_closing", None))
    )


# -- the log-in ---------------------------------------------------------------

_USERAUTH = b"ssh-userauth"
# Banners of servers that read a USERAUTH_REQUEST queued behind the
# SERVICE_REQUEST (sshd's dispatch table and asyncssh's handle them in order).
_IN_ORDER_SERVERS = ("SSH-2.0-OpenSSH_", "SSH-2.0-AsyncSSH_")


def prepare_handshake(
    conn: asyncssh.SSHClientConnection,
    version: str | None = None,
    *,
    heard: Callable[[bytes], None] = lambda line: None,
) -> set[str]:
    """Apply the log-in patches that fit, before the key exchange; their names.

    Called from the client's ``connection_made``; each patch is skipped alone
    (a debug line says so) if what it replaces changed shape.

    Args:
        heard: given each line the server sends before its version line.
    """
    if not patches_enabled(version):
        return set()
    applied = set()
    if read_version_leniently(conn, heard):
        applied.add(LENIENT_VERSION)
    else:
        _skipped(LENIENT_VERSION)
    if _sign_first(conn):
        applied.add(SIGNED_FIRST)
    else:
        _skipped(SIGNED_FIRST)
    if _pipeline_auth(conn):
        applied.add(PIPELINED_AUTH)
    else:
        _skipped(PIPELINED_AUTH)
    if ack_unanswered_at_once(conn):
        applied.add(PROMPT_ACK)
    elif QUICKACK_HERE:  # not a shape asyncssh changed where the OS has no such option
        _skipped(PROMPT_ACK)
    if cap_unasked(conn):  # after prompt_ack: a request past the cap is not acknowledged
        applied.add(FLOOD_CAP)
    else:
        _skipped(FLOOD_CAP)
    return applied


def _signed_public_key_auth() -> Any:
    """asyncssh's public key auth, sending the signed request at once; None if it changed.

    A hardware key (``sk-``) is still queried first: each signature wants a
    touch, and one for a key the server refuses is a wasted one. So is a key
    pair that says so (``query_first``: an encrypted key, whose passphrase is
    asked only for a key the server accepts).
    """
    stock: Any = getattr(asyncssh.auth, "_ClientPublicKeyAuth", None)
    if stock is None or not callable(getattr(stock, "_send_signed_request", None)):
        return None

    class SignedPublicKeyAuth(stock):  # type: ignore[misc]
        async def _start(self) -> None:
            self._keypair = await self._conn.public_key_auth_requested()
            if self._keypair is None:
                self._conn.try_next_auth(next_method=True)
            elif self._keypair.algorithm.startswith(b"sk-") or getattr(
                self._keypair, "query_first", False
            ):
                self.logger.debug1("Trying public key auth with %s key", self._keypair.algorithm)
                await self.send_request(
                    Boolean(False),
                    String(self._keypair.algorithm),
                    String(self._keypair.public_data),
                )
            else:
                await self._send_signed_request()

    return SignedPublicKeyAuth


_SignedPublicKeyAuth = _signed_public_key_auth()


def _sign_first(conn: asyncssh.SSHClientConnection) -> bool:
    """Public key auth signed at once, and no ``none`` probe when a key may be offered."""
    if not (
        _SignedPublicKeyAuth is not None
        and getattr(conn, "_auth_methods", None) == [b"none"]
        and callable(getattr(asyncssh.auth, "lookup_client_auth", None))
        and callable(getattr(conn, "_force_close", None))
        and hasattr(conn, "_auth")
    ):
        return False

    def try_next_auth(*, next_method: bool = False) -> None:
        # asyncssh's SSHClientConnection.try_next_auth, with our public key auth.
        if conn._auth:
            conn._auth.cancel()
            conn._auth = None
        if next_method:
            conn._auth_methods.pop(0)
        while conn._auth_methods:
            method = conn._auth_methods[0]
            if method == b"publickey":
                conn._auth = _SignedPublicKeyAuth(conn, method)
            else:
                conn._auth = asyncssh.auth.lookup_client_auth(conn, method)
            if conn._auth:
                return
            conn._auth_methods.pop(0)
        conn.logger.info("Auth failed for user %s", conn._username)
        conn._force_close(
            asyncssh.PermissionDenied(
                f"Permission denied for user {conn._username} on host {conn._host}"
            )
        )

    # With no key to offer, publickey steps aside at once and ``none`` probes
    # as before; a refused key's failure lists the methods, as ``none``'s would.
    conn._auth_methods = [b"publickey", b"none"]
    conn.try_next_auth = try_next_auth  # type: ignore[method-assign]
    return True


def _pipeline_auth(conn: asyncssh.SSHClientConnection) -> bool:
    """Start the log-in right behind the ssh-userauth SERVICE_REQUEST."""
    handlers: Any = getattr(type(conn), "_packet_handlers", None)
    send_request = getattr(conn, "send_service_request", None)
    if not (
        isinstance(handlers, dict)
        and callable(handlers.get(MSG_SERVICE_ACCEPT))
        and callable(send_request)
        and hasattr(conn, "_next_service")
        and hasattr(conn, "_auth_in_progress")
        and hasattr(conn, "_owner")
        and callable(getattr(conn, "try_next_auth", None))
    ):
        return False
    stock_accept = handlers[MSG_SERVICE_ACCEPT]
    early = False
    asked_at = 0.0

    def send_service_request(service: bytes) -> None:
        nonlocal early, asked_at
        send_request(service)
        asked_at = time.monotonic()
        banner = str(conn.get_extra_info("server_version", ""))
        if service == _USERAUTH and banner.startswith(_IN_ORDER_SERVERS):
            early = True
            conn.logger.info("Beginning auth for user %s", conn._username)
            conn._auth_in_progress = True
            if conn._owner:
                conn._owner.begin_auth(conn._username)
            conn.try_next_auth()

    def on_service_accept(
        self: asyncssh.SSHClientConnection, pkttype: int, pktid: int, packet: SSHPacket
    ) -> None:
        measured = getattr(self._owner, "service_accepted", None)
        if asked_at and callable(measured):
            measured(time.monotonic() - asked_at)
        if not early:
            stock_accept(self, pkttype, pktid, packet)
            return
        service = packet.get_string()
        packet.check_end()
        if service != self._next_service:
            raise asyncssh.ServiceNotAvailable("Unexpected service in service accept")
        self._next_service = None  # the log-in began when it was asked for

    conn.send_service_request = send_service_request  # type: ignore[method-assign]
    conn._packet_handlers = {**handlers, MSG_SERVICE_ACCEPT: on_service_accept}
    return True


# -- what was negotiated --------------------------------------------------------

_KEY_EXCHANGE = "key exchange"  # asyncssh's _choose_alg's alg_type for the kex


def watch_key_exchange(
    conn: asyncssh.SSHClientConnection, version: str | None = None
) -> dict[str, str]:
    """A dict that gets ``"kex"``: the key exchange asyncssh chooses (first exchange).

    asyncssh keeps the chosen algorithm only inside the exchange's object,
    dropped once it ends, and ``get_extra_info`` has no key for it: the choice
    is recorded as ``_choose_alg`` makes it. Called before the key exchange
    (the client's ``connection_made``); empty if it does not fit.
    """
    chosen: dict[str, str] = {}
    choose: Any = getattr(conn, "_choose_alg", None)
    if not patches_enabled(version) or not callable(choose):
        return chosen

    def choose_alg(alg_type: str, local_algs: Any, remote_algs: Any) -> bytes:
        alg: bytes = choose(alg_type, local_algs, remote_algs)
        if alg_type == _KEY_EXCHANGE and isinstance(alg, bytes):
            chosen.setdefault("kex", alg.decode("ascii", "replace"))
        return alg

    conn._choose_alg = choose_alg  # type: ignore[method-assign]
    return chosen


def auth_method(conn: asyncssh.SSHClientConnection, version: str | None = None) -> str | None:
    """The log-in method that succeeded ("publickey", "password"...), read as it succeeds.

    asyncssh drops each method that failed from the front of its list, so at
    the client's ``auth_completed`` the first is the one that succeeded; None
    if the list is not there as expected.
    """
    methods = getattr(conn, "_auth_methods", None)
    if not patches_enabled(version) or not isinstance(methods, list) or not methods:
        return None
    first = methods[0]
    return first.decode("ascii", "replace") if isinstance(first, bytes) else None
