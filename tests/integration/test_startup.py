"""What ``python -m sshpipe`` costs before it connects: what it runs and imports.

Checked in fresh interpreters: this test process imported everything long ago.
"""

from __future__ import annotations

from pathlib import Path

from sshpipe.transport.loading import in_library_path
from tests.support.fresh import run_fresh


def test_loading_asyncssh_runs_no_compiler_or_linker() -> None:
    """ctypes' search for liboqs ran gcc and ld in subprocesses: 40-60 ms a command."""
    result = run_fresh("""
        import ctypes.util, json, subprocess
        stock = ctypes.util.find_library
        ran = []
        popen_init = subprocess.Popen.__init__
        def recording(self, args, *rest, **kwargs):
            ran.append(args if isinstance(args, str) else " ".join(map(str, args)))
            popen_init(self, args, *rest, **kwargs)
        subprocess.Popen.__init__ = recording
        import sys
        import sshpipe.cli.main
        before = "asyncssh" in sys.modules
        import sshpipe.transport.ssh
        print(json.dumps({"ran": ran, "restored": ctypes.util.find_library is stock,
                          "before": before, "after": "asyncssh" in sys.modules}))
    """)
    assert result["restored"] is True
    # The command line loads asyncssh only to connect: not a command run over a
    # mux master (``transport.linkopen``), which saves 0.2-0.3 s of its start-up.
    assert (result["before"], result["after"]) == (False, True)
    ran = result["ran"]
    assert isinstance(ran, list)
    assert not [cmd for cmd in ran if "gcc" in cmd or cmd.split()[0].endswith(("ld", "cc"))], ran


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
        if m.startswith(("sshpipe.tree.", "sshpipe.linkemu", "sshpipe.testing"))
        and m != "sshpipe.tree.item"
    ]
    assert heavy == []
    assert "sshpipe.durability.treejournal" not in modules
