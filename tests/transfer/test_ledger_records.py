"""The ledger's records: one per run, locked while it lives, swept once it is gone.

A record's owner is known dead when its lock can be taken: a process that
holds one is not swept, and the same record is once that process is killed.
What a record leaves pending is exactly what was entered and not closed; an
entry that cannot be one of our files, a torn line, a record that cannot be
read never fail a sweep, and never stay for ever.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sshpipe.core.tempbook import TempBook
from sshpipe.durability import ledger

OURS = "/d/.a.bin.sshpipe-0a1b2c.partial"
THEIRS = "/d/e/.b.sshpipe-ffffff.partial"


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _records() -> list[Path]:
    return sorted(ledger.ledger_dir().glob("*.ledger"))


def _pending(kind: str = "remote", place: str = "u@h:22") -> dict[str, int]:
    found: dict[str, int] = {}
    for record in ledger.dead_records(kind, place):
        record.keep = True
        found.update(record.pending)
    return found


def test_a_record_is_made_at_its_first_entry_and_goes_when_nothing_is_pending() -> None:
    record = ledger.RecordFile("remote", lambda: "u@h:22")
    assert _records() == []  # nothing entered: no file
    record.add(OURS)
    record.add(THEIRS)
    (path,) = _records()
    assert path.stat().st_mode & 0o777 == 0o600
    assert ledger.ledger_dir().stat().st_mode & 0o777 == 0o700
    assert _pending() == {}  # its run is alive (the lock): not swept
    record.drop(OURS)
    record.close()
    assert _pending() == {THEIRS: 0}  # let go with an entry: a run gone, to sweep
    record.drop(THEIRS)  # after close: not written (another run may hold it now)
    assert _pending() == {THEIRS: 0}


def test_a_record_with_nothing_pending_is_removed_at_close() -> None:
    record = ledger.RecordFile("local", lambda: "host")
    record.add(OURS)
    record.drop(OURS)
    record.close()
    assert _records() == []


def test_another_place_is_another_record() -> None:
    for place, path in (("u@h:22", OURS), ("u@h:2222", THEIRS)):
        record = ledger.RecordFile("remote", lambda place=place: place)
        record.add(path)
        record.close()
    assert _pending(place="u@h:22") == {OURS: 0}
    assert _pending(place="u@h:2222") == {THEIRS: 0}
    assert ledger.pending_places() == {"u@h:22": 1, "u@h:2222": 1}


_OWNER = """
import sys, time
from sshpipe.durability import ledger
record = ledger.RecordFile("remote", lambda: "u@h:22")
record.add({path!r})
print("ready", flush=True)
time.sleep(60)
"""


def test_a_killed_run_is_known_dead_by_its_lock_and_swept() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_OWNER.format(path=OURS))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "ready\n"
        assert _pending() == {}  # alive: its lock is held
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    finally:
        owner.kill()
    assert _pending() == {OURS: 0}  # the kernel let its lock go with it


def test_a_sweep_closes_what_it_removed_and_counts_refusals_until_it_gives_up() -> None:
    record = ledger.RecordFile("remote", lambda: "u@h:22")
    record.add(OURS)
    record.add(THEIRS)
    record.close()
    for sweep in range(ledger.MAX_FAILED_SWEEPS):
        for dead in ledger.dead_records("remote", "u@h:22"):
            dead.done(OURS)  # once gone, done again is nothing
            dead.refused(THEIRS)
        if sweep < ledger.MAX_FAILED_SWEEPS - 1:
            assert _pending() == {THEIRS: sweep + 1}
    assert _pending() == {} and _records() == []  # given up: the record is gone too


def test_lines_that_are_not_ours_or_torn_are_skipped() -> None:
    record = ledger.RecordFile("remote", lambda: "u@h:22")
    record.add(OURS)
    record.close()
    (path,) = _records()
    with path.open("a") as out:
        out.write('["+", 7]\n["?"]\nnot json\n["+", "/x/.y.sshpipe-abcdef.par')  # torn
    assert _pending() == {OURS: 0}


def test_an_unreadable_record_of_a_dead_run_is_removed() -> None:
    directory = ledger.ledger_dir()
    bad = directory / "remote-0123456789abcdef-0123456789ab.ledger"
    bad.write_text("garbage\n")
    assert list(ledger.dead_records("remote")) == []
    assert not bad.exists()


def test_entries_that_cannot_be_our_files_are_never_recorded() -> None:
    record = ledger.RecordFile("remote", lambda: "u@h:22")
    for path in ("/d/.a\x00b.sshpipe-0a1b2c.partial", "/etc/passwd", "/d/.a.sshpipe.partial"):
        record.add(path)
    assert _records() == []


def test_a_record_is_compacted_and_keeps_its_live_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ledger, "COMPACT_AT", 4096)
    record = ledger.RecordFile("remote", lambda: "u@h:22")
    record.add(OURS)
    for i in range(2000):  # a tree's files, each entered and closed
        path = f"/t/.f{i}.sshpipe-{i:06x}.partial"
        record.add(path)
        record.drop(path)
    (path,) = _records()
    assert path.stat().st_size < 3 * 4096  # rewritten, not 2,000 x 2 lines
    record.close()
    assert _pending() == {OURS: 0}


def test_a_record_its_live_owner_let_go_of_after_removing_it_is_not_swept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sweep that opened a record just before its owner compacted it (or closed it
    done) takes its lock once the owner lets go: the entries it reads live on elsewhere."""
    monkeypatch.setattr(ledger, "COMPACT_AT", 4096)
    record = ledger.RecordFile("remote", lambda: "u@h:22")
    record.add(OURS)  # a live file, still being written
    (old,) = _records()
    opened_before = os.open(old, os.O_RDWR)
    for i in range(200):
        path = f"/t/.f{i}.sshpipe-{i:06x}.partial"
        record.add(path)
        record.drop(path)
    assert _records() != [old]  # compacted into a new record, the old one removed
    assert ledger.claimed(opened_before, old, "remote", "u@h:22") is None
    assert _pending() == {}  # the live entry is in a record still held
    record.close()


def test_a_book_with_its_record_enters_before_and_closes_after() -> None:
    book = TempBook(ledger.RecordFile("remote", lambda: "u@h:22"))
    book.add(OURS)
    book.create_sent(OURS)
    book.create_answered(OURS, created=False)  # refused: nothing made
    book.add(THEIRS)
    book.create_sent(THEIRS)
    book.create_answered(THEIRS, created=True)
    there = ledger.report_left(book)
    assert there == [THEIRS]
    assert _pending() == {THEIRS: 0}


def test_records_of_an_earlier_version_are_adopted_their_bad_entries_dropped() -> None:
    legacy = ledger.ledger_dir().parent / "leftover"
    legacy.mkdir()
    (legacy / "x.json").write_text(
        json.dumps({"peer": "u@h:22", "paths": [OURS, "/d/.p\x00.sshpipe-0a1b2c.partial", 7]})
    )
    assert ledger.pending_places() == {"u@h:22": 1}
    assert _pending() == {OURS: 0}
    assert list(legacy.iterdir()) == []


def test_the_local_sweep_removes_only_our_files_and_follows_no_link(tmp_path: Path) -> None:
    ours = tmp_path / "dest" / ".f.sshpipe-0a1b2c.partial"
    ours.parent.mkdir()
    ours.write_bytes(b"cut off")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bait = elsewhere / ".g.sshpipe-0a1b2c.partial"
    bait.write_bytes(b"not to be touched")
    (tmp_path / "link").symlink_to(elsewhere)
    a_dir = tmp_path / "dest" / ".h.sshpipe-0a1b2c.partial"
    a_dir.mkdir()
    host = os.uname().nodename
    record = ledger.RecordFile("local", lambda: host)
    for path in (ours, tmp_path / "link" / bait.name, a_dir, tmp_path / "gone" / bait.name):
        record.add(str(path))
    record.close()
    swept = ledger.sweep_local()
    assert swept.removed == [str(ours)] and swept.pending == 0
    assert not ours.exists() and bait.exists() and a_dir.is_dir()
    assert _records() == []
