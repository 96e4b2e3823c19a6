"""``python -m sshpipe`` and the ``sshpipe`` command (``run``).

The command's own process, so its own choices (never the library's, on
import): the collector paused until the connection is up, and asyncssh, when
the connect imports it, loaded quickly and without its warning (``run`` puts
that in force once the words name a command that connects: ``--version`` and
``--help`` load nothing of the engine).
"""

from __future__ import annotations

from .cli import collector

collector.pause()  # until the command's connection is up (cli/collector.py)

from .cli.main import run  # noqa: E402

if __name__ == "__main__":
    run()
