"""The pure parts of tree transfers: where sources land, globs, accounting.

No I/O here (``_tree.py`` drives it). A remote listing is untrusted input: every
name passes ``_untrusted.ListingCheck`` before it is joined to a local path
(scp's CVE-2019-6111 let a server write outside the destination), and a glob's
results are matched again here against the user's pattern.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from .errors import SSHPipeError, TransferError, UnsafePath, UsageError
from .progress import MAX_CURRENT, Counts
from .stats import TreeFailure, TreeStats
from .untrusted import MAX_LISTED_FAILURES, MAX_LISTING_ENTRIES, MAX_LISTING_NAME_CHARS, NameSet

DOT_ENTRIES = frozenset((".", ".."))  # every server lists them; never copied

# A file goes through the many-files pipeline when it is at most this share of
# the pipeline's byte budget (so several always fit at once); bigger ones get
# the striped single-file engine with its flow controller.
SMALL_FILE_SHARE = 2


def source_name(path: str) -> str:
    """The name a source keeps at the destination (scp: its last component)."""
    return posixpath.basename(path.rstrip("/"))


def elided(path: str, top: str = "") -> str:
    """``path`` for a one-line message, a deep one cut short.

    ``top`` (a source the user named, which ``path`` is under) is kept
    whole, then the first name below it and the last two. A path 64
    directories deep, each name up to 4,096 bytes a server chose, is no line
    to print whole.
    """
    if not top or not path.startswith(top.rstrip("/") + "/"):
        top = ""
    kept = top.rstrip("/")
    names = path[len(kept) :].split("/")  # "" first: the rest starts with "/"
    if len(names) <= 5:
        return path
    return "/".join([kept, names[1], "...", *names[-2:]])


def landing(
    source: str, dest: str, *, dest_is_dir: bool, join: Callable[[str, str], str] = posixpath.join
) -> str:
    """Where ``source`` lands: inside ``dest`` when it is a directory (scp), else ``dest``."""
    if not dest_is_dir:
        return dest
    name = source_name(source)
    if name in ("", ".", ".."):
        return dest  # "host:." or "/": the contents go into dest itself
    return join(dest, name)


def landings(
    sources: list[str],
    dest: str,
    *,
    dest_is_dir: bool,
    join: Callable[[str, str], str] = posixpath.join,
) -> list[tuple[str, str]]:
    """(source, where it lands) for each source; two sources never land in one place.

    Raises:
        UsageError: two sources would be copied to the same path (``a/x b/x``
            into one directory, or a glob matching ``*/x``): one would
            overwrite the other, or both race.
    """
    placed: dict[str, str] = {}
    for source in sources:
        target = landing(source, dest, dest_is_dir=dest_is_dir, join=join)
        other = placed.setdefault(target, source)
        if other != source:
            raise UsageError(f"{other} and {source} would both be copied to {target}")
    return list(zip(placed.values(), placed.keys(), strict=True))


class Landings:
    """Where each source lands, one at a time, and that no two land in one place.

    ``landings`` for sources that come one by one, a glob's matches as its
    listings give them: the places are remembered as a listing's names are
    (``NameSet``), within a listing's bounds, since they all land in one
    directory. The same source twice lands once.
    """

    def __init__(
        self,
        dest: str,
        *,
        dest_is_dir: bool,
        join: Callable[[str, str], str] = posixpath.join,
    ) -> None:
        self.dest = dest
        self.dest_is_dir = dest_is_dir
        self._join = join
        self._targets = NameSet()
        self._sources = NameSet()
        self._chars = 0

    def place(self, source: str, *, pattern: str = "") -> str | None:
        """Where ``source`` lands; None if it was placed before.

        Raises:
            UsageError: another source lands there.
            UnsafePath: past a listing's bounds (``pattern``: what named them).
        """
        target = landing(source, self.dest, dest_is_dir=self.dest_is_dir, join=self._join)
        self._chars += max(0, len(target) - len(self.dest) - 1)  # its name, as landed
        if len(self._targets) >= MAX_LISTING_ENTRIES:
            why = f"more than {MAX_LISTING_ENTRIES} matches"
            raise UnsafePath(pattern or source, "", listing_refused=why)
        if self._chars > MAX_LISTING_NAME_CHARS:
            why = f"more than {MAX_LISTING_NAME_CHARS >> 20} MiB of names matched"
            raise UnsafePath(pattern or source, "", listing_refused=why)
        new_source = self._sources.add(source)
        if self._targets.add(target):
            return target
        if not new_source:
            return None
        raise UsageError(f"{source} would be copied to {target}, where another source goes")


# -- globs ---------------------------------------------------------------------


def has_magic(text: str) -> bool:
    return any(char in text for char in "*?[")


def glob_parts(pattern: str) -> tuple[str, list[str]]:
    """Split a pattern into its fixed leading directory and the components after it.

    ``logs/2026/*.gz`` -> (``logs/2026``, [``*.gz``]); the first component
    with a wildcard, and everything after it, must be matched by listing.
    """
    absolute = pattern.startswith("/")
    parts = [part for part in pattern.split("/") if part]
    for index, part in enumerate(parts):
        if has_magic(part):
            head = "/".join(parts[:index])
            return ("/" + head if absolute else head or "."), parts[index:]
    return pattern, []


def glob_match(pattern: str, name: str) -> bool:
    """fnmatch, except that a leading dot must be matched literally (as the shell does)."""
    if name in DOT_ENTRIES:
        return False
    if name.startswith(".") and not pattern.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, pattern)


def glob_join(head: str, name: str) -> str:
    return name if head == "." else posixpath.join(head, name)


def glob_result_matches(pattern: str, path: str) -> bool:
    """Whether ``path`` is one the user's ``pattern`` can name, component for component.

    The last check on a glob's results: each component the pattern left to a
    listing must be one plain name that its own part of the pattern matches,
    so a server cannot add a path the user did not ask for.
    """
    prefix, parts = _prefix_and_parts(pattern)
    if not parts:
        return path == pattern
    if not path.startswith(prefix):
        return False
    names = path[len(prefix) :].split("/")
    return len(names) == len(parts) and all(
        name not in ("", *DOT_ENTRIES) and glob_match(part, name)
        for part, name in zip(parts, names, strict=True)
    )


@lru_cache(maxsize=64)
def _prefix_and_parts(pattern: str) -> tuple[str, tuple[str, ...]]:
    """What every path ``pattern`` names starts with, and the parts matched after it
    (once per pattern: a glob checks each of its matches against them)."""
    head, parts = glob_parts(pattern)
    prefix = "" if head == "." else head.rstrip("/") + "/"
    return ("/" if head == "/" else prefix), tuple(parts)


# -- sizing ----------------------------------------------------------------


# The many-files pipeline's share of the byte budget; the big files share the rest.
PIPELINE_SHARE = 3


def split_budget(max_bytes_in_flight: int) -> tuple[int, int]:
    """(pipeline, big files): together never more than ``max_bytes_in_flight``.

    The big files get the larger part: one of them alone must still fill a
    long fat link, which small files (a round trip each) rarely do.
    """
    pipeline = max(1, max_bytes_in_flight // PIPELINE_SHARE)
    return pipeline, max(1, max_bytes_in_flight - pipeline)


def is_small(size: int, budget: int) -> bool:
    return size <= budget // SMALL_FILE_SHARE


# -- accounting --------------------------------------------------------------


@dataclass
class TreeAccount:
    """What a tree transfer found and did; the clock is passed in."""

    started: float
    files: int = 0
    files_done: int = 0
    files_failed: int = 0
    directories: int = 0
    symlinks: int = 0
    bytes_total: int = 0
    bytes_done: int = 0  # progress: whole files copied plus parts of big ones in flight
    bytes_copied: int = 0  # whole files copied
    bytes_kept: int = 0  # of bytes_done, those an earlier run copied (``resume``)
    scan_done: bool = False
    resumed_files: int = 0
    # The first MAX_LISTED_FAILURES of each, one by one; the rest are counted
    # (a hostile listing can make a million of them).
    failures: list[TreeFailure] = field(default_factory=list)
    failures_unlisted: int = 0
    # Failures of entries that are no file, directory or link in the counts: a
    # source not there, a refused name, a directory not made, a link not made.
    failed_uncounted: int = 0
    skipped_paths: list[str] = field(default_factory=list)
    skipped_count: int = 0
    # The files being copied (their source paths), oldest first, and of those the
    # big ones (the striped engine's): ``current``.
    in_flight: dict[str, None] = field(default_factory=dict)
    big_in_flight: dict[str, None] = field(default_factory=dict)

    def found_file(self, size: int) -> None:
        self.files += 1
        self.bytes_total += size

    def file_done(self, size: int, *, reported: int = 0, listed: int | None = None) -> None:
        """A file of ``size`` bytes was copied, ``reported`` of them already via ``moved``.

        ``listed``: its size when found, if it differs (it grew or shrank since):
        the total follows, so a tree that succeeds ends with done == total.
        """
        self.files_done += 1
        if listed is not None:
            self.bytes_total += size - listed
        self.bytes_done += size - reported
        self.bytes_copied += size

    def copied_before(self, size: int) -> None:
        """A file an earlier run copied (``--resume``): done, but not copied now."""
        self.files_done += 1
        self.resumed_files += 1
        self.bytes_done += size
        self.bytes_kept += size

    def moved(self, count: int, *, kept: bool = False) -> None:
        """Bytes of a big file in progress arrived (``kept``: an earlier run's, found intact)."""
        self.bytes_done += count
        if kept:
            self.bytes_kept += count

    def started_file(self, path: str, *, big: bool = False) -> None:
        """A file is being copied (``big``: by the single-file engine, its bytes counted
        as they move); a file started small may turn big (it grew)."""
        self.in_flight[path] = None
        if big:
            self.big_in_flight[path] = None

    def ended_file(self, path: str) -> None:
        self.in_flight.pop(path, None)
        self.big_in_flight.pop(path, None)

    def failed(
        self,
        path: str,
        error: SSHPipeError,
        *,
        is_file: bool = False,
        reported: int = 0,
        counted: bool = False,
    ) -> None:
        """``path`` failed; ``counted``: it is already one of the files, directories or links."""
        if is_file:
            self.files_failed += 1
        elif not counted:
            self.failed_uncounted += 1
        self.bytes_done -= reported
        if len(self.failures) < MAX_LISTED_FAILURES:
            code = error.errno if isinstance(error, TransferError) else None
            self.failures.append(TreeFailure(path, str(error), error.exit_code, code))
        else:
            self.failures_unlisted += 1

    def skipped(self, path: str) -> None:
        self.skipped_count += 1
        if len(self.skipped_paths) < MAX_LISTED_FAILURES:
            self.skipped_paths.append(path)

    def counts(self) -> Counts:
        """The counts a progress report is made of.

        ``current``: the big files in flight, whose bytes are seen moving, then the
        small files begun last (hundreds are in flight; a few are named).
        """
        big = list(self.big_in_flight)[:MAX_CURRENT]
        recent: list[str] = []
        for path in reversed(self.in_flight):  # newest first
            if len(big) + len(recent) >= MAX_CURRENT:
                break
            if path not in self.big_in_flight:
                recent.append(path)
        return Counts(
            bytes_done=self.bytes_done,
            bytes_total=self.bytes_total,
            files_done=self.files_done,
            files_total=self.files,
            scan_done=self.scan_done,
            current=(*big, *reversed(recent)),
            bytes_kept=self.bytes_kept,
        )

    def stats(self, now: float) -> TreeStats:
        return TreeStats(
            files=self.files,
            files_done=self.files_done,
            files_failed=self.files_failed,
            directories=self.directories,
            symlinks=self.symlinks,
            entries=self.files + self.directories + self.symlinks + self.failed_uncounted,
            skipped=self.skipped_count,
            bytes=self.bytes_copied,
            seconds=now - self.started,
            failures=tuple(self.failures),
            failures_unlisted=self.failures_unlisted,
            skipped_paths=tuple(self.skipped_paths),
            resumed_files=self.resumed_files,
        )
