"""``python -m sshpipe``: get / put with OpenSSH's spellings, plus demo and serve.

Every failure is one line on stderr and a non-zero exit code taken from the
exception tree (see ``_errors.py``); set ``SSHPIPE_DEBUG=1`` for tracebacks.
uvloop is loaded here, never by the library.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from ._argtypes import number_at_least, size_at_least
from ._client import connect
from ._config import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_REQUESTS,
    TransferConfig,
    parse_destination,
)
from ._errors import LocalError, SSHPipeError, UsageError
from ._stats import TransferStats

EXIT_INTERRUPTED = 130
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug of ours, still reported in one line

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
}


@dataclass(frozen=True, kw_only=True)
class RemoteSpec:
    user: str | None
    host: str
    path: str


def parse_remote(spec: str) -> RemoteSpec | None:
    """``[user@]host:path`` (scp syntax; ``[v6addr]:path`` too), or None for a local path."""
    if spec.startswith("/") or spec.startswith("./"):
        return None
    if "]:" in spec and "[" in spec:
        head, _, path = spec.partition("]:")
        head += "]"
    else:
        head, sep, path = spec.partition(":")
        if not sep or "/" in head:
            return None  # no colon before the first slash: a local path, as scp decides
    user, host = parse_destination(head)
    return RemoteSpec(user=user, host=host, path=path or ".")


_size = size_at_least(1)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see: {self.prog} --help)")


def _add_ssh_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-P", dest="port", type=_positive_int, help="port (as sftp/scp -P)")
    parser.add_argument(
        "-i",
        dest="identity",
        action="append",
        default=[],
        help="identity (private key) file; may be repeated",
    )
    parser.add_argument("-F", dest="ssh_config", help="ssh_config file (default ~/.ssh/config)")
    parser.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="Option=value",
        help="OpenSSH option: StrictHostKeyChecking, UserKnownHostsFile, Port, "
        "User, IdentityFile, ConnectTimeout, Compression, Ciphers",
    )
    parser.add_argument("-C", dest="compression", action="store_true", help="enable compression")
    parser.add_argument("-c", dest="cipher", help="cipher(s), comma separated")


def _add_transfer_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-R",
        dest="requests",
        type=_positive_int,
        default=DEFAULT_REQUESTS,
        help=f"requests in flight per channel (as sftp -R; default {DEFAULT_REQUESTS})",
    )
    parser.add_argument(
        "-B",
        dest="block_size",
        type=_size,
        help="bytes per request (as sftp -B; default: the server's limit)",
    )
    parser.add_argument(
        "--channels",
        type=_positive_int,
        help="use exactly this many SFTP channels (default: the flow controller decides)",
    )
    parser.add_argument(
        "--connections",
        type=_positive_int,
        help=f"most SSH connections to open (default {DEFAULT_MAX_CONNECTIONS})",
    )
    parser.add_argument(
        "--channels-per-connection",
        dest="channels_per_connection",
        type=_positive_int,
        help="most channels per connection (default 10, sshd's MaxSessions)",
    )
    parser.add_argument(
        "--in-flight",
        dest="in_flight",
        type=_size,
        help="memory budget: payload bytes in flight at most (default 64M)",
    )
    parser.add_argument("--window", type=_size, help="SSH receive window per channel")
    parser.add_argument("-q", dest="quiet", action="store_true", help="print nothing on success")
    parser.add_argument("--json", action="store_true", help="print the transfer stats as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m sshpipe", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    get = commands.add_parser("get", help="download: [user@]host:REMOTE LOCAL")
    get.add_argument("source", metavar="[user@]host:REMOTE")
    get.add_argument("target", metavar="LOCAL")
    put = commands.add_parser("put", help="upload: LOCAL [user@]host:REMOTE")
    put.add_argument("source", metavar="LOCAL")
    put.add_argument("target", metavar="[user@]host:REMOTE")
    for sub in (get, put):
        _add_ssh_options(sub)
        _add_transfer_options(sub)
    demo = commands.add_parser("demo", help="run get/put against an embedded server and compare")
    demo.add_argument(
        "--size", type=_size, default=64 * 1024 * 1024, help="test file size (default 64M)"
    )
    demo.add_argument(
        "--rtt",
        type=number_at_least(0, "rtt"),
        default=0.0,
        metavar="MS",
        help="emulate this round-trip time between client and server (link emulator)",
    )
    demo.add_argument(
        "--rate",
        type=number_at_least(0, "rate"),
        default=None,
        metavar="MBIT",
        help="emulate a link of this many Mbit/s per direction",
    )
    serve = commands.add_parser("serve", help="run the embedded SFTP server until Ctrl-C")
    serve.add_argument("--root", help="directory to serve (default: a new temp dir)")
    serve.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    return parser


def _ssh_kwargs(args: argparse.Namespace, spec: RemoteSpec) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"identity_files": list(args.identity)}
    if args.ssh_config:
        kwargs["ssh_config"] = [args.ssh_config]
    if args.compression:
        kwargs["compression"] = True
    if args.cipher:
        kwargs["ciphers"] = tuple(args.cipher.split(","))
    for option in args.options:
        name, sep, value = option.partition("=")
        if not sep:
            name, _, value = option.partition(" ")
        key = _SSH_OPTIONS.get(name.strip().lower())
        value = value.strip()
        if key is None:
            raise UsageError(
                f"unsupported -o option {name!r} (supported: "
                "StrictHostKeyChecking, UserKnownHostsFile, Port, User, "
                "IdentityFile, ConnectTimeout, Compression, Ciphers)"
            )
        if key == "port":
            kwargs["port"] = _positive_int_option(name, value)
        elif key == "identity_files":
            kwargs["identity_files"].append(value)
        elif key == "known_hosts":
            kwargs["known_hosts"] = value.split()
        elif key == "connect_timeout":
            kwargs["connect_timeout"] = float(_positive_int_option(name, value))
        elif key == "compression":
            kwargs["compression"] = value.lower() == "yes"
        elif key == "ciphers":
            kwargs["ciphers"] = tuple(value.split(","))
        elif key == "strict_host_key_checking":
            kwargs[key] = {"yes": "yes", "accept-new": "accept-new", "no": "no", "off": "no"}.get(
                value.lower(), value
            )
        else:
            kwargs[key] = value
    if args.port is not None:
        kwargs["port"] = args.port  # -P wins over -o Port, as in sftp
    if spec.user:
        kwargs["username"] = spec.user  # user@ in the spec wins over -o User
    if not kwargs["identity_files"]:
        del kwargs["identity_files"]
    return kwargs


def _positive_int_option(name: str, value: str) -> int:
    try:
        return _positive_int(value)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"-o {name}: {exc}") from None


def _transfer_config(args: argparse.Namespace) -> TransferConfig:
    # One transfer per process: nothing else on the loop to stall, so local
    # I/O runs on the loop thread (see TransferConfig.local_io_in_thread).
    config = TransferConfig(
        requests=args.requests, block_size=args.block_size, local_io_in_thread=False
    )
    if args.channels:
        config = replace(config, channels=args.channels)
    if args.connections:
        config = replace(config, max_connections=args.connections)
    if args.channels_per_connection:
        config = replace(config, channels_per_connection=args.channels_per_connection)
    if args.in_flight:
        config = replace(config, max_bytes_in_flight=args.in_flight)
    if args.window:
        config = replace(config, window=args.window)
    return config


def _report(args: argparse.Namespace, source: str, target: str, stats: TransferStats) -> None:
    if args.json:
        print(json.dumps({"source": source, "target": target, **stats.as_dict()}))
    elif not args.quiet:
        print(
            f"{source} -> {target}: {_human(stats.bytes)} in {stats.seconds:.2f} s "
            f"({stats.throughput / 1e6:.1f} MB/s), {stats.requests} requests, "
            f"peak {stats.peak_requests_in_flight} in flight; {stats.channels} channel(s) on "
            f"{stats.connections} connection(s), RTT {stats.rtt_min * 1000:.1f} ms"
        )


def _human(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


async def _transfer(args: argparse.Namespace) -> int:
    if args.command == "get":
        spec = parse_remote(args.source)
        if spec is None:
            raise UsageError(f"get needs a remote source [user@]host:PATH, not {args.source!r}")
        if parse_remote(args.target) is not None:
            raise UsageError("get copies to a local path; remote-to-remote is not supported")
    else:
        spec = parse_remote(args.target)
        if spec is None:
            raise UsageError(f"put needs a remote target [user@]host:PATH, not {args.target!r}")
        if parse_remote(args.source) is not None:
            raise UsageError("put copies from a local path; remote-to-remote is not supported")
    _check_local(args)
    config = _transfer_config(args)
    async with connect(spec.host, config=config, **_ssh_kwargs(args, spec)) as client:
        if args.command == "get":
            stats = await client.get(spec.path, args.target)
        else:
            stats = await client.put(args.source, spec.path)
    _report(args, args.source, args.target, stats)
    return 0


def _check_local(args: argparse.Namespace) -> None:
    """Refuse a bad local path before connecting: no round trips for a typo."""
    if args.command == "put":
        if not os.path.exists(args.source):
            raise LocalError(args.source, "No such file or directory")
        if os.path.isdir(args.source):
            raise LocalError(args.source, "is a directory (directory trees are not supported yet)")
    else:
        parent = os.path.dirname(os.path.abspath(args.target))
        if not os.path.isdir(args.target) and not os.path.isdir(parent):
            raise LocalError(parent, "no such directory")


def _run(coro: Coroutine[Any, Any, int]) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop is optional where it does not build (e.g. Windows)
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sshpipe``; returns the exit code."""
    # SSHPIPE_DEBUG=1: sshpipe's own debug log (the flow controller's rounds
    # among it); =asyncssh adds asyncssh's. Neither logs secrets or payload.
    debug = os.environ.get("SSHPIPE_DEBUG", "")
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="sshpipe: %(relativeCreated)d ms: %(message)s" if debug else "sshpipe: %(message)s",
    )
    logging.getLogger("asyncssh").setLevel(
        logging.DEBUG if debug == "asyncssh" else logging.CRITICAL
    )
    try:
        args = build_parser().parse_args(argv)
        if args.command in ("get", "put"):
            return _run(_transfer(args))
        from . import _demo  # the embedded server is only imported when asked for

        if args.command == "demo":
            return _run(_demo.demo(args.size, rtt_ms=args.rtt, rate_mbit=args.rate))
        return _run(_demo.serve(args.root, args.port))
    except SSHPipeError as exc:
        if debug:
            raise
        print(f"sshpipe: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("sshpipe: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # never a traceback for a user; say what broke
        if debug:
            raise
        print(
            f"sshpipe: internal error: {type(exc).__name__}: {exc} "
            "(set SSHPIPE_DEBUG=1 for details)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
