"""The package's floors: each module imports only from its own package or lower ones.

Data flows down core -> local, transport -> durability -> transfer -> tree,
workers (each package's ``__init__`` says what it may import). Read from the
source, not from an import: an import inside a function or under
``TYPE_CHECKING`` is still an arrow in the design, and a module loaded
earlier by another test would hide nothing here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import sshpipe

PACKAGE_DIR = Path(sshpipe.__file__).parent
# The floor of each package below the faces (client, cli, fsspec, testing).
FLOORS = {
    "core": 0,
    "local": 1,
    "transport": 1,
    "durability": 2,
    "transfer": 3,
    "tree": 4,
    "workers": 4,
}
# Arrows up that are meant, and why.
ALLOWED_UP = {
    # A worker process's own entry: it logs in as a Client of its own.
    ("sshpipe.workers.child", "client"),
}
# Packages whose modules import one another in no circle (transport's pool is
# not there yet).
NO_CIRCLES = ("core", "local", "durability", "transfer", "tree", "workers")


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = ("sshpipe", *path.relative_to(PACKAGE_DIR).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every sshpipe module (or package) ``name`` imports, wherever the import is."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.startswith("sshpipe"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if not target.startswith("sshpipe"):
                continue
            # ``from . import wire``, ``from ..core import errors``: the module, if it is one.
            subs = [f"{target}.{alias.name}" for alias in node.names]
            yield from [sub for sub in subs if sub in MODULES] or [target]


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_module_imports_a_package_above_its_own() -> None:
    wrong = []
    for name, path in sorted(MODULES.items()):
        floor = FLOORS.get(_package(name))
        if floor is None:
            continue  # a face: it may import anything below it
        for target in _imports(name, path):
            package = _package(target)
            if package == _package(name) or (name, package) in ALLOWED_UP:
                continue
            if package not in FLOORS or FLOORS[package] >= floor:
                wrong.append(f"{name} -> {target}")
    assert wrong == []


def test_no_import_circles_within_a_package() -> None:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        if _package(name) in NO_CIRCLES:
            graph[name] = {
                target
                for target in _imports(name, path)
                if _package(target) == _package(name) and target in MODULES and target != name
            }
    circles = []
    # Depth first; a module met again while on the path closes a circle.
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            circles.append(" -> ".join([*path[path.index(name) :], name]))
            return
        if name in done:
            return
        for target in sorted(graph.get(name, ())):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert circles == []
