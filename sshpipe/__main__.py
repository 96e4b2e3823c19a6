"""``python -m sshpipe`` and the ``sshpipe`` command (``run``)."""

from __future__ import annotations

from .cli import collector
from .transport.loading import quick_asyncssh_import

collector.pause()  # until the command's connection is up (cli/collector.py)
# The command's own process, so its own choice (never the library's, on import):
# asyncssh, when the connect imports it, loads quickly and without its warning.
quick_asyncssh_import()

from .cli.main import run  # noqa: E402

if __name__ == "__main__":
    run()
