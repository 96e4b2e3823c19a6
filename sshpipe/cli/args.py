"""The command line's words: the parser, ``[user@]host:path``, and the configs they make.

Every default a help text states is taken from the constant the library uses
(``_config``), so the two cannot drift apart. A bad word is a ``UsageError``
(exit 2) in one line, never argparse's own exit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from .._config import (
    DEFAULT_CHANNELS_PER_CONNECTION,
    DEFAULT_MAX_BYTES_IN_FLIGHT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_REQUESTS,
    DEFAULT_RETRIES,
    DEFAULT_STALL_TIMEOUT,
    TransferConfig,
    parse_destination,
)
from .._errors import UsageError
from .argtypes import number_at_least, size_at_least

__all__ = [
    "VERIFY_LEVELS",
    "RemoteSpec",
    "parse_args",
    "parse_remote",
    "ssh_kwargs",
    "transfer_config",
]

DESCRIPTION = "``python -m sshpipe``: get / put with OpenSSH's spellings, plus demo and serve."

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


# --verify[=LEVEL]; a plain --verify is "best": the strongest check the server allows.
VERIFY_LEVELS = ("size", "best", "hash", "read-back")


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


def _add_tree_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-r", dest="recursive", action="store_true", help="copy directories recursively"
    )
    parser.add_argument(
        "-p",
        dest="preserve",
        action="store_true",
        help="preserve modes and access/modification times (as scp -p)",
    )
    parser.add_argument(
        "-L",
        "--follow-symlinks",
        dest="follow_symlinks",
        action="store_true",
        help="copy what symlinks point to (default: recreate the links)",
    )
    parser.add_argument(
        "--fail-fast",
        dest="fail_fast",
        action="store_true",
        help="stop at the first file that fails (default: copy the rest, then report)",
    )


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
        help=f"most channels per connection (default {DEFAULT_CHANNELS_PER_CONNECTION}: "
        "sshd's MaxSessions less one, kept for a command)",
    )
    parser.add_argument(
        "--in-flight",
        dest="in_flight",
        type=_size,
        help="memory budget: payload bytes in flight at most "
        f"(default {DEFAULT_MAX_BYTES_IN_FLIGHT >> 20}M)",
    )
    parser.add_argument("--window", type=_size, help="SSH receive window per channel")
    parser.add_argument(
        "--retries",
        type=int,
        metavar="N",
        help="reconnects in a row that move nothing before a copy gives up: downloads, "
        f"uploads from a file, and trees reconnect (default {DEFAULT_RETRIES})",
    )
    parser.add_argument(
        "--stall-timeout",
        dest="stall_timeout",
        type=number_at_least(0.001, "stall-timeout"),
        metavar="SECONDS",
        help="no reply for this long counts as a dropped connection "
        f"(default {DEFAULT_STALL_TIMEOUT:g})",
    )
    parser.add_argument(
        "--verify",
        nargs="?",
        const="best",
        choices=VERIFY_LEVELS,
        help="check the copy before it takes its name: its SHA-256 against sha256sum on "
        "the server, else against the server's check-file hash, else (best, the default) "
        "its size; hash: fail where the server cannot hash; read-back: else read it back "
        "over SFTP",
    )
    parser.add_argument(
        "--fsync",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="make each file durable (fsync, fsync@openssh.com) before it takes its name "
        "(the default); --no-fsync: only rename it into place",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep an interrupted copy's partial file and continue it next time, checking "
        "what it kept (as sftp reget/reput, rsync --partial); with -r, skip the files "
        "an earlier run finished",
    )
    parser.add_argument(
        "--inplace",
        action="store_true",
        help="write the destination itself, not a temporary name renamed over it "
        "(a failure then leaves a partial file)",
    )
    parser.add_argument(
        "--sequential-writes",
        action="store_true",
        help="upload in file order on one channel, for servers that refuse other writes "
        "(detected without it, at the cost of one attempt)",
    )
    parser.add_argument("-q", dest="quiet", action="store_true", help="print nothing on success")
    parser.add_argument("--json", action="store_true", help="print the transfer stats as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m sshpipe", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    get = commands.add_parser("get", help="download: [user@]host:REMOTE... LOCAL")
    get.add_argument(
        "sources",
        nargs="+",
        metavar="[user@]host:REMOTE",
        help="remote files or (with -r) directories; wildcards are expanded on the server "
        "(quote them: host:'logs/*.gz')",
    )
    get.add_argument("target", metavar="LOCAL")
    put = commands.add_parser("put", help="upload: LOCAL... [user@]host:REMOTE")
    put.add_argument("sources", nargs="+", metavar="LOCAL")
    put.add_argument("target", metavar="[user@]host:REMOTE")
    for sub in (get, put):
        _add_tree_options(sub)
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


def ssh_kwargs(args: argparse.Namespace, spec: RemoteSpec) -> dict[str, Any]:
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


def transfer_config(args: argparse.Namespace) -> TransferConfig:
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
    if args.inplace:
        config = replace(config, inplace=True)
    if args.sequential_writes:
        config = replace(config, sequential_writes=True)
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
    return config


def _verify_level_attached(argv: Sequence[str] | None) -> list[str]:
    """``--verify`` followed by a path means ``--verify=best``, not a level named like a path.

    argparse gives an optional value the next word whatever it is, so
    ``get --verify host:f local`` would be refused as "invalid choice".
    """
    words = list(sys.argv[1:] if argv is None else argv)
    for index, word in enumerate(words):
        if word == "--":
            break
        following = words[index + 1] if index + 1 < len(words) else None
        if word == "--verify" and following not in VERIFY_LEVELS:
            words[index] = "--verify=best"
    return words


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` by default), parsed; a UsageError if it is wrong."""
    return build_parser().parse_args(_verify_level_attached(argv))
