"""What ``python -m sshpipe`` costs before it connects: what it runs and imports.

Checked in fresh interpreters: this test process imported everything long ago.
"""

from __future__ import annotations

import ctypes.util
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from sshpipe.transport import loading
from sshpipe.transport.loading import _needs_pyopenssl, in_library_path
from tests.support.fresh import run_fresh
from tests.support.peers import Peer


def test_loading_asyncssh_runs_no_compiler_or_linker(tmp_path: Path) -> None:
    """ctypes' search for liboqs ran gcc and ld in subprocesses: 40-60 ms a command.

    The command's own process (``main`` as ``run`` calls it) puts the quick
    import in force once the words name a command that connects; the entry's
    import alone (``sshpipe.__main__``, as the ``sshpipe`` script does) loads
    nothing of it, and the library never does."""
    result = run_fresh(f"""
        import ctypes.util, json, subprocess
        stock = ctypes.util.find_library
        ran = []
        popen_init = subprocess.Popen.__init__
        def recording(self, args, *rest, **kwargs):
            ran.append(args if isinstance(args, str) else " ".join(map(str, args)))
            popen_init(self, args, *rest, **kwargs)
        subprocess.Popen.__init__ = recording
        import sys
        import sshpipe.__main__  # the entry (not run: not __main__)
        entry = sorted(m for m in sys.modules if m.startswith(("asyncssh", "sshpipe.transport")))
        from sshpipe.cli.main import main
        code = main(["get", "-o", "ConnectTimeout=1", "-P", "1", "-F", "/dev/null",
                     "127.0.0.1:/nowhere", {str(tmp_path / "out")!r}], own_process=True)
        print(json.dumps({{"ran": ran, "restored": ctypes.util.find_library is stock,
                           "entry": entry, "code": code, "after": "asyncssh" in sys.modules}}))
    """)
    assert result["restored"] is True
    # The command line loads asyncssh only to connect: not for --version or
    # --help, nor a command run over a mux master (``transport.linkopen``),
    # which saves 0.2-0.3 s of its start-up.
    assert result["entry"] == []
    assert result["code"] == 5 and result["after"] is True  # it got to the connect
    ran = result["ran"]
    assert isinstance(ran, list)
    assert not [cmd for cmd in ran if "gcc" in cmd or cmd.split()[0].endswith(("ld", "cc"))], ran


def test_ldconfig_runs_only_for_a_library_the_loaders_cache_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``ldconfig -p`` is a process forked from this one: asked for nettle,
    not for liboqs (under either name), which the cache does not name."""
    cache = tmp_path / "ld.so.cache"
    cache.write_bytes(b"glibc-ld.so.cache1.1\0libnettle.so.8\0/usr/lib/libnettle.so.8\0")
    asked: list[str] = []

    def ldconfig(name: str) -> str | None:
        asked.append(name)
        return f"lib{name}.so.8" if name == "nettle" else None

    monkeypatch.setattr(ctypes.util, "_findSoname_ldconfig", ldconfig)
    read = loading._loader_cache
    monkeypatch.setattr(loading, "_loader_cache", lambda: read(str(cache)))
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    with loading._loader_search():
        found = [ctypes.util.find_library(name) for name in ("oqs", "liboqs", "nettle")]
    assert found == [None, None, "libnettle.so.8"]
    assert asked == ["nettle"]
    assert read(str(tmp_path / "none")) is None  # unread: ldconfig asked


def test_a_library_the_loader_would_find_is_found(tmp_path: Path) -> None:
    (tmp_path / "liboqs.so.5").write_bytes(b"")
    (tmp_path / "liboqsfoo.so").write_bytes(b"")
    assert in_library_path("oqs", f"/nonexistent:{tmp_path}") == "liboqs.so.5"
    assert in_library_path("nothing", str(tmp_path)) is None


def test_a_plain_get_loads_no_tree_hashing_emulator_or_test_server(tmp_path: Path) -> None:
    """The modules a single-file command imports, up to the connect (and a failed one)."""
    result = run_fresh(f"""
        import json, sys
        from sshpipe.cli.main import main
        code = main(["get", "-o", "ConnectTimeout=1", "-P", "1", "-F", "/dev/null",
                     "127.0.0.1:/nowhere", {str(tmp_path / "out")!r}])
        print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}))
    """)
    assert result["code"] != 0  # nobody listens on port 1: the command got to the connect
    modules = result["modules"]
    assert isinstance(modules, list)
    heavy = [
        m
        for m in modules
        if m.startswith(("sshpipe.tree", "sshpipe.testing.linkemu", "sshpipe.testing"))
        or m in ("sshpipe.transport.muxclient", "sshpipe.core.muxwire")  # no ControlPath
    ]
    assert heavy == []
    assert "sshpipe.durability.treejournal" not in modules


# What ``import sshpipe.cli.command`` (all a get or put imports before it connects)
# must not load: the parts only other commands or options use, and what only
# asyncssh needs (imported at the connect, not before: a mux command skips it).
NOT_BEFORE_THE_CONNECT = (
    "asyncssh",
    "cryptography",
    "rich",
    "fsspec",
    "sshpipe.tree",  # a tree or -p (its modules load at its start)
    "sshpipe.transport.muxclient",  # only with a ControlPath
    "sshpipe.core.muxwire",
    "sshpipe.cli.demo",
    "sshpipe.testing.linkemu",
    "sshpipe.testing",
    "sshpipe.fsspec",
    "sshpipe.durability.treejournal",
    # importlib.abc's and ctypes.util's: importlib.resources, tempfile, shutil,
    # bz2, lzma (4-5 ms of a command that needs none of them)
    "importlib.resources",
    "tempfile",
    "shutil",
    "ctypes",
)


def test_the_command_lines_imports_leave_out_what_a_get_or_put_does_not_use() -> None:
    result = run_fresh(f"""
        import json, sys
        import sshpipe.cli.main, sshpipe.cli.command
        print(json.dumps({{"loaded": sorted(
            m for m in sys.modules
            if m in {NOT_BEFORE_THE_CONNECT!r} or m.startswith({NOT_BEFORE_THE_CONNECT!r})
        )}}))
    """)
    assert result["loaded"] == []


def test_the_commands_start_imports_the_engine_without_a_warning(tmp_path: Path) -> None:
    """cryptography 51 warns about DSA as asyncssh 2.24 is imported: lines on every
    command's stderr (every CLI test that checks for a silent stderr failed). The
    command hides it in its own process (a worker's start does the same)."""
    done = subprocess.run(
        [sys.executable, "-W", "default", "-m", "sshpipe", "get", "-o", "ConnectTimeout=1",
         "-P", "1", "-F", "/dev/null", "127.0.0.1:/nowhere", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 5  # it got to the connect, so asyncssh was imported
    assert len(done.stderr.splitlines()) == 1 and "Deprecat" not in done.stderr, done.stderr


def test_a_library_import_leaves_asyncssh_to_load_stock() -> None:
    """An application's process is its own: no hook, no filter, asyncssh's own import
    (its X.509 module tried; cryptography's DSA warning, if any, the application's to filter)."""
    result = run_fresh("""
        import ctypes.util, json, sys, warnings
        filters, hooks, find = list(warnings.filters), list(sys.meta_path), ctypes.util.find_library
        import sshpipe.client.engine, sshpipe.transport.ssh
        print(json.dumps({
            "same": (warnings.filters, sys.meta_path) == (filters, hooks)
            and ctypes.util.find_library is find,
            "x509_loaded": "cryptography.x509" in sys.modules,
        }))
    """)
    assert result["same"] is True
    assert result["x509_loaded"] is True  # asyncssh's stock import tried its X.509 module


def test_the_command_starts_without_the_collector_and_resumes_it_once_connected(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """Paused from the entry point's import to the connection (cli/collector.py), then
    everything built so far frozen and the collector back on for the transfer."""
    (openssh_peer.root / "src.bin").write_bytes(b"s" * 70_000)
    argv = ["get", "-q", *openssh_peer.cli_options(), openssh_peer.spec("src.bin"),
            str(tmp_path / "got.bin")]  # fmt: skip
    result = run_fresh(f"""
        import gc, json
        import sshpipe.__main__  # the entry the sshpipe command imports (not run: not __main__)
        paused = not gc.isenabled()
        from sshpipe.client.client import Client
        from sshpipe.cli.main import main
        during = {{}}
        stock_get = Client.get
        async def get(self, *args, **kwargs):
            during.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count())
            return await stock_get(self, *args, **kwargs)
        Client.get = get
        code = main({argv!r})
        print(json.dumps({{"paused": paused, "code": code, **during}}))
    """)
    assert result["paused"] is True
    assert result["code"] == 0
    assert result["enabled"] is True
    assert result["frozen"] > 30_000  # sshpipe's, asyncssh's and cryptography's objects
    assert (tmp_path / "got.bin").read_bytes() == b"s" * 70_000


def test_the_library_leaves_the_collector_alone(openssh_peer: Peer, tmp_path: Path) -> None:
    """Freezing is the command's choice for its own process, never an importer's; an
    application calling ``main`` (no entry point) is not frozen either."""
    (openssh_peer.root / "src.bin").write_bytes(b"t" * 1000)
    argv = ["get", "-q", *openssh_peer.cli_options(), openssh_peer.spec("src.bin"),
            str(tmp_path / "got.bin")]  # fmt: skip
    result = run_fresh(f"""
        import gc, json
        import sshpipe
        sshpipe.connect, sshpipe.Client
        imported = (gc.isenabled(), gc.get_freeze_count())
        from sshpipe.cli.main import main
        code = main({argv!r})
        print(json.dumps({{"imported": imported, "code": code,
                           "after": (gc.isenabled(), gc.get_freeze_count())}}))
    """)
    assert result["imported"] == [True, 0]
    assert result["code"] == 0
    assert result["after"] == [True, 0]


# asyncssh imported as a command that connects imports it (``main``, its own process).
COMMANDS_IMPORT = (
    "from sshpipe.transport.loading import quick_asyncssh_import; "
    "quick_asyncssh_import(); import sshpipe.transport.ssh"
)


def test_asyncssh_loads_without_the_x509_module_it_could_not_use() -> None:
    """Without pyOpenSSL asyncssh's X.509 support is off: its module is not tried (and
    cryptography's X.509 package not loaded), and asyncssh says the same as when it is."""
    probe = """
        import json, sys, warnings
        warnings.simplefilter("ignore")
        {load}
        import asyncssh.public_key as public_key
        print(json.dumps({{
            "available": public_key._x509_available,
            "algs": [alg.decode() for alg in public_key.get_x509_certificate_algs()],
            "x509_loaded": "cryptography.x509" in sys.modules,
            "marker_left": "asyncssh.crypto.x509" in sys.modules,
        }}))
    """
    ours = run_fresh(probe.format(load=COMMANDS_IMPORT))
    stock = run_fresh(probe.format(load="import asyncssh"))
    assert (ours["available"], ours["algs"]) == (stock["available"], stock["algs"])
    assert ours["x509_loaded"] is False and ours["marker_left"] is False
    assert stock["x509_loaded"] is True  # what the skip saves


def test_the_x509_skip_rests_on_what_the_installed_asyncssh_does() -> None:
    """Canary: asyncssh's X.509 module imports pyOpenSSL, which is not installed. When
    either changes, re-read ``loading._without_dead_x509`` before changing this test."""
    spec = importlib.util.find_spec("asyncssh")
    assert spec is not None and spec.origin is not None
    module = Path(spec.origin).parent / "crypto" / "x509.py"
    assert _needs_pyopenssl(str(module))
    assert importlib.util.find_spec("OpenSSL") is None


def test_with_pyopenssl_there_asyncssh_tries_its_x509_module(tmp_path: Path) -> None:
    (tmp_path / "OpenSSL").mkdir()
    (tmp_path / "OpenSSL" / "__init__.py").write_text("")  # no ``crypto``: it still fails
    result = run_fresh(f"""
        import json, sys, warnings
        warnings.simplefilter("ignore")
        sys.path.insert(0, {str(tmp_path)!r})
        {COMMANDS_IMPORT}
        print(json.dumps({{"x509_loaded": "cryptography.x509" in sys.modules}}))
    """)
    assert result["x509_loaded"] is True
