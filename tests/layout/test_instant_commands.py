"""What answers at once loads nothing it does not use: ``import sshpipe``, ``--version``,
``--help``, a usage error, a typo's suggestion.

Each in a fresh interpreter (this one imported everything long ago), through the
command's entry (``sshpipe.__main__``) and ``main``, as ``python -m sshpipe`` runs it.
"""

from __future__ import annotations

import pytest

from tests.support.fresh import run_fresh

# The engine and what only a connection needs: 0.1-0.3 s of a start that prints a line.
ENGINE = (
    "asyncssh",
    "cryptography",
    "rich",
    "uvloop",
    "sshpipe.client",
    "sshpipe.transport",
    "sshpipe.transfer",
    "sshpipe.tree",
    "sshpipe.workers",
    "sshpipe.durability",
    "sshpipe.fsspec",
    "sshpipe.testing",
    "asyncio",
)


def _loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if m in prefixes or m.startswith(tuple(f"{p}." for p in prefixes))]


def _command(words: list[str]) -> dict[str, object]:
    """``main(words)`` in a fresh interpreter: its exit code and the modules it loaded
    (not those the interpreter's start had: a development install's path hook's)."""
    return run_fresh(f"""
        import sys
        before = set(sys.modules)
        import sshpipe.__main__  # the entry (not run: not __main__)
        from sshpipe.cli.main import main
        try:
            code = main({words!r})
        except SystemExit as exc:  # argparse's --help
            code = exc.code
        modules = sorted(set(sys.modules) - before)
        import json
        print()
        print(json.dumps({{"code": code, "modules": modules}}))
    """)


@pytest.mark.parametrize(
    ("words", "code"),
    [
        (["--version"], 0),
        (["--help"], 0),
        (["get", "--help"], 0),
        (["put", "--help"], 0),
        (["clean", "--help"], 0),
        (["demo", "--help"], 0),
        (["serve", "--help"], 0),
        (["get", "host:only-a-source"], 2),  # a usage error: LOCAL missing
        (["gte", "host:f", "."], 2),  # unknown command 'gte' (did you mean get?)
        (["get", "--verfy", "host:f", "."], 2),  # unknown option --verfy (did you mean ...)
        (["-P", "2222", "--verfy", "get", "host:f", "."], 2),  # options before the verb
    ],
)
def test_an_answer_without_a_connection_loads_no_engine(words: list[str], code: int) -> None:
    result = _command(words)
    assert result["code"] == code
    modules = result["modules"]
    assert isinstance(modules, list)
    assert _loaded(modules, ENGINE) == []
    # The configs' dataclasses are not needed to print the defaults (core.defaults),
    # nor shutil (bz2, lzma) for the terminal's width (args._columns).
    assert _loaded(modules, ("sshpipe.core.config", "sshpipe.core.stats", "dataclasses")) == []
    assert _loaded(modules, ("shutil", "bz2", "lzma")) == []


def test_the_version_is_printed_without_argparse_or_typing() -> None:
    """Half of ``--version``'s time went to argparse, typing and importlib.metadata.

    (re is loaded at start by a development install's path hook: the check on it
    bites in an ordinary install.)"""
    result = _command(["--version"])
    modules = result["modules"]
    assert isinstance(modules, list)
    assert _loaded(modules, ("argparse", "typing", "importlib.metadata", "re")) == []


def test_importing_sshpipe_loads_nothing_else() -> None:
    """Its public names load on first use (``__getattr__``): the import itself is free."""
    result = run_fresh("""
        import sys
        before = set(sys.modules)
        import sshpipe
        loaded = sorted(set(sys.modules) - before)
        names = dir(sshpipe)
        import json
        print(json.dumps({"loaded": loaded, "listed": all(n in names for n in sshpipe.__all__)}))
    """)
    assert result["loaded"] == ["sshpipe"]
    assert result["listed"] is True
