"""The resume journal: which ranges of a ``.partial`` are complete, with a SHA-256 each.

A download keeps it beside its local partial file; an upload keeps it in the
user's state directory (``_putresume.py``), since the remote side has no cheap
append and the source's directory may be read-only.

Replies come back out of order, so a partial file is not a prefix: the journal
lists every range written (one JSON line each, appended by the writer after
the bytes are in the file). ``--resume`` trusts a range only if the bytes on
disk still hash to what the journal says, so a torn last line, a range whose
write did not reach the disk, or a file damaged since are asked for again.
The first line says what the copy is of (path, size, mtime): a source that
changed since is refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from ._localio import Batch, local_error
from ._readplan import Range

VERSION = 1


def journal_name(local: str | os.PathLike[str]) -> Path:
    target = Path(local)
    return target.with_name(f".{target.name}.sshpipe.journal")


def resume_name(local: str | os.PathLike[str]) -> Path:
    """The partial file's name when resuming: fixed, so the next run finds it."""
    target = Path(local)
    return target.with_name(f".{target.name}.sshpipe.partial")


class Journal:
    """Appends the ranges a transfer completed; ``load`` reads them back for ``--resume``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def start(self, header: dict[str, Any], *, append: bool) -> None:
        """Open for appending; a new journal (not ``append``) starts with ``header``."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        try:
            if not append:
                flags |= os.O_TRUNC
            self._fd = os.open(self.path, flags, 0o600)
            if not append:
                os.write(self._fd, (json.dumps({"v": VERSION, **header}) + "\n").encode())
        except OSError as exc:
            raise local_error(self.path, exc) from exc

    def record(self, batch: Batch) -> None:
        """Called by the writer once these pieces are in the file."""
        entries = []
        for offset, chunks in batch:
            digest = hashlib.sha256()
            length = 0
            for chunk in chunks:
                digest.update(chunk)
                length += len(chunk)
            entries.append((offset, length, digest.hexdigest()))
        self.record_hashed(entries)

    def record_hashed(self, entries: list[tuple[int, int, str]]) -> None:
        """Append ranges already hashed: (offset, length, SHA-256 hex).

        Raises:
            OSError: the journal could not be written (the caller names it).
        """
        if self._fd is None or not entries:
            return
        lines = [
            json.dumps({"o": offset, "n": length, "h": digest})
            for offset, length, digest in entries
        ]
        os.write(self._fd, ("\n".join(lines) + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def load(path: Path) -> tuple[dict[str, Any], list[tuple[int, int, str]]] | None:
    """(header, ranges) of a journal, or None if there is none or it is not ours."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise local_error(path, exc) from exc
    try:
        header = json.loads(lines[0])
    except (IndexError, ValueError):
        return None
    if not isinstance(header, dict) or header.get("v") != VERSION:
        return None
    ranges = []
    for line in lines[1:]:
        try:  # a line torn by a kill is simply not trusted
            entry = json.loads(line)
            ranges.append((int(entry["o"]), int(entry["n"]), str(entry["h"])))
        except (ValueError, KeyError, TypeError):
            continue
    return header, ranges


def verified_ranges(partial: Path, ranges: list[tuple[int, int, str]]) -> list[Range]:
    """The journal's ranges whose bytes in ``partial`` still have the recorded hash."""
    good: list[Range] = []
    try:
        fd = os.open(partial, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return good
    except OSError as exc:
        raise local_error(partial, exc) from exc
    try:
        for offset, length, digest in ranges:
            data = os.pread(fd, length, offset)
            if len(data) == length and hashlib.sha256(data).hexdigest() == digest:
                good.append(Range(offset, length))
    finally:
        os.close(fd)
    return good
