"""``sshpipe.connect``: the arguments of a connection checked and frozen into a :class:`Client`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Literal

from ..core.config import (
    DEFAULT_PASSWORD_PROMPTS,
    ConnectConfig,
    HostKeyPolicy,
    TransferConfig,
    parse_destination,
)
from ..core.keys import HostKeyCheck, PrivateKey
from ..core.paths import StrPath, fspaths
from ..core.prompt import PromptCallback
from .client import Client


def connect(
    destination: str,
    *,
    port: int | None = None,
    username: str | None = None,
    identity_files: StrPath | Sequence[StrPath] = (),
    passphrase: str | bytes | None = None,
    keys: Sequence[PrivateKey] = (),
    agent_path: StrPath | None = None,
    password: str | None = None,
    prompt: PromptCallback | None = None,
    batch_mode: bool | None = None,
    password_prompts: int = DEFAULT_PASSWORD_PROMPTS,
    known_hosts: StrPath | Sequence[StrPath] | HostKeyCheck | None = None,
    strict_host_key_checking: HostKeyPolicy | None = None,
    ssh_config: StrPath | Sequence[StrPath] | None = None,
    connect_timeout: float | None = None,
    compression: bool | Literal["auto"] | None = None,
    ciphers: tuple[str, ...] | list[str] | None = None,
    proxy_jump: str | None = None,
    ssh_options: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    config: TransferConfig | None = None,
    control_path: StrPath | None = None,
) -> Client:
    """A client for ``[user@]host``; connects on ``async with`` (or ``await client.open()``).

    Args:
        destination: ``host`` or ``user@host``; ssh_config Host aliases work.
        port, username: override ssh_config's Port and User.
        identity_files: private key files to offer, like ``ssh -i``. This and the
            other file arguments take a ``str`` or ``os.PathLike`` or a sequence of them.
        passphrase: decrypts encrypted identity files; never logged or shown.
        keys: private keys in memory, from :func:`sshpipe.load_key` (an
            asyncssh ``SSHKey`` is taken too, wrapped as ``load_key`` does).
        agent_path: the ssh-agent socket (default: ssh_config's IdentityAgent,
            else ``$SSH_AUTH_SOCK``); "none": no agent.
        password: tried first if given; never logged.
        prompt: answers what a terminal user would be asked: an encrypted
            key's passphrase, the password, keyboard-interactive (2FA)
            challenges. Called with a :class:`sshpipe.Prompt`; returns the
            answer, or None to give up on it; a coroutine function runs on the
            loop, a plain one in a worker thread. Answers that worked are kept
            in memory for the client's reconnects. None (default): nothing
            is asked, only ``password``/``passphrase`` and keys are tried.
        batch_mode: never prompt (OpenSSH's BatchMode), even with ``prompt``;
            None: ssh_config's BatchMode, else no.
        password_prompts: tries at each password, passphrase or challenge
            (OpenSSH's NumberOfPasswordPrompts).
        known_hosts: files to check host keys against (default: ssh_config's
            UserKnownHostsFile, else ~/.ssh/known_hosts); or a callable
            ``(host, port, HostKey) -> bool`` that alone decides (True trusts,
            False refuses with HostKeyError) and reads or writes no file.
        strict_host_key_checking: "yes", "accept-new" or "no" (default:
            ssh_config's StrictHostKeyChecking, else "yes"); only "yes" with a
            known_hosts callable.
        ssh_config: OpenSSH config files to read (default ~/.ssh/config).
        connect_timeout: seconds for TCP connect plus handshake (default:
            ssh_config's ConnectTimeout, else 30).
        compression: "auto" chooses per file (a compressed connection beside
            the plain one, for data that shrinks on a link slower than zlib);
            True compresses everything, False nothing (default: ssh_config's
            Compression, else "auto").
        ciphers: encryption algorithms in preference order (default:
            ssh_config's Ciphers, else an order chosen from the CPU's flags:
            AES-GCM first with AES instructions, chacha20-poly1305 first
            without; "none" is refused).
        proxy_jump: jump hosts ``[user@]host[:port],...`` as ``ssh -J`` takes
            them (default: ssh_config's ProxyJump); "none" connects directly.
        ssh_options: OpenSSH options as ``ssh -o`` takes them, e.g.
            ``{"HostName": "10.0.0.5", "IdentitiesOnly": "yes"}``: read before
            the ssh_config files, so they win over them.
        config: TransferConfig for every transfer of this client.
        control_path: a mux master's socket (``sshpipe -o ControlMaster=auto``
            starts one): its connection is used while a master answers there,
            else connections are opened directly.

    Returns:
        An unopened :class:`Client`.

    Raises:
        UsageError: invalid arguments.
    """
    user, host = parse_destination(destination)
    loaded = tuple(keys)
    if any(not isinstance(key, PrivateKey) for key in loaded):
        from ..transport.keys import load_key  # an asyncssh SSHKey: wrapped (loads asyncssh)

        loaded = tuple(load_key(key) for key in loaded)
    if callable(known_hosts):
        trusted: tuple[str, ...] | HostKeyCheck | None = known_hosts
    else:
        trusted = tuple(fspaths(known_hosts)) if known_hosts is not None else None
    connect_config = ConnectConfig(
        host=host,
        port=port,
        username=username or user,
        identity_files=tuple(fspaths(identity_files)),
        passphrase=passphrase,
        keys=loaded,
        agent_path=agent_path,
        password=password,
        prompt=prompt,
        batch_mode=batch_mode,
        password_prompts=password_prompts,
        known_hosts=trusted,
        strict_host_key_checking=strict_host_key_checking,
        ssh_config=tuple(fspaths(ssh_config)) if ssh_config is not None else None,
        connect_timeout=connect_timeout,
        compression=compression,
        ciphers=tuple(ciphers) if ciphers is not None else None,
        proxy_jump=proxy_jump,
        ssh_options=tuple(ssh_options.items() if isinstance(ssh_options, Mapping) else ssh_options),
        control_path=os.fspath(control_path) if control_path is not None else None,
    )
    return Client(connect_config, config or TransferConfig())
