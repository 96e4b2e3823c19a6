"""Each package's declared imports hold: the ``May import:`` paragraph of its ``__init__``.

A package of ``sshpipe`` (``core``, ``transport``, ``client``…) may import the
standard library, its own modules, and what its ``__init__`` docstring lists
in double backquotes in the paragraph that starts ``May import:``: packages or
modules of sshpipe by their name under it (``transport``, ``client.client``),
``sshpipe`` for the top package itself, and any other name for a library from
outside (``asyncssh``; the package's own name too: ``sshpipe.fsspec`` imports
``fsspec``). Every import counts, wherever it stands: at the top,
inside a function, or under ``TYPE_CHECKING`` (an import for types alone is an
arrow of the plan as well). Subpackages keep their parent's rule. The top
package's own ``__init__`` and ``__main__`` are the front door and may import
what they need.

Within a package, modules import one another in no circle (a circle is one
concept split for size, or two that need a third): ``CIRCLES_LEFT`` names the
packages where one is still known, and why.

``test_core_purity`` proves more of the core (a fresh interpreter loads no
other module); this test keeps every floor's declared shape.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import sshpipe

PACKAGE_DIR = Path(sshpipe.__file__).parent
# Packages whose modules still import one another in a circle, and why it is left.
CIRCLES_LEFT = {
    "fsspec": "the filesystem and the helpers it hands itself to name it for types only",
    "testing": "the link emulator's proxy, its connections and their pipes (a test tool)",
}
_DECLARED = re.compile(r"``([\w.]+)``")


@dataclass(frozen=True)
class Rule:
    """What one package may import: sshpipe's modules by dotted name, outside libraries."""

    package: str
    inside: frozenset[str]  # "sshpipe.core", "sshpipe.client.client", or "sshpipe"
    outside: frozenset[str]


def declared_rule(package_dir: Path) -> Rule | None:
    """The rule the package's ``__init__`` docstring declares; None if it declares none."""
    doc = ast.get_docstring(ast.parse((package_dir / "__init__.py").read_text())) or ""
    start = doc.find("May import:")
    if start < 0:
        return None
    paragraph = doc[start:].split("\n\n", 1)[0]
    root = package_dir.parent
    inside, outside = set(), set()
    for name in _DECLARED.findall(paragraph):
        if name == root.name:
            inside.add(name)
        elif name != package_dir.name and _exists(root, name):
            inside.add(f"{root.name}.{name}")
        else:
            outside.add(name)
    return Rule(package_dir.name, frozenset(inside), frozenset(outside))


def _exists(root: Path, dotted: str) -> bool:
    path = root.joinpath(*dotted.split("."))
    return (path / "__init__.py").is_file() or path.with_suffix(".py").is_file()


def _module_of(root: Path, file: Path) -> tuple[str, str]:
    """The module's dotted name and the package its relative imports start from."""
    parts = list(file.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), ".".join(parts[:-1])
    return ".".join(parts), ".".join(parts[:-1])


def imports_of(root: Path, file: Path) -> list[tuple[int, str]]:
    """Every import in ``file`` (line, absolute dotted name), wherever it stands."""
    _, package = _module_of(root, file)
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                assert node.module is not None
                base = node.module
            else:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            # "from . import wire" imports the module wire: named with it.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return sorted(found)


def _resolved(root: Path, dotted: str) -> str:
    """The longest prefix of ``dotted`` that is one of the tree's modules or packages."""
    parts = dotted.split(".")
    while len(parts) > 1 and not _exists(root.parent, ".".join(parts)):
        parts.pop()
    return ".".join(parts)


def broken_imports(root: Path) -> list[str]:
    """Each import that breaks its package's declared rule, as ``file:line: why``."""
    broken: list[str] = []
    for package_dir in sorted(p.parent for p in root.glob("*/__init__.py")):
        rule = declared_rule(package_dir)
        if rule is None:
            broken.append(f"{package_dir.relative_to(root.parent)}: declares no 'May import:'")
            continue
        own = f"{root.name}.{package_dir.name}"
        for file in sorted(package_dir.rglob("*.py")):
            for line, name in imports_of(root, file):
                top = name.partition(".")[0]
                where = f"{file.relative_to(root.parent)}:{line}"
                if top == root.name:
                    target = _resolved(root, name)
                    if target == own or target.startswith(own + "."):
                        continue
                    if any(target == ok or target.startswith(ok + ".") for ok in rule.inside):
                        continue
                    broken.append(f"{where}: {rule.package} may not import {target}")
                elif top not in sys.stdlib_module_names and top not in rule.outside:
                    broken.append(f"{where}: {rule.package} may not import {top}")
    return list(dict.fromkeys(broken))  # "from x import a, b" is one arrow


def test_no_import_breaks_its_packages_declared_rule() -> None:
    assert broken_imports(PACKAGE_DIR) == []


def circles_within(root: Path, package: str) -> list[str]:
    """Each circle of imports among one package's modules, as ``a -> b -> a``."""
    graph: dict[str, set[str]] = {}
    for file in (root / package).rglob("*.py"):
        name, _ = _module_of(root, file)
        graph[name] = {
            target
            for _, imported in imports_of(root, file)
            if (target := _resolved(root, imported)).startswith(f"{root.name}.{package}.")
            and target != name
        }
    circles: list[str] = []
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:  # depth first: met again on the path
        if name in path:
            circles.append(" -> ".join([*path[path.index(name) :], name]))
        elif name not in done:
            for target in sorted(graph.get(name, ())):
                visit(target, [*path, name])
            done.add(name)

    for name in sorted(graph):
        visit(name, [])
    return circles


def test_no_package_imports_itself_in_a_circle() -> None:
    for package_dir in sorted(p.parent for p in PACKAGE_DIR.glob("*/__init__.py")):
        circles = circles_within(PACKAGE_DIR, package_dir.name)
        if package_dir.name in CIRCLES_LEFT:
            assert circles, f"{package_dir.name} has no circle left: drop it from CIRCLES_LEFT"
        else:
            assert circles == [], package_dir.name


def test_every_declared_name_of_sshpipe_exists() -> None:
    """A misspelt module would otherwise pass as an outside library nobody imports."""
    libraries = {"asyncssh", "cryptography", "fsspec", "pyarrow", "pytest", "rich", "uvloop"}
    for package_dir in sorted(p.parent for p in PACKAGE_DIR.glob("*/__init__.py")):
        rule = declared_rule(package_dir)
        assert rule is not None, package_dir
        assert rule.outside <= libraries, (rule.package, rule.outside - libraries)


def _package(root: Path, name: str, doc: str, modules: dict[str, str]) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(f'"""{doc}"""\n')
    for module, source in modules.items():
        (root / name / f"{module}.py").write_text(source)


@pytest.fixture
def small_tree(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("__version__ = '1'\n")
    _package(root, "core", "Pure.\n\nMay import: the standard library only.\n", {"codec": ""})
    _package(
        root,
        "transport",
        "The edge.\n\nMay import: ``core`` and ``asyncssh``.\n\n``fsspec`` is not in it.\n",
        {"ssh": "import asyncssh\nfrom ..core import codec\nfrom . import sftp\n", "sftp": ""},
    )
    return root


def test_a_tree_that_keeps_its_rules_passes(small_tree: Path) -> None:
    assert broken_imports(small_tree) == []


def test_each_kind_of_broken_import_is_found(small_tree: Path) -> None:
    """Downward, relative, inside a function, for types only, an outside library."""
    (small_tree / "core" / "leak.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import os\n"
        "if TYPE_CHECKING:\n"
        "    from ..transport.ssh import thing\n"
        "def f():\n"
        "    import pkg.transport.sftp\n"
        "    from .. import __version__\n"
        "    import fsspec\n"
    )
    (small_tree / "transport" / "up.py").write_text("import fsspec.core\nfrom .. import core\n")
    assert broken_imports(small_tree) == [
        "pkg/core/leak.py:4: core may not import pkg.transport.ssh",
        "pkg/core/leak.py:6: core may not import pkg.transport.sftp",
        "pkg/core/leak.py:7: core may not import pkg",
        "pkg/core/leak.py:8: core may not import fsspec",
        "pkg/transport/up.py:1: transport may not import fsspec",
    ]


def test_a_circle_is_found(small_tree: Path) -> None:
    assert circles_within(small_tree, "transport") == []
    (small_tree / "transport" / "sftp.py").write_text("if 0:\n    from .ssh import x\n")
    assert circles_within(small_tree, "transport") == [
        "pkg.transport.sftp -> pkg.transport.ssh -> pkg.transport.sftp"
    ]


def test_a_package_without_a_rule_is_reported(small_tree: Path) -> None:
    _package(small_tree, "cli", "No rule here.\n", {})
    assert broken_imports(small_tree) == ["pkg/cli: declares no 'May import:'"]
