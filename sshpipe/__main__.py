"""``python -m sshpipe`` and the ``sshpipe`` command (``run``)."""

from __future__ import annotations

from .cli import collector

collector.pause()  # until the command's connection is up (cli/collector.py)

from .cli.main import run  # noqa: E402

if __name__ == "__main__":
    run()
