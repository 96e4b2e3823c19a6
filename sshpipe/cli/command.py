"""A command that connects or runs a loop: get and put, clean, demo and serve; Ctrl-C.

``main`` loads this module once the words are read and name one of these
commands: ``--version``, ``--help`` and a usage error load none of it, nor the
engine it imports. The first Ctrl-C cancels the transfer (temporary files
are removed); if it has not ended 0.8 s later, or at a second Ctrl-C, every
connection is dropped so nothing waits for a server that does not answer.
uvloop (the ``cli`` extra) is loaded here, never by the library; without it
the stock loop runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import glob
import os
import signal
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

# The engine now, before the loop starts: one transfer per process has no other
# task to keep running, so the library's import in a worker thread is not needed.
from ..client import engine  # noqa: F401
from ..client.client import Client
from ..client.connect import connect
from ..core.errors import IncompleteTransfer, LocalError, UsageError
from ..core.treeplan import has_magic
from . import collector
from .control import use_master
from .display import progress_display
from .output import report, report_failures, report_tree
from .prompt import TerminalPrompt, has_terminal
from .settings import ssh_kwargs, transfer_config
from .targets import RemoteSpec, parse_remote
from .thin import master_path
from .verbosity import log_used

__all__ = ["INTERRUPT_GRACE", "execute", "run_transfer"]

# After the first Ctrl-C the transfer cleans up (temporary files, handles on
# the server: a round trip or two); past this many seconds it may be waiting
# for a server that will never answer, and the connections are dropped, so
# the command is gone within a second of the Ctrl-C.
INTERRUPT_GRACE = 0.8


def execute(args: argparse.Namespace) -> int:
    """Run the parsed command ``args`` (get, put, clean, demo or serve); its exit code.

    Raises:
        SSHPipeError: the command failed (``main`` says so in one line).
    """
    if args.command in ("get", "put"):
        return _run(partial(_transfer, args, _control_path(args)))
    if args.command == "clean":
        from .clean import clean

        return _run(partial(clean, args, _connect_kwargs))
    from . import demo as _demo

    collector.resume()  # the demo's loops run long: no pause for them
    if args.command == "demo":
        return _run(lambda _: _demo.demo(args.size, rtt_ms=args.rtt, rate_mbit=args.rate))
    return _run(lambda _: _demo.serve(args.root, args.port))


def _control_path(args: argparse.Namespace) -> str | None:
    """The mux master's socket to run through (started first if need be), or None.

    Before the event loop: a master is forked (``control``), never a running loop.
    """
    found = master_path(args)
    if found is None or getattr(args, "master_gone", False):
        return None
    settings, path = found
    spec = parse_remote(args.sources[0] if args.command == "get" else args.target)
    assert spec is not None  # master_path found a host in it
    transfer = transfer_config(args)
    config = connect(spec.host, config=transfer, **_connect_kwargs(args, spec)).connect_config
    from .thinserve import runner  # only with a ControlPath: not in a direct get

    # The master runs later thin clients' commands (``thin``) with this module's transfer.
    serve = partial(runner, transfer=run_transfer)
    return (
        path if use_master(settings, path, config, retries=transfer.retries, runner=serve) else None
    )


async def run_transfer(
    args: argparse.Namespace, control_path: str, at: Callable[[str], str]
) -> int:
    """The get or put ``args`` names, through the master at ``control_path``, in a
    running loop (a master's, for a thin client: ``thinserve``); ``at`` as ``_transfer``'s.
    """
    return await _transfer(args, control_path, _Interrupts(), at=at)


def _connect_kwargs(args: argparse.Namespace, spec: RemoteSpec) -> dict[str, Any]:
    """``connect``'s keyword arguments: the options', and a prompt on the terminal if any."""
    kwargs = ssh_kwargs(args, spec)
    if not kwargs.get("batch_mode") and has_terminal():
        kwargs["prompt"] = TerminalPrompt()  # as ssh: on /dev/tty, whatever stdin is
    return kwargs


async def _transfer(
    args: argparse.Namespace,
    control_path: str | None,
    interrupts: _Interrupts,
    *,
    at: Callable[[str], str] = str,
) -> int:
    """The get or put ``args`` names; ``at`` maps a local name to the path opened.

    ``at``: a master running a thin client's command opens its local names
    in the client's directory (``thinserve``); what is printed keeps the
    names as given.
    """
    remote_side = args.sources if args.command == "get" else [args.target]
    local_side = [args.target] if args.command == "get" else args.sources
    specs = [parse_remote(text) for text in remote_side]
    spec = specs[0]
    if spec is None or any(other is None for other in specs):
        bad = next(text for text, other in zip(remote_side, specs, strict=True) if other is None)
        needs = "a remote source" if args.command == "get" else "a remote target"
        raise UsageError(
            f"{args.command} needs {needs} [user@]host:PATH or sftp://[user@]host[:port]/PATH, "
            f"not {bad!r}"
        )
    where = (spec.user, spec.host, spec.port)
    if any((other.user, other.host, other.port) != where for other in specs if other):
        raise UsageError("all remote sources must be on the same [user@]host[:port]")
    if any(parse_remote(text) is not None for text in local_side):
        raise UsageError(f"{args.command}: remote-to-remote copies are not supported")
    local_side = [at(name) for name in local_side]
    if args.command == "put":
        local_side = _expand_local(local_side)
    _check_local(args, local_side)
    config = transfer_config(args)
    tree = args.recursive or len(remote_side) > 1 or len(local_side) > 1
    paths = [other.path for other in specs if other is not None]
    kwargs = _connect_kwargs(args, spec)
    async with connect(spec.host, config=config, control_path=control_path, **kwargs) as client:
        collector.resume()  # start-up is over (collector.py)
        interrupts.client = client  # dropped at a second Ctrl-C
        # A remote wildcard is expanded as the tree goes: its matches are never collected.
        globbing = args.command == "get" and any(has_magic(path) for path in paths)
        tree = tree or globbing
        if not tree:
            with progress_display(args, tree=False) as shown:
                if args.command == "get":
                    stats = await client.get(
                        paths[0], local_side[0], preserve=args.preserve, progress=shown
                    )
                else:
                    stats = await client.put(
                        local_side[0], paths[0], preserve=args.preserve, progress=shown
                    )
            log_used(client, stats)
            report(args, args.sources[0], args.target, stats, server=client.server)
            return 0
        with progress_display(args, tree=True) as shown:
            options: dict[str, Any] = {
                "recursive": args.recursive,
                "preserve": args.preserve,
                "follow_symlinks": args.follow_symlinks,
                "fail_fast": args.fail_fast,
                "progress": shown,
            }
            try:
                if args.command == "get":
                    tree_stats = await client.get(paths, local_side[0], glob=globbing, **options)
                else:
                    tree_stats = await client.put(local_side, paths[0], **options)
            except IncompleteTransfer as exc:
                log_used(client, None)
                report_failures(args, exc, server=client.server)
                raise
        log_used(client, None)
    report_tree(args, args.sources, args.target, tree_stats, server=client.server)
    return 0


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
    except ImportError:  # the cli extra is not installed (or uvloop does not build there)
        return asyncio.run(interrupts.run(command(interrupts)))
    return uvloop.run(interrupts.run(command(interrupts)))
