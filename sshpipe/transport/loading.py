"""asyncssh loaded without ctypes' slow library search (``load_asyncssh``).

On import, asyncssh's post-quantum key exchange looks for liboqs twice with
``ctypes.util.find_library``. On Linux that runs ``ldconfig -p`` and then,
for a library that is not there (it rarely is), ``gcc`` and ``ld`` in
subprocesses of their own: 40-60 ms of every command on a machine with a
compiler. While asyncssh is imported, a library is looked for where the
dynamic loader will look for it: ld.so's cache (``ldconfig -p``, which
``find_library`` reads first) and ``LD_LIBRARY_PATH``. What a compiler alone
would find (``LIBRARY_PATH``, its own directories) the loader would not load.
"""

from __future__ import annotations

import ctypes.util
import os
import re
import sys
from collections.abc import Callable


def load_asyncssh() -> None:
    """Import asyncssh (once per process) with the loader's own library search."""
    if "asyncssh" in sys.modules:
        return
    cached: Callable[[str], str | None] | None = getattr(ctypes.util, "_findSoname_ldconfig", None)
    if not sys.platform.startswith("linux") or cached is None:
        import asyncssh

        return
    stock = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        return cached(name) or in_library_path(name)

    ctypes.util.find_library = find_library
    try:
        import asyncssh  # noqa: F401
    finally:
        ctypes.util.find_library = stock


def in_library_path(name: str, path: str | None = None) -> str | None:
    """``lib<name>.so[.N]`` in a directory of ``LD_LIBRARY_PATH`` (or ``path``), if any."""
    pattern = re.compile(rf"lib{re.escape(name)}\.so(\.[0-9.]+)?$")
    for directory in (path if path is not None else os.environ.get("LD_LIBRARY_PATH", "")).split(
        ":"
    ):
        try:
            names = sorted(os.listdir(directory or "."))
        except OSError:
            continue
        for found in names:
            if pattern.match(found):
                return found
    return None
