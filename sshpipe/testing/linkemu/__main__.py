"""``python -m sshpipe.testing.linkemu``: the link emulator as a process of its own.

Prints ``listening on HOST:PORT`` (one line, flushed) once it accepts
connections, runs until SIGINT or SIGTERM, then prints one JSON line of stats
and exits 0. A bad argument is one line on stderr and exit 2; an address that
cannot be bound, exit 1. Running it alone in its process is what makes its
``cpu_seconds`` the proxy's own cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Coroutine, Sequence
from dataclasses import asdict
from typing import Any, NoReturn

from ...core.argtypes import number_at_least, size_at_least
from ._model import LinkSpec
from ._proxy import LinkEmulator

PROG = "python -m sshpipe.testing.linkemu"


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _address(text: str) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")  # [::1]:22
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {port_text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {port}")
    return host, port


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="TCP proxy that emulates a WAN link (delay, rate, queue, faults).",
    )
    parser.add_argument(
        "--listen",
        type=_address,
        default=("127.0.0.1", 0),
        metavar="HOST:PORT",
        help="address to listen on (default 127.0.0.1:0, a free port)",
    )
    parser.add_argument(
        "--target", type=_address, required=True, metavar="HOST:PORT", help="where to forward"
    )
    parser.add_argument(
        "--rtt", type=number_at_least(0, "rtt"), default=0.0, metavar="MS", help="round trip, ms"
    )
    parser.add_argument(
        "--rate",
        type=number_at_least(1e-6, "rate"),
        default=None,
        metavar="MBIT",
        help="Mbit/s per direction (default unlimited)",
    )
    parser.add_argument(
        "--queue",
        type=size_at_least(0),
        default=None,
        metavar="BYTES",
        help="bottleneck queue per direction, e.g. 4M (default one BDP, at least 1M)",
    )
    parser.add_argument(
        "--cut-after",
        type=size_at_least(0),
        default=None,
        metavar="BYTES",
        help="reset every connection after this many bytes in --cut-direction",
    )
    parser.add_argument("--cut-direction", choices=("down", "up"), default="down")
    parser.add_argument(
        "--stall-at",
        type=number_at_least(0, "stall-at"),
        default=None,
        metavar="SECONDS",
        help="seconds after start to stall the link",
    )
    parser.add_argument(
        "--stall-for",
        type=number_at_least(0, "stall-for"),
        default=None,
        metavar="SECONDS",
        help="how long the stall lasts",
    )
    return parser


def _spec(args: argparse.Namespace) -> LinkSpec:
    if (args.stall_at is None) != (args.stall_for is None):
        raise _UsageError("--stall-at and --stall-for go together")
    if args.queue == 0:
        raise _UsageError("--queue must be at least 1 byte")
    rate = None if args.rate is None else args.rate * 1e6
    try:
        return LinkSpec(rtt=args.rtt / 1000, rate=rate, queue=args.queue)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None


async def _serve(args: argparse.Namespace, spec: LinkSpec) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    host, port = args.listen
    target_host, target_port = args.target
    link = LinkEmulator(target_host, target_port, spec, listen_host=host, listen_port=port)
    await link.start()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    stall = None
    try:
        if args.cut_after is not None:
            link.cut_after(args.cut_after, direction=args.cut_direction)
        if args.stall_at is not None:
            stall = loop.call_later(args.stall_at, link.stall, args.stall_for)
        shown = f"[{host}]" if ":" in host else host
        print(f"listening on {shown}:{link.port}", flush=True)
        await stop.wait()
    finally:
        if stall is not None:
            stall.cancel()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await link.aclose()
    stats = link.stats
    share = stats.cpu_seconds / stats.wall_seconds if stats.wall_seconds > 0 else 0.0
    return {**asdict(stats), "cpu_share": round(share, 4)}


def _run(coro: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    try:
        import uvloop
    except ImportError:  # optional where it does not build
        return asyncio.run(coro)
    result: dict[str, Any] = uvloop.run(coro)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the emulator until SIGINT/SIGTERM; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
        spec = _spec(args)
    except _UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        stats = _run(_serve(args, spec))
    except OSError as exc:
        host, port = args.listen
        print(f"{PROG}: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # before the signal handlers were in place
        return 130
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
