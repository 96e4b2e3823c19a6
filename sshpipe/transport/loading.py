"""asyncssh loaded without ctypes' slow library search (``load_asyncssh``), when first needed.

On import, asyncssh's post-quantum key exchange looks for liboqs twice with
``ctypes.util.find_library``. On Linux that runs ``ldconfig -p`` and then,
for a library that is not there (it rarely is), ``gcc`` and ``ld`` in
subprocesses of their own: 40-60 ms of every command on a machine with a
compiler. While asyncssh is imported, a library is looked for where the
dynamic loader will look for it: ld.so's cache (``ldconfig -p``, which
``find_library`` reads first) and ``LD_LIBRARY_PATH``. What a compiler alone
would find (``LIBRARY_PATH``, its own directories) the loader would not load.
And ``ldconfig -p`` runs only for a library ld.so's cache file names: of the
three asyncssh asks for, liboqs (twice) is rarely there.

asyncssh's X.509 certificate support (PKIX-SSH's ``x509v3-*`` keys; OpenSSH
has none) imports cryptography's X.509 package and then pyOpenSSL, and is off
where pyOpenSSL is not installed (sshpipe does not require it): the X.509
package (and the email package it brings) was loaded for nothing, 15-20 ms of
every command. Where the module would fail so, it is not tried
(``_without_dead_x509``): the same outcome as asyncssh's, sooner.

``quick_asyncssh_import`` puts both in force for whichever module imports
asyncssh first, and imports nothing itself: a command that runs over a mux
master (``muxclient``) never needs asyncssh, and does not pay the 0.2-0.3 s
of importing it and cryptography. It also hides cryptography's DSA
deprecation warning, which asyncssh's import sets off. It is for sshpipe's
own processes alone: the command line (``cli.main``, once the words name a
command to run: not for --version or --help) and its workers' start
(``workers.child``) call it before anything imports asyncssh. A
library changes nothing in its host process on import: an application that
imports sshpipe gets asyncssh's stock import (and the warning, in its own
process, to filter as it likes).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

# asyncssh's X.509 module, and what in it says it needs pyOpenSSL (2.24.1 and older).
_X509 = "asyncssh.crypto.x509"
_NEEDS_PYOPENSSL = "from OpenSSL import"
# glibc's ld.so cache, which ``ldconfig -p`` prints (its path is glibc's build
# default; elsewhere the file is missing and ldconfig is asked as before).
LOADER_CACHE = "/etc/ld.so.cache"


def load_asyncssh() -> None:
    """Import asyncssh (once per process) the quick way (``_loading``)."""
    if "asyncssh" in sys.modules:
        return
    spec = importlib.util.find_spec("asyncssh")
    with _loading(spec.origin if spec is not None else None):
        import asyncssh  # noqa: F401


@contextlib.contextmanager
def _loading(origin: str | None) -> Iterator[None]:
    """asyncssh's import (its ``__init__`` at ``origin``): the loader's library search,
    no X.509 module that cannot load."""
    with _loader_search(), _without_dead_x509(origin):
        yield


@contextlib.contextmanager
def _without_dead_x509(origin: str | None) -> Iterator[None]:
    """asyncssh's X.509 module refused at once where pyOpenSSL, which it needs, is missing.

    asyncssh takes the ImportError as "no X.509 support", as it takes
    pyOpenSSL's. Nothing is done where the module is not the one read here
    (it does not import pyOpenSSL), or pyOpenSSL is there.
    """
    if (
        origin is None
        or _X509 in sys.modules
        or not _needs_pyopenssl(os.path.join(os.path.dirname(origin), "crypto", "x509.py"))
        or importlib.util.find_spec("OpenSSL") is not None
    ):
        yield
        return
    sys.modules[_X509] = None  # type: ignore[assignment]  # import raises ImportError
    try:
        yield
    finally:
        if _X509 in sys.modules and sys.modules[_X509] is None:
            del sys.modules[_X509]  # as if it had been tried and failed


def _needs_pyopenssl(path: str) -> bool:
    try:
        with open(path, encoding="utf-8") as source:
            return _NEEDS_PYOPENSSL in source.read()
    except (OSError, UnicodeDecodeError):
        return False


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
    listed = _loader_cache()

    def find_library(name: str) -> str | None:
        # ``ldconfig -p`` (a process, forked from this large one: 2-6 ms) only
        # where ld.so's cache names the library: asyncssh asks for three, and
        # liboqs, asked twice, is rarely there.
        in_cache = listed is None or f"lib{name}.".encode() in listed
        return (cached(name) if in_cache else None) or in_library_path(name)

    ctypes.util.find_library = find_library
    try:
        yield
    finally:
        ctypes.util.find_library = stock


def _loader_cache(path: str = LOADER_CACHE) -> bytes | None:
    """ld.so's cache as bytes (what ``ldconfig -p`` lists), or None where it cannot be read.

    Every library it lists is named in it as ``lib<name>.so...``: a name not in
    its bytes is not in ``ldconfig -p``'s list.
    """
    try:
        with open(path, "rb") as cache:
            return cache.read()
    except OSError:
        return None


class _FirstImport:
    """Finds asyncssh once, for ``import asyncssh`` wherever it is, and runs it under
    ``_loading``; then leaves ``sys.meta_path``.

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
            with _loading(spec.origin):
                stock(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def quick_asyncssh_import() -> None:
    """Have asyncssh, when something first imports it, load the quick way (``_loading``)
    and quietly (no DSA deprecation warning from its modules).

    For sshpipe's own processes only (the command line, its workers), called at
    their start; twice is fine. Never called on import.
    """
    # cryptography 51 warns that DSA is deprecated whenever asyncssh (2.24.1 and
    # older) names its DSA classes, which it does as it is imported: lines on
    # every command's stderr about a key type nobody chose. That warning alone,
    # from asyncssh's own modules alone, is not shown (an identical filter set
    # again replaces the first: no duplicate).
    warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh\.")
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
