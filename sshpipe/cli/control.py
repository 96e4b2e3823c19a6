"""Connection reuse from the command line: ControlMaster auto, ControlPersist, ``-O``.

With ``-o ControlMaster=auto``, a command that finds no master at its
ControlPath starts one first and then, like every later command to the same
``user@host:port``, runs its transfer through it (``transport.muxclient``):
the later commands pay no TCP connect, key exchange or log-in.

The master is this process forked **before** its event loop starts (an SSH
connection's crypto state cannot be handed to another process, and forking a
running loop is unsafe; a fresh ``python -m sshpipe`` would pay the start-up
again and need the secrets passed to it). The child connects and logs in
with the terminal still its own (a prompt, if one is ever asked, reaches the
user), then leaves the session (``setsid``) and answers its parent through a
pipe: "ready", or the error, which the parent prints as its own one line with
its own exit code, exactly as without a master. Its stdin, stdout and stderr
are /dev/null from the start (a caller reading our output to its end must
not wait for the master); with ``SSHPIPE_DEBUG`` its log goes to
``ControlPath.log``, in the same 0700 directory.

ControlPath's default is ``$XDG_RUNTIME_DIR/sshpipe/%C`` (a per-user tmpfs,
0700, emptied at logout: no socket outlives the session), else
``~/.ssh/sshpipe/%C``. Its directory must be ours and mode 0700, or the
command refuses (exit 3): whoever reaches the socket uses our log-in.

``sshpipe -O check|exit [-o ...] [-P port] [user@]host``: "Master running
(pid=N)" (exit 0), "Exit request sent." (exit 0), or no master: exit 5.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.control import ControlSettings
from ..core.errors import ConnectError, SSHPipeError, UsageError
from ..core.sshconfig import parse_destination
from . import collector
from .controlpath import control_settings, socket_path

__all__ = ["control_command", "use_master"]

if TYPE_CHECKING:
    from ..core.config import ConnectConfig
    from ..transport.muxmaster import Runner

logger = logging.getLogger("sshpipe.mux")


def use_master(
    settings: ControlSettings,
    path: str,
    connect_config: ConnectConfig,
    *,
    retries: int = 0,
    runner: Callable[[str], Runner] | None = None,
) -> bool:
    """Whether a master answers at ``path`` now, starting one first when "auto" asks.

    ``retries``: the master's connections are tried that many more times when
    the server closes them before the log-in (the command's ``--retries``).
    ``runner``: given the socket's path, what a master started here runs a thin
    client's command with (``thinserve``); None: it refuses them.

    Returns False (connect directly) when none runs and none may or could be
    started; why is logged at debug level.

    Raises:
        ConnectError: the master's log-in failed: the message and exit code
            of the error a direct log-in gives (6 for a key refused...).
    """
    from ..transport.muxclient import probe

    if probe(path) is not None:
        return True
    if settings.master != "auto":
        return False
    if threading.active_count() > 1:
        # fork() copies only this thread: locks other threads hold stay held.
        logger.debug("mux: not starting a master: other threads run")
        return False
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the master
        os.close(read_end)
        _master(settings, path, connect_config, write_end, retries, runner)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer_pipe:
        raw = answer_pipe.read()
    try:
        answer = json.loads(raw) if raw else {}
    except ValueError:
        answer = {}
    if answer.get("ok"):
        return True
    if "exit_code" in answer:
        # The child's SSHPipeError, as the command's own: its one line, its exit code.
        failed = ConnectError(str(answer.get("error", "the master could not log in")))
        failed.exit_code = int(answer["exit_code"])
        raise failed
    logger.debug("mux: the master did not start (%s); connecting directly", answer.get("error"))
    return False


def _master(
    settings: ControlSettings,
    path: str,
    cfg: ConnectConfig,
    answer_fd: int,
    retries: int,
    runner: Callable[[str], Runner] | None,
) -> None:
    """The forked child: bind, log in, answer the parent, serve; never returns."""
    code = 0
    parent = _Parent(answer_fd)
    try:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        if os.environ.get("SSHPIPE_DEBUG"):
            log = os.open(path + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(log, 2)
        else:
            os.dup2(devnull, 2)
        from ..transport.muxmaster import bind_socket

        try:
            sock = bind_socket(path)
        except FileExistsError:  # another command's master won the race: use it
            parent.tell({"ok": True})
            os._exit(0)
        _run_loop(_serve(settings, path, cfg, sock, parent, retries, runner))
    except BaseException as exc:
        logger.debug("mux: the master failed: %s: %s", type(exc).__name__, exc)
        parent.tell({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        code = 1
    os._exit(code)


class _Parent:
    """The pipe to the command that forked the master: told once, then closed."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def tell(self, answer: dict[str, Any]) -> None:
        if self._fd is None:
            return  # told already: the number may be another file's by now
        fd, self._fd = self._fd, None
        with contextlib.suppress(OSError):
            os.write(fd, json.dumps(answer).encode())
        with contextlib.suppress(OSError):
            os.close(fd)


async def _serve(
    settings: ControlSettings,
    path: str,
    cfg: ConnectConfig,
    sock: Any,
    parent: _Parent,
    retries: int,
    runner: Callable[[str], Runner] | None,
) -> None:
    from ..transport.muxmaster import Master
    from ..transport.ssh import open_link

    try:
        link = await open_link(cfg, retries=retries)
    except SSHPipeError as exc:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
        parent.tell({"ok": False, "error": str(exc), "exit_code": exc.exit_code})
        return
    collector.resume()  # logged in: the master's start-up is over (collector.py)
    os.setsid()  # logged in: leave the terminal's session (no SIGHUP, no Ctrl-C)
    parent.tell({"ok": True, "pid": os.getpid()})
    master = Master(
        cfg, link, path, settings.persist, retries=retries, runner=runner and runner(path)
    )
    await master.serve(sock)


def _run_loop(coro: Any) -> None:
    try:
        import uvloop
    except ImportError:
        import asyncio

        asyncio.run(coro)
        return
    uvloop.run(coro)


def control_command(argv: Sequence[str]) -> int:
    """``sshpipe -O check|exit [-o ...] [-P port] [-l user] [user@]host``: ssh -O's answers.

    Raises:
        UsageError: bad words. ConnectError: no master answers (exit 5).
    """
    from ..transport.muxclient import request
    from .args import _Parser

    parser = _Parser(prog="sshpipe -O", description="Ask a connection-reuse master.")
    parser.add_argument("-O", dest="ctl", required=True, choices=("check", "exit"))
    parser.add_argument("-o", dest="options", action="append", default=[])
    parser.add_argument("-P", "-p", dest="port", type=int)
    parser.add_argument("-l", dest="user")
    # The other words a get/put takes, so the same options can be pasted: unused here.
    parser.add_argument("-i", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("-F", dest="ssh_config")
    parser.add_argument("-C", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("-c", help=argparse.SUPPRESS)
    parser.add_argument("destination", metavar="[user@]host")
    args = parser.parse_args(list(argv))
    user, host = parse_destination(args.destination)
    from ..transport.sshconfig import own_options

    # ssh_config's Control* for the host too, as the commands read them.
    from_file = own_options([args.ssh_config] if args.ssh_config else None, host, args.user or user)
    settings = control_settings(args.options, fallback=from_file)
    port = args.port
    for option in args.options:
        name, _, value = option.replace(" ", "=", 1).partition("=")
        if name.strip().lower() == "port":
            port = int(value)
        elif name.strip().lower() == "user":
            user = value.strip()
    if settings.path is not None and settings.path.lower() == "none":
        raise UsageError('-O needs a ControlPath (it is "none")')
    path = socket_path(settings, host, port, args.user or user, create=False)
    answer = request(path, {"op": args.ctl})
    if args.ctl == "check":
        print(f"Master running (pid={answer.get('pid')})", file=sys.stderr)
    else:
        print("Exit request sent.", file=sys.stderr)
    return 0
