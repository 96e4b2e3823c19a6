"""Opening connections: ``open_link``, through jump hosts, asyncssh's errors translated.

It opens connections (ssh_config, keys, known_hosts through ``hostkeys``),
logs in (``auth``), and translates asyncssh's and the OS's exceptions at
connect time into sshpipe's tree (``raise X(...) from exc``). What an open
connection does (its SFTP channels, commands) is ``sshlink.SSHLink``'s.
asyncssh's internals are tuned in ``asyncssh_patches``, nowhere else.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from dataclasses import replace
from typing import Any

import asyncssh

from ..core.config import ConnectConfig
from ..core.errors import (
    AuthenticationError,
    ConnectDropped,
    ConnectError,
    ConnectTimeout,
    KeyLoadError,
    SSHPipeError,
    UnknownHostKey,
    UsageError,
)
from ..core.retry import RetryBudget
from ..core.text import clip
from ..core.timeline import CONNECTION_PHASES, Timeline
from .asyncssh_patches import SIGNED_FIRST, tune_connection
from .auth import AuthMemory, Deadline, LoginClient, why_no_prompt
from .negotiation import log_negotiated
from .sshlink import SSHLink
from .sshoptions import Prepared, read_options

logger = logging.getLogger("sshpipe.ssh")


# Jump hosts behind jump hosts (a hop's own ProxyJump): OpenSSH has no limit,
# and a loop in ssh_config spawns ssh processes until something breaks.
MAX_JUMP_DEPTH = 8


async def open_link(
    cfg: ConnectConfig, memory: AuthMemory | None = None, *, retries: int = 0
) -> SSHLink:
    """Connect and authenticate, through the jump hosts if any (``proxy_jump``).

    Every ConnectError raised names the ``host`` (as given) and ``port``;
    one on the way through a jump host begins with "jump host NAME:".
    Closing the link closes the jump hosts' connections too.

    Args:
        memory: what earlier log-ins of the same client learnt (``auth.py``):
            answers that worked are reused, not asked again.
        retries: how many more times a connection the server closes before
            the log-in is tried (``ConnectDropped``: sshd's MaxStartups), after
            a backoff with jitter (``core.retry``); each hop's and the target's.

    Raises:
        UsageError: an ssh_config or option value that cannot be used.
        KeyLoadError: a key named cannot be used (before any connection).
        ConnectError: invalid options, DNS failure, refused, handshake failure;
            ConnectTimeout: no connection within ``connect_timeout``;
            ConnectDropped: closed before the log-in, ``retries`` + 1 times.
        AuthenticationError, HostKeyError (UnknownHostKey, HostKeyMismatch).
    """
    return await _open(cfg, via=None, depth=0, memory=memory, retries=retries)


async def _open(
    cfg: ConnectConfig,
    *,
    via: SSHLink | None,
    depth: int,
    memory: AuthMemory | None = None,
    retries: int = 0,
) -> SSHLink:
    # Off the loop: an RSA key's checks or a passphrase's KDF take 0.3-0.4 s,
    # ssh_config and known_hosts are file reads; the caller's other tasks run on.
    memory = memory if memory is not None else AuthMemory()
    prepared = await asyncio.to_thread(read_options, cfg, memory)
    if cfg.batch_mode is None:  # ssh_config's BatchMode
        cfg = replace(cfg, batch_mode=prepared.batch_mode)
    if via is None and prepared.jumps:
        via = await _open_jumps(cfg, prepared.jumps, depth, retries)
    try:
        return await _log_in_retrying(cfg, prepared, via, memory, retries)
    except BaseException:
        if via is not None:
            await via.close()
        raise


async def _log_in_retrying(
    cfg: ConnectConfig, prepared: Prepared, via: SSHLink | None, memory: AuthMemory, retries: int
) -> SSHLink:
    """``_log_in``, tried again after a backoff while the server closes the connection
    before the log-in (``ConnectDropped``), at most ``retries`` more times.

    sshd past its MaxStartups drops new connections at random: the more
    clients wait, the likelier; as they log in, room comes back. The backoff
    and its jitter are a reconnect's (``RetryBudget``): equal jitter, so the
    clients turned away together do not all come back together. Each try
    reads the options again: a host key the one before recorded is known.
    """
    budget = RetryBudget(attempts=retries)
    tries = 1
    while True:
        try:
            return await _log_in(cfg, prepared, via, memory)
        except ConnectDropped as exc:
            if budget.exhausted(tries):
                if tries > 1:
                    exc.args = (f"{exc.args[0]} after {tries} tries",)
                raise
            wait = budget.delay(tries, random.random())
            logger.info("%s; trying again in %.2f s (%d of %d)", exc, wait, tries, retries)
        await asyncio.sleep(wait)
        prepared = await asyncio.to_thread(read_options, cfg, memory)
        tries += 1


async def _open_jumps(
    cfg: ConnectConfig, jumps: list[tuple[str | None, str, int | None]], depth: int, retries: int
) -> SSHLink:
    """The last of the hops, each opened through the one before.

    As ssh's ``-J a,b``: ``a`` is looked up in ssh_config as a host of its own
    (its own ProxyJump too); ``b`` is reached through ``a``, whatever its
    ProxyJump says. Each hop takes the keys, known_hosts, host key policy,
    connect timeout and ciphers ``cfg`` sets (OpenSSH hands its hops only
    ``-F``; sshpipe checks them as strictly as the target), never the
    password. Each pool connection opens its own chain: a hop dropped takes
    down only the connection that used it, and a reconnect opens a new one.
    """
    if depth >= MAX_JUMP_DEPTH:
        # The same on every try: the config's doing, not the network's.
        raise UsageError(
            f"{cfg.host}: more than {MAX_JUMP_DEPTH} jump hosts deep (a ProxyJump loop?)"
        )
    link: SSHLink | None = None
    for user, host, port in jumps:
        hop = replace(
            cfg,
            host=host,
            port=port,
            username=user,
            password=None,
            compression=None,
            ssh_options=(),
            proxy_jump=None if link is None else "none",
        )
        # The hop as -J spells it.
        name = (f"{user}@" if user else "") + (f"[{host}]" if ":" in host else host)
        name += f":{port}" if port is not None else ""
        try:
            # A hop's answers are its own: never the target's remembered ones.
            link = await _open(hop, via=link, depth=depth + 1, memory=AuthMemory(), retries=retries)
        except SSHPipeError as exc:
            if not str(exc).startswith("jump host "):  # a hop's own hop named itself
                exc.args = (f"jump host {name}: {exc.args[0] if exc.args else exc}",)
            raise
    assert link is not None
    return link


async def _log_in(
    cfg: ConnectConfig, prepared: Prepared, via: SSHLink | None, memory: AuthMemory
) -> SSHLink:
    port = prepared.port
    tried = cfg.password if cfg.password is not None else memory.password
    user = str(getattr(prepared.options, "username", "") or "")
    policy = LoginClient(
        cfg,
        memory,
        prepared.known_files,
        strict=prepared.strict,
        locked=prepared.locked,
        tried_password=tried,
        username=user,
    )
    for key in prepared.waiting:  # its passphrase is asked at PK_OK, by this log-in
        key.unlock = policy.unlock
    label = f"{cfg.host}:{port}"
    where: dict[str, Any] = {"host": cfg.host, "port": port}
    if memory.compression is None:  # the client's first log-in: its plain one
        memory.compression = prepared.compression_mode
    started = time.monotonic()
    try:
        async with asyncio.timeout(prepared.connect_timeout) as scope:
            policy.deadline = Deadline(scope)
            conn = await _login(cfg, prepared, policy, label, where, via)
    except asyncssh.HostKeyNotVerifiable as exc:
        refusal = policy.refusal or UnknownHostKey(f"{label}: {clip(exc.reason)}", **where)
        # A known_hosts callable that raised: its error is the cause to show.
        raise refusal from (refusal.__cause__ or exc)
    except asyncssh.PermissionDenied as exc:
        why = why_no_prompt(cfg)
        raise AuthenticationError(
            f"{label}: authentication failed: {clip(exc.reason)}{why}", **where
        ) from exc
    except asyncssh.KeyImportError as exc:
        raise KeyLoadError("(a key asyncssh loaded)", str(exc), **where) from exc
    except socket.gaierror as exc:
        raise ConnectError(
            f"{cfg.host}: cannot resolve host name: {exc.strerror}", **where
        ) from exc
    except ConnectionRefusedError as exc:
        raise ConnectError(f"{label}: connection refused", **where) from exc
    except asyncssh.ChannelOpenError as exc:  # the jump host would not forward to us
        raise ConnectError(f"{label}: the jump host refused: {clip(exc.reason)}", **where) from exc
    except TimeoutError as exc:
        raise ConnectTimeout(
            f"{label}: timed out after {prepared.connect_timeout:g} s", **where
        ) from exc
    except UnicodeDecodeError as exc:
        # asyncssh decodes some of the server's bytes strictly and lets the error
        # out of connect(): a version line past ASCII where its reader is stock
        # (``asyncssh_patches.versionline``), an algorithm name that is not ASCII.
        text = exc.object[:_SAID_SHOWN].decode("utf-8", "surrogateescape")  # escaped by str()
        raise ConnectError(
            f"{label}: the server sent what SSH does not allow as text: '{text}' "
            f"({exc.encoding}: {exc.reason})",
            **where,
        ) from exc
    except (asyncssh.Error, OSError) as exc:
        dropped = _dropped_why(exc, policy)
        if dropped is not None:
            raise ConnectDropped(
                f"{label}: the server closed the connection before the log-in "
                f"({dropped}; sshd's MaxStartups throttling?)",
                **where,
            ) from exc
        if isinstance(exc, asyncssh.DisconnectError):
            reason = clip(exc.reason)
            raise ConnectError(f"{label}: server disconnected: {reason}", **where) from exc
        raise ConnectError(f"{label}: {exc}", **where) from exc
    if via is not None:
        # asyncssh closes the tunnel of a connection it opened through one only
        # when it opened the tunnel itself: closing ours closes the hops too.
        conn.set_tunnel(via.connection)
    patches = tune_connection(conn) | policy.handshake_patches
    port = conn.get_extra_info("peername", (cfg.host, port))[1] if via is None else port
    link = SSHLink(conn, f"{conn.get_extra_info('username')}@{cfg.host}:{port}", patches)
    timeline = Timeline(started)
    for name, at in zip(
        CONNECTION_PHASES,
        (policy.connected_at, policy.auth_began_at, policy.auth_ended_at or time.monotonic()),
        strict=True,
    ):
        timeline.mark(name, at or timeline.last)
    link.setup = timeline.phases
    link.compression = conn.get_extra_info("send_compression", "none") or "none"
    link.compression_mode = prepared.compression_mode
    if logger.isEnabledFor(logging.INFO):
        log_negotiated(conn, link.label, policy.negotiated, timeline.phases)
    # The log-in is one round trip when the key is signed at once (two when
    # asyncssh queries it first), plus the server's check of one signature.
    auth = dict(timeline.phases)["auth"]
    link.rtt_estimate = auth if SIGNED_FIRST in patches else auth / 2
    memory.rtt_known.set()  # measured (``LoginClient.service_accepted``) or not at all
    return link


# What a connection closed by the server looks like, as asyncssh hands it on:
# an RST (sshd closed it with our version line unread), a close (EOF: asyncssh's
# "Connection lost"), a write after either.
_CLOSED = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, asyncssh.ConnectionLost)
# The most of the server's text a message quotes.
_SAID_SHOWN = 200


def _dropped_why(exc: Exception, policy: LoginClient) -> str | None:
    """Why the server closed the connection before the log-in began; None if it
    did not (it refused, timed out, or the log-in had begun: not a drop)."""
    if policy.auth_began_at:
        return None  # the log-in's own failures are not retried
    said = policy.said_before_version
    if isinstance(exc, asyncssh.DisconnectError) and exc.code == asyncssh.DISC_TOO_MANY_CONNECTIONS:
        said = exc.reason  # RFC 4253 §11.1's own word for it
    elif not isinstance(exc, _CLOSED):
        return None
    if said:
        return f"it said '{said[:_SAID_SHOWN]}'"  # escaped by the error's str()
    if isinstance(exc, OSError):
        return (exc.strerror or str(exc)).lower()
    return "connection closed"


async def _login(
    cfg: ConnectConfig,
    prepared: Prepared,
    client: LoginClient,
    label: str,
    where: dict[str, Any],
    via: SSHLink | None,
) -> asyncssh.SSHClientConnection:
    """``asyncssh.connect``; a prompt callback that raised ends it with its error.

    Raises:
        the callback's SSHPipeError, or AuthenticationError from its other
        errors; else asyncssh's own (translated by the caller).
    """
    try:
        conn = await asyncssh.connect(
            cfg.host,
            options=prepared.options,
            known_hosts=prepared.trusted,
            client_factory=lambda: client,
            # Always given: left out, asyncssh would open ssh_config's ProxyJump itself.
            tunnel=via.connection if via is not None else None,
        )
    except (asyncssh.Error, OSError):
        if client.failure is None:
            raise
        conn = None
    failure, client.failure = client.failure, None  # no cycle through its traceback
    if failure is None:
        assert conn is not None
        return conn
    if conn is not None:
        conn.abort()
    if isinstance(failure, SSHPipeError):
        raise failure
    raise AuthenticationError(
        f"{label}: the prompt callback raised {type(failure).__name__}: {failure}", **where
    ) from failure
