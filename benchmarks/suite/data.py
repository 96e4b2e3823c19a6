"""The sources every client copies: random or text-like files, and trees, written
once into the server's root (the server is on this machine), with their sha256."""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass
from pathlib import Path

from _bench_common import MIB, write_random_file
from _tree_files import Tree, layout, write_tree

from .scenarios import Scenario

SETUP_SIZE = 1
_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "or",
    "from",
    "at",
    "which",
    "an",
    "not",
    "have",
    "has",
    "but",
    "all",
    "were",
    "when",
    "there",
    "can",
    "been",
    "one",
    "if",
    "more",
    "will",
    "their",
    "other",
    "would",
    "def",
    "return",
    "import",
    "self",
    "None",
    "class",
    "async",
    "await",
    "yield",
    "error",
    "file",
    "path",
    "size",
    "offset",
]
TREE_SEED = 19


@dataclass(frozen=True)
class FileSource:
    size: int
    data: str
    sha256: str
    path: Path


def write_text_file(path: Path, size: int, seed: str) -> str:
    """Words and line breaks from a fixed vocabulary: compresses about 4:1, as logs do."""
    rng = random.Random(seed)
    digest = hashlib.sha256()
    with path.open("wb") as out:
        remaining = size
        while remaining:
            words = rng.choices(_WORDS, k=MIB // 5)
            lines = [" ".join(words[i : i + 12]) for i in range(0, len(words), 12)]
            piece = ("\n".join(lines) + "\n").encode()[: min(MIB, remaining)]
            digest.update(piece)
            out.write(piece)
            remaining -= len(piece)
    return digest.hexdigest()


def make_sources(
    scenarios: tuple[Scenario, ...], root: Path, setup: bool
) -> tuple[dict[tuple[str, int], FileSource], dict[str, Tree]]:
    files: dict[tuple[str, int], FileSource] = {}
    trees: dict[str, Tree] = {}
    wanted = {(s.data, size) for s in scenarios for size in s.sizes}
    if setup:
        wanted |= {("random", SETUP_SIZE)}
    for data, size in sorted(wanted):
        path = root / f"source-{data}-{size}.bin"
        print(f"writing {size} {data} bytes for the source ...", flush=True)
        if data == "text":
            digest = write_text_file(path, size, f"{TREE_SEED}/{size}")
        else:
            digest = write_random_file(path, size)
        files[(data, size)] = FileSource(size=size, data=data, sha256=digest, path=path)
    for spec in {t.name: t for s in scenarios for t in s.trees}.values():
        path = root / f"tree-{spec.name}"
        print(f"writing the tree {spec.describe()} ...", flush=True)
        manifest = write_tree(path, spec, layout(spec), TREE_SEED)
        trees[spec.name] = Tree(label=spec.name, spec=spec, path=path, manifest=manifest)
    os.sync()
    return files, trees
