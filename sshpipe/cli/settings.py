"""What the parsed words make: the connection's keyword arguments and the TransferConfig.

OpenSSH's precedence where two words say the same thing: ``-o Port`` over a
URL's port over ``-P``; ``-o User`` over the remote word's ``user@``; ``-J``
over ``-o ProxyJump``. Every ``-o`` goes before the ssh_config files (first
value wins): those with a keyword argument of ``connect`` through it, the
others as ``ssh_options``, a config read first.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..core.argtypes import positive_int
from ..core.errors import UsageError
from ..core.ratelimit import kbit_to_bytes
from .controlpath import CONTROL_OPTIONS
from .targets import RemoteSpec

if TYPE_CHECKING:
    from ..core.config import TransferConfig

__all__ = ["ssh_kwargs", "transfer_config"]

# -o options we understand, by OpenSSH's case-insensitive name.
_SSH_OPTIONS = {
    "stricthostkeychecking": "strict_host_key_checking",
    "userknownhostsfile": "known_hosts",
    "port": "port",
    "user": "username",
    "identityfile": "identity_files",
    "connecttimeout": "connect_timeout",
    "compression": "compression",
    "ciphers": "ciphers",
    "proxyjump": "proxy_jump",
    "batchmode": "batch_mode",
    "identityagent": "agent_path",
    "numberofpasswordprompts": "password_prompts",
}
# -o options handed on as ssh_config lines (``ssh_options``): what sshpipe or
# asyncssh reads from ssh_config and connect() has no keyword for.
_CONFIG_LINES = {
    name.lower(): name
    for name in (
        "HostName",
        "IdentitiesOnly",
        "CertificateFile",
        "KexAlgorithms",
        "MACs",
        "HostKeyAlgorithms",
        "HostKeyAlias",
        "PreferredAuthentications",
        "PubkeyAuthentication",
        "ServerAliveInterval",
        "ServerAliveCountMax",
        "TCPKeepAlive",
        "AddressFamily",
        "BindAddress",
        "GlobalKnownHostsFile",
        "RekeyLimit",
        "ProxyCommand",
    )
}
_SUPPORTED = (
    "StrictHostKeyChecking, UserKnownHostsFile, Port, User, IdentityFile, ConnectTimeout, "
    "Compression, Ciphers, ProxyJump, BatchMode, IdentityAgent, NumberOfPasswordPrompts, "
    "ControlMaster, ControlPath, ControlPersist, "
    f"{', '.join(_CONFIG_LINES.values())}"
)


def ssh_kwargs(args: argparse.Namespace, spec: RemoteSpec) -> dict[str, Any]:
    """The keyword arguments of ``sshpipe.connect`` for ``spec``, from -P -i -F -o -C -c.

    Raises:
        UsageError: an ``-o`` option we do not know, or a bad value for one.
    """
    kwargs: dict[str, Any] = {"identity_files": list(args.identity)}
    if args.ssh_config:
        kwargs["ssh_config"] = [args.ssh_config]
    # -C and -c before -o, as ssh reads them (each -o keeps the first value).
    if args.compression:
        kwargs["compression"] = True
    if args.cipher:
        kwargs["ciphers"] = tuple(args.cipher.split(","))
    if args.jump:
        kwargs["proxy_jump"] = args.jump  # -J beats -o ProxyJump, as in ssh
    lines: list[tuple[str, str]] = []
    for option in args.options:
        name, sep, value = option.partition("=")
        if not sep:
            name, _, value = option.partition(" ")
        if name.strip().lower() in CONTROL_OPTIONS:
            continue  # connection reuse: ``control``'s business
        key = _SSH_OPTIONS.get(name.strip().lower())
        value = value.strip()
        if key is None and name.strip().lower() in _CONFIG_LINES:
            lines.append((_CONFIG_LINES[name.strip().lower()], value))
            continue
        if key is None:
            raise UsageError(f"unsupported -o option {name!r} (supported: {_SUPPORTED})")
        if key == "port":
            kwargs.setdefault("port", _positive_int_option(name, value))  # the first, as ssh
        elif key == "username":
            kwargs.setdefault("username", value)
        elif key == "identity_files":
            kwargs["identity_files"].append(value)
        elif key == "known_hosts":
            kwargs.setdefault("known_hosts", value.split())
        elif key == "connect_timeout":
            kwargs.setdefault("connect_timeout", float(_positive_int_option(name, value)))
        elif key == "compression":
            auto = value.lower() == "auto"  # ours: OpenSSH knows yes and no
            kwargs.setdefault("compression", "auto" if auto else _yes_no(name, value))
        elif key == "batch_mode":
            kwargs.setdefault(key, _yes_no(name, value))
        elif key == "password_prompts":
            kwargs.setdefault(key, _positive_int_option(name, value))
        elif key == "ciphers":
            kwargs.setdefault("ciphers", tuple(value.split(",")))
        elif key == "strict_host_key_checking":
            # Here: a thin client (``thin``) loads no configs for the usual words.
            from ..core.config import HOST_KEY_POLICIES

            kwargs.setdefault(key, HOST_KEY_POLICIES.get(value.lower(), value))
        else:
            kwargs.setdefault(key, value)
    if lines:
        kwargs["ssh_options"] = lines
    # sftp and scp hand ssh the -o options first and the port and user after them
    # (-oPort/-p, -l), and ssh keeps the first value it reads: -o Port and -o User
    # win. Of the two ports sftp and scp decide themselves, a URL's wins over -P
    # (sftp.c overwrites -P's port with it; scp.c takes -P for a host with none).
    port = spec.port if spec.port is not None else args.port
    if port is not None:
        kwargs.setdefault("port", port)
    if spec.user:
        kwargs.setdefault("username", spec.user)
    if not kwargs["identity_files"]:
        del kwargs["identity_files"]
    return kwargs


def _yes_no(name: str, value: str) -> bool:
    if value.lower() not in ("yes", "no"):
        raise UsageError(f"-o {name}: want yes or no, not {value!r}")
    return value.lower() == "yes"


def _positive_int_option(name: str, value: str) -> int:
    try:
        return positive_int(value)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"-o {name}: {exc}") from None


def transfer_config(args: argparse.Namespace) -> TransferConfig:
    """The TransferConfig the transfer options ask for; the library's defaults elsewhere."""
    # Here, not at the top: a thin client (``thin``) reads ssh_kwargs only.
    from dataclasses import replace

    from ..core.config import TransferConfig

    # One transfer per process: nothing else on the loop to stall, so local
    # I/O runs on the loop thread (see TransferConfig.local_io_in_thread).
    config = TransferConfig(
        requests=args.requests, block_size=args.block_size, local_io_in_thread=False
    )
    if args.limit:
        config = replace(config, rate_limit=kbit_to_bytes(args.limit))
    if args.channels:
        config = replace(config, channels=args.channels)
    if getattr(args, "workers", None) is not None:
        config = replace(config, workers=args.workers)
    if args.connections:
        config = replace(config, max_connections=args.connections)
    if args.channels_per_connection:
        config = replace(config, channels_per_connection=args.channels_per_connection)
    if args.in_flight:
        config = replace(config, max_bytes_in_flight=args.in_flight)
    if args.window:
        config = replace(config, window=args.window)
    if args.inplace:
        config = replace(config, inplace=True)
    if args.sequential_writes:
        config = replace(config, sequential_writes=True)
    if args.max_connections_per_host:
        config = replace(config, max_connections_per_host=args.max_connections_per_host)
    if args.server_profile:
        config = replace(config, server_profile=args.server_profile)
    if args.resume:
        config = replace(config, resume=True)
    if args.fsync is not None:
        config = replace(config, fsync=args.fsync)
    if args.verify:
        config = replace(config, verify=args.verify)
    if args.retries is not None:
        config = replace(config, retries=args.retries)
    if args.stall_timeout is not None:
        config = replace(config, stall_timeout=args.stall_timeout)
    if getattr(args, "max_depth", None) is not None:
        config = replace(config, max_depth=args.max_depth)
    return config
