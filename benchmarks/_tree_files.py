"""bench_tree.py's directory trees: their shapes, deterministic content, and the check
that a copy holds exactly the source's files (relative paths, sizes, sha256).

Imported by bench_tree.py (run as a file, so this directory is on sys.path).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from _bench_common import MIB, parse_size, sha256_file

_SPEC_RE = re.compile(r"^(\d+)x([^:+]+):(\d+)(?:\+(\d+)x(.+))?$")
_CHUNK = MIB
# Shown per mismatch kind in an error; the rest are counted.
_SHOWN = 3


@dataclass(frozen=True)
class TreeSpec:
    """``files`` small files of ``file_size`` over up to ``dirs`` directories, plus
    ``large_files`` of ``large_size`` at the top (the mixed tree)."""

    name: str
    files: int
    file_size: int
    dirs: int
    large_files: int = 0
    large_size: int = 0

    @property
    def per_dir(self) -> int:
        return math.ceil(self.files / self.dirs)

    def describe(self) -> str:
        text = f"{self.files} × {_human(self.file_size)} in {self.dirs} dirs"
        if self.large_files:
            text += f" + {self.large_files} × {_human(self.large_size)}"
        return text


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative, '/'-separated
    size: int


@dataclass(frozen=True)
class Manifest:
    """What a tree holds: files (relative path -> size, sha256) and directories."""

    files: dict[str, tuple[int, str]]
    dirs: frozenset[str]

    @property
    def bytes(self) -> int:
        return sum(size for size, _ in self.files.values())


@dataclass(frozen=True)
class Tree:
    """One generated tree on disk (in the server's root, so get and put share it)."""

    label: str  # "small", or "small-first100" for a baseline's subset
    spec: TreeSpec
    path: Path
    manifest: Manifest

    @property
    def files(self) -> int:
        return len(self.manifest.files)

    @property
    def bytes(self) -> int:
        return self.manifest.bytes


def parse_tree_spec(text: str) -> TreeSpec:
    """``NAME=FILESxSIZE:DIRS[+LARGExSIZE]``, e.g. ``mixed=1000x16K:10+4x64M``."""
    name, sep, body = text.partition("=")
    match = _SPEC_RE.match(body.strip())
    if not sep or not re.fullmatch(r"[\w-]+", name) or match is None:
        raise argparse.ArgumentTypeError(
            f"expected NAME=FILESxSIZE:DIRS[+LARGExSIZE] (e.g. small=1000x16K:10), got {text!r}"
        )
    files, size, dirs, large, large_size = match.groups()
    spec = TreeSpec(
        name=name,
        files=int(files),
        file_size=parse_size(size),
        dirs=int(dirs),
        large_files=int(large or 0),
        large_size=parse_size(large_size) if large_size else 0,
    )
    if spec.files < 1 or spec.dirs < 1:
        raise argparse.ArgumentTypeError(f"a tree needs at least one file and one dir: {text!r}")
    return spec


def layout(spec: TreeSpec, small_files: int | None = None) -> list[FileEntry]:
    """The files of ``spec``, or of its baseline subset: the first ``small_files`` small
    files in path order (so directories stay as full as in the whole tree), and the
    large files shrunk by the same fraction (so bytes split between large and small
    files as in the whole tree)."""
    count = spec.files if small_files is None else min(small_files, spec.files)
    dir_width, file_width = len(str(spec.dirs - 1)), len(str(spec.files - 1))
    entries = [
        FileEntry(f"d{i // spec.per_dir:0{dir_width}d}/f{i:0{file_width}d}.bin", spec.file_size)
        for i in range(count)
    ]
    large_size = spec.large_size * count // spec.files
    entries += [FileEntry(f"large-{k}.bin", large_size) for k in range(spec.large_files)]
    return entries


def write_tree(root: Path, spec: TreeSpec, entries: list[FileEntry], seed: int) -> Manifest:
    """Write ``entries`` under ``root`` (which must not exist); return its manifest.

    A file's bytes depend only on (seed, tree name, path), so a subset holds the
    same small files as the whole tree.
    """
    root.mkdir(parents=True)
    files: dict[str, tuple[int, str]] = {}
    dirs: set[str] = set()
    for entry in entries:
        path = root / entry.path
        parent = os.path.dirname(entry.path)
        if parent and parent not in dirs:
            path.parent.mkdir(parents=True, exist_ok=True)
            dirs.add(parent)
        files[entry.path] = (
            entry.size,
            _write_file(path, entry.size, f"{seed}/{spec.name}/{entry.path}"),
        )
    return Manifest(files=files, dirs=frozenset(dirs))


def _write_file(path: Path, size: int, key: str) -> str:
    rng = random.Random(key)
    digest = hashlib.sha256()
    with path.open("wb") as out:
        remaining = size
        while remaining:
            piece = rng.randbytes(min(_CHUNK, remaining))
            digest.update(piece)
            out.write(piece)
            remaining -= len(piece)
    return digest.hexdigest()


def scan(root: Path) -> tuple[Manifest, list[str]]:
    """``root``'s manifest, and whatever else is there (symlinks, fifos, ...)."""
    files: dict[str, tuple[int, str]] = {}
    dirs: set[str] = set()
    others: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if os.path.islink(path):
                others.append(rel + " (symlink)")
            elif os.path.isdir(path):
                dirs.add(rel)
            elif os.path.isfile(path):
                files[rel] = (os.path.getsize(path), "")
            else:
                others.append(rel + " (special file)")
    return Manifest(files=files, dirs=frozenset(dirs)), sorted(others)


def compare_tree(expected: Manifest, root: Path) -> str | None:
    """None when ``root`` holds exactly ``expected``'s files and dirs, else what differs."""
    if not root.is_dir():
        return (
            f"destination {root} is not a directory"
            if root.exists()
            else (f"destination {root} does not exist")
        )
    actual, others = scan(root)
    problems = [
        _listed("missing file", sorted(expected.files.keys() - actual.files.keys())),
        _listed("unexpected file", sorted(actual.files.keys() - expected.files.keys())),
        _listed("missing dir", sorted(expected.dirs - actual.dirs)),
        _listed("unexpected dir", sorted(actual.dirs - expected.dirs)),
        _listed("unexpected entry", others, plural="unexpected entries"),
    ]
    wrong_size, wrong_hash = [], []
    for rel in sorted(expected.files.keys() & actual.files.keys()):
        size, sha256 = expected.files[rel]
        if actual.files[rel][0] != size:
            wrong_size.append(f"{rel} ({actual.files[rel][0]} != {size} bytes)")
        elif sha256_file(root / rel) != sha256:
            wrong_hash.append(rel)
    problems += [
        _listed("size mismatch", wrong_size, plural="size mismatches"),
        _listed("sha256 mismatch", wrong_hash, plural="sha256 mismatches"),
    ]
    found = [p for p in problems if p]
    return "; ".join(found) if found else None


def _listed(what: str, items: list[str], plural: str | None = None) -> str:
    if not items:
        return ""
    name = what if len(items) == 1 else plural or what + "s"
    more = f", +{len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return f"{len(items)} {name} ({', '.join(items[:_SHOWN])}{more})"


def remove_tree(path: Path) -> None:
    """Delete a copy, then flush so its writeback does not land in the next timed run."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    os.sync()


def _human(size: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if size >= factor:
            return f"{size / factor:.3g} {unit}"
    return f"{size} B"
