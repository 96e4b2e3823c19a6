"""``python -m sshpipe``: running a command, its exit code, Ctrl-C.

Every failure is one line on stderr and a non-zero exit code taken from the
exception tree (see ``_errors.py``); set ``SSHPIPE_DEBUG=1`` for tracebacks.
The words are parsed in ``args``; what is printed, escaped, in ``output``; a
command that connects runs in ``command`` (Ctrl-C, uvloop). This module loads
only what reading the words needs: ``--version``, ``--help``, a usage error
and a typo's suggestion answer without the engine, asyncssh or rich
(``tests/layout/test_instant_commands.py``).
"""

from __future__ import annotations

import atexit
import os
import sys

from ..core.errors import SSHPipeError
from .output import EXIT_INTERNAL, EXIT_INTERRUPTED, TERMINAL, failed, say
from .version import version_line

# Not typing's: ``sshpipe --version`` loads no typing (re, enum) for annotations.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import NoReturn


def main(argv: Sequence[str] | None = None, *, own_process: bool = False) -> int:
    """Entry point of ``python -m sshpipe``; returns the exit code.

    Args:
        argv: the words (``sys.argv[1:]`` by default).
        own_process: this process is the command's own (``run``), not an
            application's that calls ``main``: asyncssh, when the connect
            imports it, loads the quick way and quietly (``transport.loading``).
    """
    # SSHPIPE_DEBUG=1: tracebacks, and sshpipe's own debug log (as -vv);
    # =asyncssh adds asyncssh's (as -vvv). Neither logs secrets or payload.
    debug = os.environ.get("SSHPIPE_DEBUG", "")
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        if words[:1] == ["--version"]:
            # argparse's answer without argparse, re or typing: with them it took
            # twice as long as Python's own start.
            print(version_line())
            return 0
        # What reads the words, and then what runs the command: --version above,
        # and --help and a usage error in ``parse_args``, need none of the latter.
        from .args import parse_args
        from .words import wants_control_command

        control = wants_control_command(words)
        args = None if control else parse_args(words)
        if args is not None and own_process and not debug:
            from .thin import thin_command

            # A master at the ControlPath runs the get or put itself: this
            # process loads no engine (``thin``); None: it runs it here.
            code = thin_command(words, args)
            if code is not None:
                return code
        from ..transport.loading import quick_asyncssh_import
        from .verbosity import set_verbosity

        if own_process:
            quick_asyncssh_import()
        if args is None:
            from .control import control_command

            set_verbosity(0, debug=debug)
            return control_command(words)
        set_verbosity(getattr(args, "verbose", 0), quiet=getattr(args, "quiet", False), debug=debug)
        from .command import execute

        return execute(args)
    except SSHPipeError as exc:
        if debug:
            raise
        return failed(exc)
    except KeyboardInterrupt:
        TERMINAL.end()
        say("interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # never a traceback for a user; say what broke
        if debug:
            raise
        say(f"internal error: {type(exc).__name__}: {exc} (set SSHPIPE_DEBUG=1 for details)")
        return EXIT_INTERNAL


def run() -> NoReturn:
    """``python -m sshpipe`` and the ``sshpipe`` command: ``main()``, then a quick exit.

    The exit handlers run and the streams are flushed, but the interpreter is
    not torn down: the modules' teardown and the last garbage collection of
    asyncssh's and cryptography's objects took 0.15 s of an empty file's
    0.7 s get on loopback.
    """
    code = main(own_process=True)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed or broken pipe: sys.exit would say 120
        code = code or 120
    os._exit(code)
