"""Which of sshpipe's temporary files may exist at one place: a server, or this machine.

Every temporary file is entered here *before* the request that creates it
goes out (an OPEN with CREAT; ``open(2)`` with ``O_CREAT``) and leaves once it
is known gone (renamed into place, removed, found missing). In between it is
in one of three states, moved by what the place answered::

    absent ──create answered with a handle──► there ──rename or remove done──► (gone)
      │                                         │
      └──create sent, answer lost──► unsure ◄───┴──rename or remove sent, answer lost

A create refused (permission denied, a read-only directory) leaves it absent:
nothing was made, and ``settle`` closes it without a REMOVE. The count a
failed run reports is read from here (``left``): the files whose create was
answered (there, for sure) and, apart, those whose fate an answer that never
came would have told (unsure): what the place holds is between the first
count and the sum, and every one of them is in the record.

``record`` is the durable side (``durability.ledger``): told each entry as it
comes (before the create) and goes, so a run killed outright (SIGKILL, a
crash) leaves a list the next run can sweep. Thread-safe: a download's local
files are made and renamed in worker threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal, Protocol

State = Literal["absent", "there", "unsure"]


class Record(Protocol):
    """Where entries are kept durably, in the order they come and go."""

    def add(self, path: str) -> None: ...

    def drop(self, path: str) -> None: ...

    def close(self) -> None:
        """Let it go: whatever is still in it is left for a sweep."""


@dataclass(slots=True)
class _Entry:
    state: State = "absent"
    creating: int = 0  # creates sent and not answered yet


class TempBook:
    """The temporary files of one place, each from before its create to its end.

    Args:
        record: told of each entry as it comes and goes (None: kept in memory only).
    """

    def __init__(self, record: Record | None = None) -> None:
        self.record = record
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        counts = {"absent": 0, "there": 0, "unsure": 0}
        for entry in self._entries.values():
            counts[entry.state] += 1
        return f"<TempBook {' '.join(f'{k}={v}' for k, v in counts.items())}>"

    def __len__(self) -> int:
        return len(self._entries)

    def tracks(self, path: str) -> bool:
        return path in self._entries

    def state(self, path: str) -> State | None:
        entry = self._entries.get(path)
        return entry.state if entry is not None else None

    # -- what we did, and what the place answered ---------------------------------

    def add(self, path: str) -> None:
        """A temporary name about to be created (before its create goes out)."""
        with self._lock:
            self._enter(path)

    def adopt(self, path: str) -> None:
        """A file of ours that is there now, under a temporary name (a rename made it)."""
        with self._lock:
            self._enter(path).state = "there"

    def create_sent(self, path: str) -> None:
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None:
                entry.creating += 1

    def create_answered(self, path: str, *, created: bool) -> None:
        """Its create's answer: a handle or descriptor (``created``), or a refusal."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is None:
                return
            entry.creating = max(0, entry.creating - 1)
            if created:
                entry.state = "there"

    def create_lost(self, path: str) -> None:
        """Its create went out and its answer never will come: it may have been made."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is None:
                return
            entry.creating = max(0, entry.creating - 1)
            if entry.state == "absent":
                entry.state = "unsure"

    def gone(self, path: str) -> None:
        """Known not there: renamed into place, removed, or found missing."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is None:
                return
            if entry.creating:  # a create still on its way may make it again
                entry.state = "absent"
                return
            self._close(path)

    def doubt(self, path: str) -> None:
        """A rename or remove of it went out and its answer was lost: it may be gone."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is not None and entry.state == "there":
                entry.state = "unsure"

    def settle(self, path: str) -> bool:
        """Its owner is done with it: closed if nothing was made. Whether it may be there."""
        with self._lock:
            entry = self._entries.get(path)
            if entry is None:
                return False
            if entry.state == "absent" and not entry.creating:
                self._close(path)
                return False
            return True

    # -- what is left -------------------------------------------------------------

    def left(self) -> tuple[list[str], list[str]]:
        """At the end: (there for sure, maybe there), sorted; entries never made are closed."""
        with self._lock:
            for path in [p for p, e in self._entries.items() if _never_made(e)]:
                self._close(path)
            there = sorted(p for p, e in self._entries.items() if e.state == "there")
            maybe = sorted(p for p, e in self._entries.items() if e.state != "there")
        return there, maybe

    def close(self) -> None:
        """Close the record (entries still here stay in it, for a sweep)."""
        with self._lock:
            if self.record is not None:
                self.record.close()

    def close_if_empty(self) -> None:
        """Close the record if nothing is in it (a process-wide book, between users)."""
        with self._lock:
            if self.record is not None and not self._entries:
                self.record.close()

    def _enter(self, path: str) -> _Entry:
        entry = self._entries.get(path)
        if entry is None:
            entry = self._entries[path] = _Entry()
            if self.record is not None:
                self.record.add(path)
        return entry

    def _close(self, path: str) -> None:
        del self._entries[path]
        if self.record is not None:
            self.record.drop(path)


def _never_made(entry: _Entry) -> bool:
    return entry.state == "absent" and not entry.creating
