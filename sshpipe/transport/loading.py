"""asyncssh loaded without ctypes' slow library search (``load_asyncssh``), when first needed.

On import, asyncssh's post-quantum key exchange looks for liboqs twice with
``ctypes.util.find_library``. On Linux that runs ``ldconfig -p`` and then,
for a library that is not there (it rarely is), ``gcc`` and ``ld`` in
subprocesses of their own: 40-60 ms of every command on a machine with a
compiler. While asyncssh is imported, a library is looked for where the
dynamic loader will look for it: ld.so's cache (``ldconfig -p``, which
``find_library`` reads first) and ``LD_LIBRARY_PATH``. What a compiler alone
would find (``LIBRARY_PATH``, its own directories) the loader would not load.

``load_on_first_import`` puts that search in force for whichever module
imports asyncssh first, and imports nothing itself: a command that runs over
a mux master (``muxclient``) never needs asyncssh, and does not pay the
0.2-0.3 s of importing it and cryptography.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType


def load_asyncssh() -> None:
    """Import asyncssh (once per process) with the loader's own library search."""
    if "asyncssh" in sys.modules:
        return
    with _loader_search():
        import asyncssh  # noqa: F401


@contextlib.contextmanager
def _loader_search() -> Iterator[None]:
    # Here, not at the top: ctypes.util brings shutil, tempfile, bz2 and lzma
    # (4-5 ms), which a command over a mux master, never loading asyncssh, skips.
    import ctypes.util

    cached: Callable[[str], str | None] | None = getattr(ctypes.util, "_findSoname_ldconfig", None)
    if not sys.platform.startswith("linux") or cached is None:
        yield
        return
    stock = ctypes.util.find_library

    def find_library(name: str) -> str | None:
        return cached(name) or in_library_path(name)

    ctypes.util.find_library = find_library
    try:
        yield
    finally:
        ctypes.util.find_library = stock


class _FirstImport:
    """Finds asyncssh once, for ``import asyncssh`` wherever it is, and runs it under
    ``_loader_search``; then leaves ``sys.meta_path``.

    A finder by its ``find_spec`` alone: ``importlib.abc`` as its base would
    bring importlib.resources, tempfile, shutil, bz2 and lzma to every command.
    """

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "asyncssh":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        stock = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            with _loader_search():
                stock(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def load_on_first_import() -> None:
    """Have asyncssh, when something first imports it, load with ``_loader_search``."""
    if "asyncssh" not in sys.modules and not any(
        isinstance(finder, _FirstImport) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _FirstImport())


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
