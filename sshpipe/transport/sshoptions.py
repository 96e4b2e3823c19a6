"""One connection's options, settled before it opens: asyncssh's, and the ones sshpipe applies.

Precedence is OpenSSH's: a ``ConnectConfig`` field (the command line's ``-P``,
``-J``, ``-C``...) first, then ``ssh_options`` (``-o``), then the ssh_config
files, first value winning; sshpipe's own default last. asyncssh reads the
files itself for its keywords, so a default of ours is handed to it only
where no line sets the keyword: handing it always (``encryption_algs``,
``compression_algs``, ``connect_timeout``) silently overrode ssh_config.

``-o`` pairs become a config file of their own read first (ssh(1) treats them
so): asyncssh has no keyword argument for HostName or IdentitiesOnly, and
``Match host`` in the files sees a HostName given with ``-o``.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncssh

from ..core.compresspolicy import CompressionMode
from ..core.config import (
    DEFAULT_CONNECT_TIMEOUT,
    HOST_KEY_POLICIES,
    ConnectConfig,
    HostKeyPolicy,
)
from ..core.errors import ConnectError, KeyLoadError, UsageError
from ..core.sshconfig import jump_in_force, parse_jump
from .asyncssh_patches import bound_zlib, read_compression_auto
from .auth import AuthMemory, can_prompt
from .cpuflags import default_ciphers
from .hostkeys import known_hosts_files, load_known_hosts
from .keys import LockedKey, OfferedKeys, offered_keys
from .sshconfig import config_files, options_text, own_options

__all__ = ["Prepared", "compression_mode", "read_options"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Prepared:
    """What ``open_link`` needs, read off the event loop.

    Attributes:
        options: asyncssh's options (ssh_config read, keys loaded).
        known_files: the known_hosts files of the host policy.
        trusted: their entries.
        port: the port connected to.
        strict: the StrictHostKeyChecking in force.
        connect_timeout: the seconds TCP connect plus handshake may take.
        jumps: the hops to tunnel through, (user, host, port), first first.
        locked: the encrypted key files to ask passphrases for once the keys
            offered are spent (those with no public half to offer), in order.
        waiting: the encrypted keys offered by their public half, whose
            passphrase is asked at the server's PK_OK (told how by the log-in).
        batch_mode: the BatchMode in force (given, else ssh_config's).
        compression_mode: the Compression in force (given, else ssh_config's, else auto).
    """

    options: asyncssh.SSHClientConnectionOptions
    known_files: list[Path]
    trusted: asyncssh.SSHKnownHosts
    port: int
    strict: HostKeyPolicy
    connect_timeout: float
    jumps: list[tuple[str | None, str, int | None]]
    locked: list[str]
    waiting: list[LockedKey]
    batch_mode: bool
    compression_mode: CompressionMode


def compression_mode(cfg: ConnectConfig, own: dict[str, str] | None = None) -> CompressionMode:
    """``cfg.compression``, else ssh_config's Compression (yes/no: OpenSSH's words, or
    auto), else auto: sshpipe's default, where OpenSSH's is no (README, "Compression").

    ``own``: ssh_config's values (``own_options``), when already read; else
    they are read (blocking: off the loop).
    """
    if cfg.compression == "auto":
        return "auto"
    if cfg.compression is not None:
        return "yes" if cfg.compression else "no"
    if own is None:
        own = own_options(cfg.ssh_config, cfg.host, cfg.username, options=cfg.ssh_options)
    value = (own.get("compression") or "auto").lower()
    if value == "auto":
        return "auto"
    return "yes" if value in ("yes", "true") else "no"


def read_options(cfg: ConnectConfig, memory: AuthMemory | None = None) -> Prepared:
    """Everything read and decided for ``cfg``: blocking, call it in a thread.

    Raises:
        UsageError: an ssh_config that cannot be read or parsed, a bad value
            for StrictHostKeyChecking, ConnectTimeout or ProxyJump, the
            "none" cipher asked for.
        KeyLoadError: a key named cannot be used.
        ConnectError: options asyncssh rejects, a bad known_hosts.
    """
    memory = memory if memory is not None else AuthMemory()
    own = own_options(cfg.ssh_config, cfg.host, cfg.username, options=cfg.ssh_options)
    if cfg.batch_mode is None:
        cfg = replace(cfg, batch_mode=own.get("batchmode", "no").lower() == "yes")
    where: dict[str, Any] = {"host": cfg.host, "port": cfg.port}
    connect_timeout = _connect_timeout(cfg, own)
    kwargs: dict[str, Any] = {"connect_timeout": connect_timeout}
    if can_prompt(cfg):
        # open_link's own deadline, stopped at prompts (``auth.Deadline``); and
        # no login timeout of asyncssh's (2 min): sshd's LoginGraceTime decides.
        kwargs.update(connect_timeout=None, login_timeout=0)
    if cfg.ciphers is None and _asks_for_none(own.get("ciphers", "")):
        raise UsageError(f"{cfg.host}: the 'none' cipher is never allowed (ssh_config Ciphers)")
    if cfg.ciphers is not None:
        kwargs["encryption_algs"] = list(cfg.ciphers)
    elif "ciphers" not in own:
        kwargs["encryption_algs"] = list(default_ciphers().order)  # from the CPU's flags
    # Forced on: zlib@openssh.com (sshd's, delayed until after log-in), else
    # zlib, else none. "auto" connects uncompressed: ``compressroute`` opens
    # the compressed connection beside it when the policy says so.
    mode = compression_mode(cfg, own)
    compressed = mode == "yes"
    kwargs["compression_algs"] = ["zlib@openssh.com", "zlib", "none"] if compressed else ["none"]
    # Never asyncssh's own ProxyJump: its hops would be checked by its rules, not ours.
    kwargs["tunnel"] = None
    # The server's text (its log-in banner, debug messages, a disconnect's
    # reason, a challenge's prompts) that is not UTF-8 is read as names are, a
    # stray byte kept as a surrogate and shown escaped (``\xe9``), where
    # asyncssh's "strict" dropped the connection over a banner nobody shows.
    kwargs["utf8_decode_errors"] = "surrogateescape"
    jump = jump_in_force(own, cfg.proxy_jump or None)
    if jump is not None:  # -J, or a ProxyJump before any ProxyCommand: asyncssh's
        kwargs["proxy_command"] = None  # reading of ProxyCommand must not apply
    if cfg.port is not None:
        kwargs["port"] = cfg.port
    if cfg.username is not None:
        kwargs["username"] = cfg.username
    # The keys are ours to choose (``keys.offered_keys``), once ssh_config's
    # IdentityFile lines are read: none loaded by asyncssh meanwhile.
    kwargs["client_keys"] = None
    if cfg.agent_path is not None:
        # OpenSSH's "IdentityAgent none": asyncssh's None.
        agent = os.fspath(cfg.agent_path)
        kwargs["agent_path"] = None if agent == "none" else os.path.expanduser(agent)
    password = cfg.password if cfg.password is not None else memory.password
    if password is not None:
        kwargs["password"] = password  # sent first, by asyncssh itself
    elif not can_prompt(cfg):
        # Nothing to answer with: skip the methods rather than fail them.
        kwargs["password_auth"] = False
        kwargs["kbdint_auth"] = False
    files = [str(path) for path in config_files(cfg.ssh_config)]
    # Else asyncssh refuses our "Compression auto" in a file: where its reader
    # stays stock, it is handed copies saying "no" there (``_stock_readable``).
    taught = read_compression_auto()
    bound_zlib()  # a compressed packet is inflated only up to what a packet may hold
    with (
        _options_file(cfg.ssh_options, taught) as first,
        _stock_readable(files, taught) as readable,
    ):
        kwargs["config"] = [first, *readable] if first else readable
        try:
            options = asyncssh.SSHClientConnectionOptions(host=cfg.host, **kwargs)
            offered = offered_keys(
                cfg,
                _configured_identities(options),
                may_ask=can_prompt(cfg) or bool(memory.unlocked),
                unlocked=memory.unlocked,
                abandoned=memory.abandoned,
            )
            options.update(**_key_options(offered, options))
        except (ValueError, asyncssh.Error, OSError) as exc:
            if isinstance(exc, UsageError | KeyLoadError):
                raise
            raise ConnectError(f"{cfg.host}: invalid SSH options: {exc}", **where) from exc
    if b"none" in options.encryption_algs:  # ssh_config's Ciphers, or "+none" in it
        raise UsageError(f"{cfg.host}: the 'none' cipher is never allowed (ssh_config Ciphers)")
    known_files = known_hosts_files(cfg, options)
    port = cfg.port or _port_of(options)
    return Prepared(
        options=options,
        known_files=known_files,
        trusted=load_known_hosts(known_files, host=cfg.host, port=port),
        port=port,
        strict=_strict(cfg, own),
        connect_timeout=connect_timeout,
        jumps=parse_jump(jump or "none"),
        locked=offered.locked,
        waiting=offered.waiting,
        batch_mode=bool(cfg.batch_mode),
        compression_mode=mode,
    )


def _configured_identities(options: asyncssh.SSHClientConnectionOptions) -> list[str]:
    """ssh_config's IdentityFile values for the host, as asyncssh read and expanded them."""
    named = options.config.get("IdentityFile", ())
    return [str(path) for path in named] if isinstance(named, list | tuple) else []


def _key_options(
    offered: OfferedKeys, options: asyncssh.SSHClientConnectionOptions
) -> dict[str, Any]:
    """asyncssh's options for the keys offered: ``client_keys``, and the agent's filter.

    asyncssh reads an empty list as "load the default keys": where keys were
    named and none can be offered before one waiting for its passphrase with
    no public half, the list is None instead (which leaves the agent out
    too); where nothing is named and no default key loads, asyncssh finds
    none either. With IdentitiesOnly the agent offers only the named keys
    (asyncssh would compare key objects with the agent's key blobs).
    """
    if offered.pairs:
        keys: dict[str, Any] = {"client_keys": offered.pairs}
    else:
        keys = {"client_keys": None if offered.named and offered.locked else []}
    if options.config.get("IdentitiesOnly"):
        blobs = [blob for pair in offered.pairs for blob in _blobs(pair)]
        keys["agent_identities"] = blobs
        if not blobs:  # asyncssh reads [] as "every key": none is meant
            keys["agent_path"] = None
    return keys


def _blobs(pair: asyncssh.SSHKeyPair) -> set[bytes]:
    """What an agent may hold of a key pair: its key, and its certificate if it has one."""
    return {pair.public_data, pair.key_public_data}


def _asks_for_none(ciphers: str) -> bool:
    """Whether a Ciphers value names "none" (alone, in its list, or added with + or ^)."""
    if ciphers.startswith("-"):
        return False  # "-none" removes it
    return "none" in ciphers.lstrip("+^").lower().split(",")


def _strict(cfg: ConnectConfig, own: dict[str, str]) -> HostKeyPolicy:
    if cfg.strict_host_key_checking is not None:
        return cfg.strict_host_key_checking
    value = own.get("stricthostkeychecking", "yes")
    policy = HOST_KEY_POLICIES.get(value.lower())
    if policy is None:
        raise UsageError(
            f"StrictHostKeyChecking must be yes, ask, accept-new, no or off, not {value!r}"
        )
    if callable(cfg.known_hosts) and policy != "yes":
        policy = "yes"  # the callable decides alone; the file's policy has nothing to apply to
    return policy


def _connect_timeout(cfg: ConnectConfig, own: dict[str, str]) -> float:
    if cfg.connect_timeout is not None:
        return cfg.connect_timeout
    value = own.get("connecttimeout")
    if value is None:
        return DEFAULT_CONNECT_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise UsageError(f"ConnectTimeout must be a positive number of seconds, not {value!r}")
    return seconds


@contextlib.contextmanager
def _options_file(options: tuple[tuple[str, str], ...], taught: bool = True) -> Any:
    """A private file holding the ``-o`` lines while asyncssh reads it (None for none).

    asyncssh reads configs by path only. Its options keep what they read, so
    the file is gone before the connection opens. ``taught``: asyncssh's
    reader takes ``Compression auto``; else the file says ``no`` there
    (``_for_stock_reader``).
    """
    if not options:
        yield None
        return
    text = options_text(options)
    fd, name = tempfile.mkstemp(prefix="sshpipe-o-", suffix=".conf")  # 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text if taught else _for_stock_reader(text))
        yield name
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)


# A ``Compression auto`` line, as ssh_config spells one ("=" or blanks, any case).
_COMPRESSION_AUTO = re.compile(
    r"^([ \t]*compression(?:[ \t]*=[ \t]*|[ \t]+))auto([ \t]*)$", re.IGNORECASE | re.MULTILINE
)


def _for_stock_reader(text: str) -> str:
    """ssh_config text as stock asyncssh reads it: ``Compression auto`` written as ``no``.

    asyncssh's own reading of Compression is never used (``compression_algs``
    is always handed to it; ``compression_mode`` reads the word itself), but
    its reader refuses any word but yes/no, and ``configwords`` teaches it
    ``auto`` only where the patches apply. Lines stay where they were, so
    asyncssh's line numbers in an error still match the user's file.
    """
    return _COMPRESSION_AUTO.sub(r"\1no\2", text)


@contextlib.contextmanager
def _stock_readable(files: list[str], taught: bool) -> Any:
    """``files``, each that says ``Compression auto`` replaced by a private copy
    saying ``no`` (``_for_stock_reader``), while asyncssh reads them; ``files``
    unchanged where its reader was ``taught`` the word.

    A relative ``Include`` in a copy still finds its files: asyncssh reads it
    from ~/.ssh, wherever the including file is (as OpenSSH does). A file
    that cannot be read is handed on as it is, for asyncssh to say so.
    """
    if taught:
        yield files
        return
    readable: list[str] = []
    copies: list[str] = []
    try:
        for path in files:
            try:
                text = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                text = ""
            if not _COMPRESSION_AUTO.search(text):
                readable.append(path)
                continue
            fd, name = tempfile.mkstemp(prefix="sshpipe-config-", suffix=".conf")  # 0600
            copies.append(name)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(_for_stock_reader(text))
            readable.append(name)
        yield readable
    finally:
        for name in copies:
            with contextlib.suppress(OSError):
                os.unlink(name)


def _port_of(options: asyncssh.SSHClientConnectionOptions) -> int:
    """The port ssh_config chose (asyncssh's ``port`` option), else 22."""
    port = getattr(options, "port", None)
    return port if isinstance(port, int) and port > 0 else 22
