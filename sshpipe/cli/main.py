"""``python -m sshpipe``: get / put with OpenSSH's spellings, plus demo and serve.

Every failure is one line on stderr and a non-zero exit code taken from the
exception tree (see ``_errors.py``); set ``SSHPIPE_DEBUG=1`` for tracebacks.
Whatever reaches the terminal is escaped first (``_untrusted.printable``):
names and messages come from the server. The first Ctrl-C cancels the
transfer (temporary files are removed); if it has not ended 0.8 s later,
or at a second Ctrl-C, every connection is dropped so nothing waits for a
server that does not answer. uvloop is loaded here, never by the library.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, NoReturn

from .._client import Client, connect
from .._config import DEFAULT_MAX_CONNECTIONS, DEFAULT_REQUESTS, TransferConfig, parse_destination
from .._errors import IncompleteTransfer, LocalError, SSHPipeError, UsageError
from .._stats import TransferStats, TreeProgress, TreeStats
from ..core.treeplan import has_magic
from ..core.untrusted import printable
from .argtypes import number_at_least, size_at_least

EXIT_INTERRUPTED = 130
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug of ours, still reported in one line
# After the first Ctrl-C the transfer cleans up (temporary files, handles on
# the server: a round trip or two); past this many seconds it may be waiting
# for a server that will never answer, and the connections are dropped, so
# the command is gone within a second of the Ctrl-C.
INTERRUPT_GRACE = 0.8
# Failures of a tree printed one by one; the rest are counted.
FAILURES_SHOWN = 100

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


VERIFY_LEVELS = ("size", "hash", "read-back")  # --verify[=LEVEL]


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
        help="most channels per connection (default 10, sshd's MaxSessions)",
    )
    parser.add_argument(
        "--in-flight",
        dest="in_flight",
        type=_size,
        help="memory budget: payload bytes in flight at most (default 64M)",
    )
    parser.add_argument("--window", type=_size, help="SSH receive window per channel")
    parser.add_argument(
        "--retries",
        type=int,
        metavar="N",
        help="reconnects in a row that move nothing before a download gives up (default 5)",
    )
    parser.add_argument(
        "--stall-timeout",
        dest="stall_timeout",
        type=number_at_least(0.001, "stall-timeout"),
        metavar="SECONDS",
        help="no reply for this long counts as a dropped connection (default 60)",
    )
    parser.add_argument(
        "--verify",
        nargs="?",
        const="hash",
        choices=VERIFY_LEVELS,
        help="check the copy before it takes its name: its SHA-256 against sha256sum on "
        "the server (default), else its size; read-back: else read it back over SFTP",
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
    parser.add_argument("-q", dest="quiet", action="store_true", help="print nothing on success")
    parser.add_argument("--json", action="store_true", help="print the transfer stats as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m sshpipe", description=__doc__.splitlines()[0])
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
    if args.inplace:
        config = replace(config, inplace=True)
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


def say(message: str) -> None:
    """One line on stderr, escaped: it may quote what a server sent."""
    print(f"sshpipe: {printable(message)}", file=sys.stderr)


def _report(args: argparse.Namespace, source: str, target: str, stats: TransferStats) -> None:
    if args.json:
        print(json.dumps({"source": source, "target": target, **stats.as_dict()}))
    elif not args.quiet:
        print(
            f"{printable(source)} -> {printable(target)}: {_human(stats.bytes)} "
            f"in {stats.seconds:.2f} s "
            f"({stats.throughput / 1e6:.1f} MB/s), {stats.requests} requests, "
            f"peak {stats.peak_requests_in_flight} in flight; {stats.channels} channel(s) on "
            f"{stats.connections} connection(s), RTT {stats.rtt_min * 1000:.1f} ms"
            + (f"; verified: {stats.verified}" if stats.verified != "none" else "")
        )


def _human(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


async def _transfer(args: argparse.Namespace, interrupts: _Interrupts) -> int:
    remote_side = args.sources if args.command == "get" else [args.target]
    local_side = [args.target] if args.command == "get" else args.sources
    specs = [parse_remote(text) for text in remote_side]
    spec = specs[0]
    if spec is None or any(other is None for other in specs):
        bad = next(text for text, other in zip(remote_side, specs, strict=True) if other is None)
        needs = "a remote source" if args.command == "get" else "a remote target"
        raise UsageError(f"{args.command} needs {needs} [user@]host:PATH, not {bad!r}")
    if any((other.user, other.host) != (spec.user, spec.host) for other in specs if other):
        raise UsageError("all remote sources must be on the same [user@]host")
    if any(parse_remote(text) is not None for text in local_side):
        raise UsageError(f"{args.command}: remote-to-remote copies are not supported")
    if args.command == "put":
        local_side = _expand_local(local_side)
    _check_local(args, local_side)
    config = _transfer_config(args)
    tree = args.recursive or len(remote_side) > 1 or len(local_side) > 1
    paths = [other.path for other in specs if other is not None]
    async with connect(spec.host, config=config, **_ssh_kwargs(args, spec)) as client:
        interrupts.client = client  # dropped at a second Ctrl-C
        if args.command == "get" and any(has_magic(path) for path in paths):
            paths = [match for path in paths for match in await _expand_remote(client, path)]
            tree = True
        if not tree:
            if args.command == "get":
                stats = await client.get(paths[0], args.target, preserve=args.preserve)
            else:
                stats = await client.put(local_side[0], paths[0], preserve=args.preserve)
            _report(args, args.sources[0], args.target, stats)
            return 0
        options: dict[str, Any] = {
            "recursive": args.recursive,
            "preserve": args.preserve,
            "follow_symlinks": args.follow_symlinks,
            "fail_fast": args.fail_fast,
            "progress": _progress_printer() if _show_progress(args) else None,
        }
        try:
            if args.command == "get":
                tree_stats = await client.get(paths, args.target, **options)
            else:
                tree_stats = await client.put(local_side, paths[0], **options)
        except IncompleteTransfer as exc:
            _end_progress(args)
            for failure in exc.failures[:FAILURES_SHOWN]:
                say(f"failed: {failure.error}")
            unlisted = len(exc.failures) - FAILURES_SHOWN + exc.stats.failures_unlisted
            if unlisted > 0:
                say(f"failed: {unlisted} more (--json lists the first 1,000)")
            _report_tree(args, args.sources, args.target, exc.stats)
            raise
        _end_progress(args)
    _report_tree(args, args.sources, args.target, tree_stats)
    return 0


async def _expand_remote(client: Client, pattern: str) -> list[str]:
    return await client.glob(pattern)


def _expand_local(sources: list[str]) -> list[str]:
    """Local wildcards the shell did not expand (quoted, or no shell at all)."""
    expanded: list[str] = []
    for source in sources:
        if os.path.lexists(source) or not has_magic(source):
            expanded.append(source)
            continue
        matches = sorted(glob.glob(source))
        if not matches:
            raise LocalError(source, "no match")
        expanded += matches
    return expanded


def _show_progress(args: argparse.Namespace) -> bool:
    return not (args.quiet or args.json) and sys.stderr.isatty()


def _progress_printer() -> Callable[[TreeProgress], None]:
    def show(progress: TreeProgress) -> None:
        total = "" if progress.scan_done else "+"
        print(
            f"\r{progress.files_done}/{progress.files_total}{total} files, "
            f"{_human(progress.bytes_done)}/{_human(progress.bytes_total)}{total}, "
            f"{progress.rate / 1e6:.1f} MB/s   ",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return show


def _end_progress(args: argparse.Namespace) -> None:
    if _show_progress(args):
        print(file=sys.stderr)


def _report_tree(
    args: argparse.Namespace, sources: list[str], target: str, stats: TreeStats
) -> None:
    if args.json:
        print(json.dumps({"source": sources, "target": target, **stats.as_dict()}))
    elif not args.quiet:
        failed = f", {len(stats.failures)} failed" if stats.failures else ""
        skipped = f", {stats.skipped} skipped" if stats.skipped else ""
        if stats.resumed_files:
            skipped += f", {stats.resumed_files} already copied by an earlier run"
        if stats.verified != "none":
            skipped += f", verified: {stats.verified}"
        print(
            f"{printable(' '.join(sources))} -> {printable(target)}: {stats.files_done} files "
            f"({_human(stats.bytes)}), {stats.directories} directories, "
            f"{stats.symlinks} symlinks{skipped}{failed} in {stats.seconds:.2f} s "
            f"({stats.files_per_second:.0f} files/s, {stats.throughput / 1e6:.1f} MB/s)"
        )


def _check_local(args: argparse.Namespace, local_side: list[str]) -> None:
    """Refuse a bad local path before connecting: no round trips for a typo."""
    if args.command == "put":
        for source in local_side:
            if not os.path.exists(source):
                raise LocalError(source, "No such file or directory")
            if os.path.isdir(source) and not args.recursive:
                raise LocalError(source, "is a directory (use -r)")
    else:
        target = local_side[0]
        parent = os.path.dirname(os.path.abspath(target))
        if not os.path.isdir(target) and not os.path.isdir(parent):
            raise LocalError(parent, "no such directory")


class _Interrupts:
    """Ctrl-C: the first cancels, the second (or INTERRUPT_GRACE later) stops at once.

    The first cancels the command: a download removes its temporary file, an
    upload its remote one, and every handle is closed. A server that does not
    answer would make that wait: INTERRUPT_GRACE after the first Ctrl-C, or at
    the second, every connection is dropped (``Client.abort``), which ends
    every wait at once; local clean-up still runs.
    """

    def __init__(self) -> None:
        self.client: Client | None = None
        self.count = 0
        self._task: asyncio.Task[int] | None = None

    async def run(self, coro: Coroutine[Any, Any, int]) -> int:
        loop = asyncio.get_running_loop()
        self._task = task = loop.create_task(coro)
        # Not in the main thread, or on Windows: Python's own KeyboardInterrupt.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGINT, self._interrupted)
        try:
            return await task
        except asyncio.CancelledError:
            if self.count:
                raise KeyboardInterrupt from None
            raise
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGINT)

    def _interrupted(self) -> None:
        self.count += 1
        if self.count == 1 and self._task is not None:
            self._task.cancel()
            asyncio.get_running_loop().call_later(INTERRUPT_GRACE, self._stop)
        else:
            self._stop()

    def _stop(self) -> None:
        if self.client is not None and self._task is not None and not self._task.done():
            self.client.abort()


def _run(command: Callable[[_Interrupts], Coroutine[Any, Any, int]]) -> int:
    interrupts = _Interrupts()
    try:
        import uvloop
    except ImportError:  # uvloop is optional where it does not build (e.g. Windows)
        return asyncio.run(interrupts.run(command(interrupts)))
    return uvloop.run(interrupts.run(command(interrupts)))


def _verify_level_attached(argv: Sequence[str] | None) -> list[str]:
    """``--verify`` followed by a path means ``--verify=hash``, not a level named like a path.

    argparse gives an optional value the next word whatever it is, so
    ``get --verify host:f local`` would be refused as "invalid choice".
    """
    words = list(sys.argv[1:] if argv is None else argv)
    for index, word in enumerate(words):
        if word == "--":
            break
        following = words[index + 1] if index + 1 < len(words) else None
        if word == "--verify" and following not in VERIFY_LEVELS:
            words[index] = "--verify=hash"
    return words


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m sshpipe``; returns the exit code."""
    # SSHPIPE_DEBUG=1: sshpipe's own debug log (the flow controller's rounds
    # among it); =asyncssh adds asyncssh's. Neither logs secrets or payload.
    debug = os.environ.get("SSHPIPE_DEBUG", "")
    handler = logging.StreamHandler()
    handler.setFormatter(
        _Escaped(
            "sshpipe: %(relativeCreated)d ms: %(message)s" if debug else "sshpipe: %(message)s"
        )
    )
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])
    logging.getLogger("asyncssh").setLevel(
        logging.DEBUG if debug == "asyncssh" else logging.CRITICAL
    )
    try:
        args = build_parser().parse_args(_verify_level_attached(argv))
        if args.command in ("get", "put"):
            return _run(partial(_transfer, args))
        from . import demo as _demo

        if args.command == "demo":
            return _run(lambda _: _demo.demo(args.size, rtt_ms=args.rtt, rate_mbit=args.rate))
        return _run(lambda _: _demo.serve(args.root, args.port))
    except SSHPipeError as exc:
        if debug:
            raise
        say(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        say("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # never a traceback for a user; say what broke
        if debug:
            raise
        say(f"internal error: {type(exc).__name__}: {exc} (set SSHPIPE_DEBUG=1 for details)")
        return EXIT_INTERNAL


class _Escaped(logging.Formatter):
    """Log lines escaped as everything else on the terminal (a message may quote a server)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))
