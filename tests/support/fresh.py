"""Code run in a fresh interpreter: this test process imported everything long ago."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

__all__ = ["run_fresh"]


def run_fresh(code: str) -> dict[str, Any]:
    """Run ``code`` in a new interpreter; it prints one JSON object as its last line."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
