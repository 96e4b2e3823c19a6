"""The pure core does no I/O and imports no event loop; the package does nothing on import.

Checked in a fresh interpreter, since this test process has long since imported
asyncio, asyncssh and sshpipe.
"""

from __future__ import annotations

from pathlib import Path

import sshpipe
from tests.support.fresh import run_fresh

PACKAGE_DIR = Path(sshpipe.__file__).parent
# Everything under core/ (the shared vocabulary, errors, stats, config, included),
# found on disk rather than kept by hand.
CORE = [
    "sshpipe.core",
    *sorted(f"sshpipe.core.{p.stem}" for p in (PACKAGE_DIR / "core").glob("[!_]*.py")),
]
FORBIDDEN = ["asyncio", "asyncssh", "uvloop"]


def test_fresh_interpreter_starts_clean() -> None:
    """Guard for the tests below: the bare interpreter loads none of the modules."""
    result = run_fresh(f"""
        import json, sys
        print(json.dumps({{"loaded": [m for m in {FORBIDDEN!r} if m in sys.modules]}}))
    """)
    assert result["loaded"] == []


def test_core_modules_import_nothing_but_the_stdlib() -> None:
    """The core modules themselves, without running ``sshpipe/__init__.py``.

    A bare package object stands in for ``sshpipe`` so only the modules' own
    imports run. Every module they load must be from the standard library.
    """
    result = run_fresh(f"""
        import json, sys, types
        before = set(sys.modules)
        package = types.ModuleType("sshpipe")
        package.__path__ = [{str(PACKAGE_DIR)!r}]
        sys.modules["sshpipe"] = package
        import importlib
        for name in {CORE!r}:
            importlib.import_module(name)
        new = sorted(set(sys.modules) - before)
        print(json.dumps({{
            "forbidden": [m for m in {FORBIDDEN!r} if m in sys.modules],
            "sshpipe": [m for m in new if m.startswith("sshpipe")],
            "non_stdlib": [
                m for m in new
                if not m.startswith("sshpipe")
                and m.partition(".")[0] not in sys.stdlib_module_names
            ],
        }}))
    """)
    assert result["forbidden"] == []
    assert sorted(result["sshpipe"]) == sorted(["sshpipe", *CORE])  # no other sshpipe module
    assert result["non_stdlib"] == []


def test_importing_the_core_loads_no_asyncio_or_asyncssh() -> None:
    result = run_fresh(f"""
        import json, sys
        import {", ".join(CORE)}
        print(json.dumps({{"loaded": [m for m in ("asyncio", "asyncssh") if m in sys.modules]}}))
    """)
    assert result["loaded"] == []


def test_import_sshpipe_does_nothing() -> None:
    """No uvloop (only the command line loads it), no loop policy, threads or logging set up."""
    result = run_fresh("""
        import asyncio, json, logging, sys, threading
        policy = type(asyncio.get_event_loop_policy())
        root_handlers = list(logging.getLogger().handlers)
        root_level = logging.getLogger().level
        threads = threading.active_count()
        import sshpipe
        print(json.dumps({
            "uvloop": "uvloop" in sys.modules,
            "policy_changed": type(asyncio.get_event_loop_policy()) is not policy,
            "root_handlers_changed": logging.getLogger().handlers != root_handlers,
            "root_level_changed": logging.getLogger().level != root_level,
            "new_threads": threading.active_count() - threads,
        }))
    """)
    assert result == {
        "uvloop": False,
        "policy_changed": False,
        "root_handlers_changed": False,
        "root_level_changed": False,
        "new_threads": 0,
    }


def test_importing_the_library_changes_nothing_in_its_host_process() -> None:
    """No import hook, no warnings filter, no ctypes swapped, no module marked missing:
    the command line's quick asyncssh import is its own process's (``cli.main``)."""
    result = run_fresh("""
        import ctypes.util, json, sys, warnings
        m = list(sys.meta_path); f = list(warnings.filters); find = ctypes.util.find_library
        import sshpipe, sshpipe.fsspec, sshpipe.transport, sshpipe.client.engine
        assert sys.meta_path == m and warnings.filters == f
        import sshpipe.transport.ssh  # asyncssh itself, as the engine's first connect imports it
        print(json.dumps({
            "meta_path": sys.meta_path == m,
            "filters": warnings.filters == f,
            "find_library": ctypes.util.find_library is find,
            "x509_none": "asyncssh.crypto.x509" in sys.modules
            and sys.modules["asyncssh.crypto.x509"] is None,
            "asyncssh": "asyncssh" in sys.modules,
        }))
    """)
    assert result == {
        "meta_path": True,
        "filters": True,
        "find_library": True,
        "x509_none": False,
        "asyncssh": True,
    }
