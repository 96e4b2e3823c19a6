"""Directory trees for the recursive-transfer tests: a seeded generator and a comparator.

``make_tree`` builds the same tree for the same seed: nested directories, files
of mixed sizes (empty, tiny, around one 255 KiB block, a couple of ~2 MiB),
unicode names and names with spaces, relative symlinks to a file and to a
directory, a dangling symlink, empty directories, varied modes, and distinct
old whole-second times (SFTP v3 carries whole seconds).

``compare_trees`` walks two trees without following symlinks (or following
them, to describe what ``-L`` should produce) and returns readable lines, one
per difference; an empty list means the trees match.
"""

from __future__ import annotations

import os
import random
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.files import sha256_file

__all__ = [
    "Entry",
    "GeneratedTree",
    "compare_trees",
    "make_small_tree",
    "make_tree",
    "set_times",
    "snapshot",
    "summarize",
]

BLOCK = 255 * 1024  # OpenSSH's limits@openssh.com read size: the edge worth straddling
FILE_MODES = (0o600, 0o640, 0o755, 0o644)
DIR_MODES = (0o700, 0o755)
# 2001-09-09: old enough that "now" can never be mistaken for a preserved time.
_EPOCH = 1_000_000_000

# Name pools: unicode (composed accents, CJK, emoji), spaces, glob characters that
# must be taken literally inside a tree, a leading dash, hidden names.
_FILE_STEMS = (
    "résumé",
    "数据",
    "🚀 launch",
    "with space",
    "plain",
    "naïve café",
    "weird [1] *?",
    "-leading-dash",
    ".hidden",
    "Ünïcödé",
    "log",
    "trailing space ",
)
_FILE_SUFFIXES = (".txt", ".bin", ".gz", "", ".tar.gz", " copy")
_DIR_STEMS = ("数据", "dir with spaces", "sub", "émoji 🎉", "deep", "α", "nested", ".config")


@dataclass(frozen=True)
class Entry:
    """One path of a tree as the comparator sees it.

    ``kind`` is "file", "dir", "symlink", "other" (fifo, socket, device) or,
    when following symlinks, "dangling" for a link whose target is missing.
    """

    kind: str
    mode: int
    mtime: int
    size: int = 0
    sha256: str | None = None
    target: str | None = None


@dataclass(frozen=True)
class GeneratedTree:
    """What ``make_tree`` built, for assertions that need more than a comparison."""

    root: Path
    files: int
    directories: int  # not counting root itself
    symlinks: int
    bytes: int
    empty_dirs: tuple[str, ...]
    file_link: str  # relative paths (from root) of the three symlinks
    dir_link: str
    dangling_link: str | None
    deepest: str = ""
    largest: tuple[str, ...] = field(default=())


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name} {n}"
    taken.add(candidate)
    return candidate


def _sizes(rng: random.Random, count: int) -> list[int]:
    """Mostly tiny, some empty, some just past one block, two of about 2 MiB."""
    special = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * 1024 * 1024 + 17, 2 * 1024 * 1024 - 3]
    special += [rng.randint(300 * 1024, 1024 * 1024) for _ in range(18)]
    sizes = special[:count]
    while len(sizes) < count:
        roll = rng.random()
        if roll < 0.10:
            sizes.append(0)
        elif roll < 0.85:
            sizes.append(rng.randint(1, 4096))
        else:
            sizes.append(rng.randint(4097, 48 * 1024))
    rng.shuffle(sizes)
    return sizes


def make_tree(
    root: Path,
    *,
    files: int = 2000,
    depth: int = 5,
    seed: int = 20240501,
    dangling: bool = True,
) -> GeneratedTree:
    """Build a deterministic tree under ``root`` (created; must not exist).

    Args:
        root: the directory to create.
        files: number of regular files.
        depth: nesting levels below ``root`` (at least 3: the fixed part needs them).
        seed: the same seed gives the same names, contents, modes and times.
        dangling: include a symlink whose target does not exist (leave it out
            where the links are to be followed).

    Returns:
        A GeneratedTree describing what was built.
    """
    if depth < 3:
        raise ValueError("depth must be at least 3")
    rng = random.Random(seed)
    root.mkdir()

    # Fixed part: the names tests refer to.
    fixed_dirs = [
        "docs",
        "docs/数据",
        "links",
        "empty",
        "nested",
        "nested/empty",
        "nested/empty/deeper",
    ]
    dirs: list[str] = list(fixed_dirs)
    taken: dict[str, set[str]] = {"": {"docs", "links", "empty", "nested"}}
    taken["docs"] = {"数据"}
    taken["nested"] = {"empty"}
    taken["nested/empty"] = {"deeper"}

    # Random part: a chain that reaches ``depth``, then a bushy spread.
    parent = ""
    for level in range(depth):
        name = _unique(f"{_DIR_STEMS[level % len(_DIR_STEMS)]}", taken.setdefault(parent, set()))
        parent = f"{parent}/{name}" if parent else name
        dirs.append(parent)
    deepest = parent
    frontier = [""]
    for _ in range(depth - 1):
        nxt: list[str] = []
        for base in frontier:
            for _ in range(rng.randint(2, 3)):
                stem = rng.choice(_DIR_STEMS)
                name = _unique(stem, taken.setdefault(base, set()))
                path = f"{base}/{name}" if base else name
                dirs.append(path)
                nxt.append(path)
        frontier = nxt
    empty_dirs = ["empty", "nested/empty/deeper"]
    for i in range(3):
        base = rng.choice(frontier)
        name = _unique(f"leer {i}", taken.setdefault(base, set()))
        empty_dirs.append(f"{base}/{name}")
        dirs.append(f"{base}/{name}")
    for path in dirs:
        (root / path).mkdir(parents=True, exist_ok=True)

    # Files go anywhere except the directories meant to stay empty.
    homes = [d for d in ["", *dirs] if d not in empty_dirs and d != "nested/empty"]
    fixed_files = ["docs/résumé.txt", "docs/数据/table.csv", "docs/🚀 launch.txt"]
    for path in fixed_files:
        taken.setdefault(path.rsplit("/", 1)[0], set()).add(path.rsplit("/", 1)[1])
    file_paths = list(fixed_files)
    while len(file_paths) < files:
        base = rng.choice(homes)
        stem = rng.choice(_FILE_STEMS)
        name = _unique(stem + rng.choice(_FILE_SUFFIXES), taken.setdefault(base, set()))
        file_paths.append(f"{base}/{name}" if base else name)

    total = 0
    largest: list[tuple[int, str]] = []
    for path, size in zip(file_paths, _sizes(rng, len(file_paths)), strict=True):
        target = root / path
        target.write_bytes(rng.randbytes(size))
        target.chmod(rng.choice(FILE_MODES))
        total += size
        largest.append((size, path))
    largest.sort(reverse=True)

    # Relative symlinks: to a file, to a directory (a cousin, never an ancestor,
    # so following it cannot loop), and one to nothing.
    file_link, dir_link, dangling_link = "links/résumé link", "links/to 数据", None
    (root / file_link).symlink_to("../docs/résumé.txt")
    (root / dir_link).symlink_to("../docs/数据")
    (root / "docs" / "sibling link").symlink_to("🚀 launch.txt")
    symlinks = 3
    if dangling:
        dangling_link = "links/dangling"
        (root / dangling_link).symlink_to("../no/such/target")
        symlinks += 1

    # Modes and times last, deepest first, so creating a child never bumps a
    # directory's mtime after it was set.
    stamp = _EPOCH
    for path in sorted(file_paths):
        stamp += 3607
        os.utime(root / path, (stamp - 86_400, stamp))
    for path in sorted(dirs, key=lambda p: p.count("/"), reverse=True):
        (root / path).chmod(rng.choice(DIR_MODES))
        stamp += 3607
        os.utime(root / path, (stamp - 86_400, stamp))
    root.chmod(0o755)
    os.utime(root, (stamp + 1000, stamp + 7200))

    return GeneratedTree(
        root=root,
        files=len(file_paths),
        directories=len(dirs),
        symlinks=symlinks,
        bytes=total,
        empty_dirs=tuple(empty_dirs),
        file_link=file_link,
        dir_link=dir_link,
        dangling_link=dangling_link,
        deepest=deepest,
        largest=tuple(p for _, p in largest[:3]),
    )


def make_small_tree(root: Path, *, links: bool = True) -> dict[str, bytes]:
    """A handful of files for layout tests: returns {relative path: content}.

    Layout: a.txt, sub/b.bin (just past one block), sub/deeper/c.txt (empty),
    "name with space/ü.txt", an empty directory "void", and with ``links`` the
    symlinks link-file -> a.txt and link-dir -> sub.
    """
    root.mkdir(parents=True)
    files = {
        "a.txt": b"alpha\n",
        "sub/b.bin": random.Random(3).randbytes(BLOCK + 5),
        "sub/deeper/c.txt": b"",
        "name with space/ü.txt": "grüße\n".encode(),
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "void").mkdir()
    if links:
        (root / "link-file").symlink_to("a.txt")
        (root / "link-dir").symlink_to("sub")
    return files


def set_times(root: Path, mtime: int) -> None:
    """Give every file and directory under ``root`` (and root) the same old times."""
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in [*filenames, *dirnames]:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.utime(path, (mtime, mtime))
        os.utime(dirpath, (mtime, mtime))


# -- comparison ------------------------------------------------------------------


def _entry(path: Path, st: os.stat_result, target: str | None) -> Entry:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return Entry("symlink", mode, int(st.st_mtime), target=target)
    if stat.S_ISDIR(st.st_mode):
        return Entry("dir", mode, int(st.st_mtime))
    if stat.S_ISREG(st.st_mode):
        return Entry("file", mode, int(st.st_mtime), st.st_size, sha256_file(path))
    return Entry("other", mode, int(st.st_mtime))


def _walk(
    root: Path, rel: str, follow: bool, seen: frozenset[tuple[int, int]]
) -> Iterator[tuple[str, Entry]]:
    here = root / rel if rel else root
    with os.scandir(here) as it:
        names = sorted(entry.name for entry in it)
    for name in names:
        child_rel = f"{rel}/{name}" if rel else name
        path = root / child_rel
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) and follow:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                yield child_rel, Entry("dangling", 0, 0, target=os.readlink(path))
                continue
        target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
        entry = _entry(path, st, target)
        yield child_rel, entry
        if entry.kind == "dir":
            key = (st.st_dev, st.st_ino)
            if key in seen:
                raise ValueError(f"symlink loop at {path}")
            yield from _walk(root, child_rel, follow, seen | {key})


def snapshot(root: Path, *, follow_symlinks: bool = False) -> dict[str, Entry]:
    """Every path under ``root`` (relative, '/'-separated; root itself is ".")."""
    st = os.stat(root)
    tree = {".": _entry(root, st, None)}
    tree.update(_walk(root, "", follow_symlinks, frozenset({(st.st_dev, st.st_ino)})))
    return tree


def compare_trees(
    expected: Path,
    actual: Path,
    *,
    modes: bool = False,
    mtimes: bool = False,
    follow_symlinks: bool = False,
    include_root: bool = True,
) -> list[str]:
    """Differences between two trees, one readable line each (empty: they match).

    Args:
        expected: the source tree.
        actual: the copy.
        modes: compare permission bits of files and directories.
        mtimes: compare whole-second mtimes of files and directories.
        follow_symlinks: describe ``expected`` as ``-L`` sees it (links replaced
            by what they point to); ``actual`` is always walked without following.
        include_root: compare the roots' own mode and mtime too.

    Returns:
        Lines such as "missing: docs/a.txt (file)" or "mode: x: 0o640 != 0o644".
    """
    want = snapshot(expected, follow_symlinks=follow_symlinks)
    got = snapshot(actual)
    if not include_root:
        del want["."], got["."]
    diffs: list[str] = []
    for path in sorted(want.keys() - got.keys()):
        diffs.append(f"missing: {path!r} ({want[path].kind})")
    for path in sorted(got.keys() - want.keys()):
        diffs.append(f"extra: {path!r} ({got[path].kind})")
    for path in sorted(want.keys() & got.keys()):
        a, b = want[path], got[path]
        if a.kind != b.kind:
            diffs.append(f"type: {path!r}: expected {a.kind}, got {b.kind}")
            continue
        if a.kind == "file" and a.sha256 != b.sha256:
            diffs.append(
                f"content: {path!r}: sha256 {a.sha256[:12] if a.sha256 else None} "
                f"({a.size} bytes) != {b.sha256[:12] if b.sha256 else None} ({b.size} bytes)"
            )
        if a.kind == "symlink" and a.target != b.target:
            diffs.append(f"symlink target: {path!r}: {a.target!r} != {b.target!r}")
        if a.kind in ("file", "dir"):
            if modes and a.mode != b.mode:
                diffs.append(f"mode: {path!r}: {a.mode:#o} != {b.mode:#o}")
            if mtimes and a.mtime != b.mtime:
                diffs.append(f"mtime: {path!r}: {a.mtime} != {b.mtime}")
    return diffs


def summarize(diffs: list[str], limit: int = 25) -> str:
    """The first ``limit`` differences and how many more there were."""
    head = "\n".join(diffs[:limit])
    more = len(diffs) - limit
    return f"{len(diffs)} differences:\n{head}" + (f"\n... and {more} more" if more > 0 else "")
