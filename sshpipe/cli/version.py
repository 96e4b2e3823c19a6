"""``--version``'s line: sshpipe's, Python's and asyncssh's versions, found without imports.

``sshpipe --version`` is answered from this module alone (``main``): no
argparse, no importlib.metadata, nothing of the engine.
"""

from __future__ import annotations

import contextlib
import os
import sys

from .. import __version__

__all__ = ["version_line"]


def version_line() -> str:
    """``sshpipe 0.1.0 (Python 3.11.9, asyncssh 2.24.1)``: what a bug report needs first."""
    python = ".".join(str(part) for part in sys.version_info[:3])
    return f"sshpipe {__version__} (Python {python}, asyncssh {_installed_version('asyncssh')})"


def _installed_version(name: str) -> str:
    """The version of the distribution ``name`` installed first on ``sys.path``.

    Read from its ``.dist-info`` directory's METADATA, where importlib.metadata
    reads it, without importing importlib.metadata (email, zipfile, csv:
    20-60 ms, most of ``--version``'s time); that answers what it finds
    elsewhere (an egg, a zip).
    """
    prefix = f"{name}-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # not a directory (a zip) or gone
            continue
        for found in names:
            if found.lower().startswith(prefix) and found.endswith(".dist-info"):
                with contextlib.suppress(OSError, UnicodeDecodeError):
                    return _metadata_version(os.path.join(entry, found, "METADATA"))
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:  # run from a source tree beside an unpackaged asyncssh
        return "unknown"


def _metadata_version(path: str) -> str:
    """The ``Version:`` of a METADATA file (its headers come first: email's format)."""
    with open(path, encoding="utf-8") as metadata:
        for line in metadata:
            if line.startswith("Version:"):
                return line.partition(":")[2].strip()
            if not line.strip():  # the headers end
                break
    raise OSError(f"{path}: no Version")
