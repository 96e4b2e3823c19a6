"""``python -m sshpipe``."""

from __future__ import annotations

from .cli.main import run

run()
