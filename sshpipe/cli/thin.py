"""A later get or put run by the mux master, this process a thin client of it.

With a master answering at the ControlPath, the command's own process loads
no engine (no asyncssh, no transfer code): it sends the master its words,
the master (already warm, its connection logged in) runs the transfer, and
this process prints what the master's run printed and exits with its exit
code. The master opens the local names in this process's working directory
(``/proc/PID/cwd`` of the peer SO_PEERCRED names, held as a directory fd,
``thinserve``). A Ctrl-C here is an "interrupt" line to the master, which
cancels the transfer (its temporary file removed) and answers 130.

Anything this path does not carry runs as before, in this process, never an
error: a verb but get or put, a progress display (a terminal), ``-v``, a
local name that is not a plain file or directory (``-``, a pipe, a device),
no master, or a master that does not know "run" (an older one).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import struct
import sys

from ..core.errors import ConnectionBroken
from ..transport.sshconfig import own_options
from .controlpath import control_settings, socket_path
from .output import show_progress
from .settings import ssh_kwargs
from .targets import parse_remote

# Not typing's: the thin path loads as little as it can.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from ..core.control import ControlSettings

__all__ = ["master_path", "thin_command"]

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
# The master left mid-command without an answer.
_GONE = (-1, b"", b"")
# The master answers a connect at once when it serves: past this, run here.
_CONNECT_TIMEOUT = 1.0


def thin_command(words: Sequence[str], args: argparse.Namespace) -> int | None:
    """The exit code of ``args`` run by the master at the ControlPath; None: run it here.

    Raises:
        UsageError, LocalError: the ControlPath's words or directory (as the
            direct path says them). ConnectionBroken: the master went away
            while it ran the command.
    """
    if args.command not in ("get", "put") or args.verbose or show_progress(args):
        return None
    local = [args.target] if args.command == "get" else args.sources
    if not all(_plain(name) for name in local):
        return None
    found = master_path(args)
    if found is None:
        return None
    sock = _connect(found[1])
    if sock is None:
        return None
    with sock:
        ran = _ask(sock, {"op": "run", "argv": list(words)})
    if ran is None:
        return None  # an older master, or one that would not: run it here
    if ran == _GONE:
        # As a command whose master dies mid-copy: on directly, no new master.
        args.master_gone = True
        return None
    code, out, err = ran
    # Printed by our own output code in the master: escaped already.
    for text, stream in ((out, sys.stdout), (err, sys.stderr)):
        if text:
            stream.flush()
            stream.buffer.write(text)
            stream.buffer.flush()
    return code


def master_path(args: argparse.Namespace) -> tuple[ControlSettings, str] | None:
    """A get's or put's Control* settings and socket path; None: no master wanted.

    ControlMaster, ControlPath and ControlPersist: ``-o`` first, then
    ssh_config's for the host, as ssh.
    """
    spec = parse_remote(args.sources[0] if args.command == "get" else args.target)
    if spec is None:
        return None  # the command says what is wrong with it
    kwargs = ssh_kwargs(args, spec)
    from_file = own_options(kwargs.get("ssh_config"), spec.host, kwargs.get("username"))
    settings = control_settings(args.options, fallback=from_file)
    if not settings.enabled:
        return None
    return settings, socket_path(settings, spec.host, kwargs.get("port"), kwargs.get("username"))


def _plain(name: str) -> bool:
    """A regular file, a directory, or nothing yet: what the master may open for us."""
    # /dev/stdout and its kin name this process's own files: the master's are others.
    if name == "-" or os.path.abspath(name).startswith(("/dev/", "/proc/")):
        return False
    try:
        mode = os.stat(name).st_mode
    except OSError:
        return True  # not there (a get's new file; a put's missing source says so)
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def _connect(path: str) -> socket.socket | None:
    """A connection to a master of our own uid at ``path``, or None."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(_CONNECT_TIMEOUT)
        sock.connect(path)
        _, uid, _ = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))
        if uid != os.getuid():
            sock.close()
            return None
    except OSError:
        sock.close()
        return None
    return sock


def _ask(sock: socket.socket, header: dict[str, object]) -> tuple[int, bytes, bytes] | None:
    """Send the command, relay Ctrl-C; the exit code, stdout and stderr.

    The answer is a header line ``{"ok": true, "code": N, "out": n, "err": m}``,
    then n bytes of stdout and m of stderr (a tree's failures may be long).

    Returns:
        None when the master refused; ``_GONE`` when it left without an
        answer (its SSH connection died: it cancelled the run, temporary
        files removed): the command then runs here, as a direct one reconnects.

    Raises:
        KeyboardInterrupt: the master left after our Ctrl-C.
        ConnectionBroken: its answer was cut short or not one we read.
    """
    # Here: ``command`` imports ``master_path`` from this module, and a command
    # with no ControlPath loads no mux code (tests/integration/connect/test_startup.py).
    from ..core.muxwire import MuxWireError, encode_header, split_header

    try:
        sock.sendall(encode_header(header))
    except OSError:
        return None
    sock.settimeout(None)  # a transfer takes as long as it takes

    interrupts = []

    def interrupted(signum: int, frame: object) -> None:
        # To the master, which cancels the transfer and answers 130.
        interrupts.append(signum)
        with contextlib.suppress(OSError):
            sock.sendall(b'{"op":"interrupt"}\n')

    previous = signal.signal(signal.SIGINT, interrupted)
    buffer = b""
    try:
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""  # reset: as gone
            if not chunk and interrupts:
                raise KeyboardInterrupt
            if not chunk and split_header(buffer) is None:
                return _GONE
            if not chunk:
                raise ConnectionBroken("connection lost: the mux master's answer was cut short")
            buffer += chunk
            try:
                parsed = split_header(buffer)
            except MuxWireError as exc:
                raise ConnectionBroken(f"the mux master's answer: {exc}") from exc
            if parsed is None:
                continue
            answer, rest = parsed
            if not answer.get("ok"):
                return None
            try:
                code, out, err = int(answer["code"]), int(answer["out"]), int(answer["err"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ConnectionBroken(f"the mux master's answer: {exc}") from exc
            if len(rest) >= out + err:
                return code, rest[:out], rest[out : out + err]
    finally:
        signal.signal(signal.SIGINT, previous)
