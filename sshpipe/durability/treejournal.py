"""``-r --resume``: which files of a tree are already copied, so a second run skips them.

A tree killed at its sixth 1 GiB file should not copy the first five again.
Each file that takes its final name (durable first, with fsync) is appended
to a journal in the user's state directory, keyed by the peer, direction,
sources and destination, with its source's size and mtime. The next run
with ``--resume`` skips a file whose source still has that size and mtime
and whose destination still has that size; every other file is copied, and
the big ones continue from their own partial files (single-file resume).
After a run with no failure the journal is removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from ..local.dirfd import local_error
from .putresume import state_dir

logger = logging.getLogger("sshpipe.tree")

VERSION = 1


def tree_header(peer: str, *, upload: bool, sources: list[str], dest: str) -> dict[str, Any]:
    """What a tree copy is, for its journal: the local side's paths made absolute."""
    if upload:
        return {
            "peer": peer,
            "direction": "put",
            "sources": [os.path.abspath(s) for s in sources],
            "dest": dest,
        }
    return {"peer": peer, "direction": "get", "sources": sources, "dest": os.path.abspath(dest)}


def tree_journal_path(header: dict[str, Any]) -> Path:
    key = hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()
    return state_dir() / f"tree-{key}.journal"


class TreeJournal:
    """The files of one tree copy that are done: loaded at the start, appended as they finish.

    Args:
        header: what the copy is (peer, direction, sources, destination); a
            journal of another copy is never read.
    """

    def __init__(self, header: dict[str, Any]) -> None:
        self.header = {"v": VERSION, **header}
        self.path = tree_journal_path(self.header)
        self.done: dict[str, tuple[int, int | None]] = {}  # dest -> (size, source mtime)
        # Where the first run put the tree (scp's rule depends on whether the
        # destination existed then, and the first run made it exist).
        self.into_dir: bool | None = None
        self.earlier = False  # an earlier run of this copy was journaled (``open``)
        self._fd: int | None = None

    def __repr__(self) -> str:
        return f"<TreeJournal {self.path.name} done={len(self.done)}>"

    def open(self) -> None:
        """Read what an earlier run finished, then append to it."""
        self.done, self.into_dir = _load(self.path, self.header)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        fresh = not self.done and self.into_dir is None
        self.earlier = not fresh
        try:
            self._fd = os.open(self.path, flags | (os.O_TRUNC if fresh else 0), 0o600)
            if fresh:
                os.write(self._fd, (json.dumps(self.header) + "\n").encode())
        except OSError as exc:
            raise local_error(self.path, exc) from exc
        if self.done:
            logger.info("resuming a tree: %d files were copied before", len(self.done))

    def landing(self, into_dir: bool) -> bool:
        """Whether the sources go into the destination as a directory: as the first run did."""
        if self.into_dir is None:
            self.into_dir = into_dir
            self._append({"d": into_dir})
        return self.into_dir

    def copied_before(self, dest: str, size: int, mtime: int | None) -> bool:
        """Whether an earlier run copied this file from a source of this size and mtime."""
        return self.done.get(dest) == (size, mtime)

    def record(self, dest: str, size: int, mtime: int | None) -> None:
        self._append({"p": dest, "s": size, "m": mtime})

    def _append(self, entry: dict[str, Any]) -> None:
        if self._fd is not None:
            os.write(self._fd, (json.dumps(entry) + "\n").encode())

    def finish(self, complete: bool) -> None:
        """Close; a complete copy needs its journal no more."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if complete:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _load(
    path: Path, header: dict[str, Any]
) -> tuple[dict[str, tuple[int, int | None]], bool | None]:
    """(files done, where the tree landed) from a journal of this copy; nothing otherwise."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        raise local_error(path, exc) from exc
    try:
        if json.loads(lines[0]) != header:
            return {}, None
    except (IndexError, ValueError):
        return {}, None
    done: dict[str, tuple[int, int | None]] = {}
    into_dir = None
    for line in lines[1:]:
        try:  # a line torn by a kill is simply not trusted
            entry = json.loads(line)
            if "d" in entry:
                into_dir = bool(entry["d"])
            else:
                done[str(entry["p"])] = (int(entry["s"]), entry["m"])
        except (ValueError, KeyError, TypeError):
            continue
    return done, into_dir
