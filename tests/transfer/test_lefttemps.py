"""The record of temp files an upload could not remove: only our names, per server."""

from __future__ import annotations

from pathlib import Path

import pytest

from sshpipe.durability import lefttemps


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))


def test_recorded_per_server_and_forgotten_once_removed() -> None:
    ours = ["/d/.a.bin.sshpipe-0a1b2c.partial", "/d/e/.b.sshpipe-ffffff.partial"]
    lefttemps.record("u@h:22", ours)
    assert lefttemps.peek("u@h:22") == sorted(ours)
    assert lefttemps.peek("u@h:2222") == []  # another server's record is another file
    lefttemps.forget("u@h:22", ours[:1])
    assert lefttemps.peek("u@h:22") == ours[1:]
    lefttemps.forget("u@h:22", ours[1:])
    assert lefttemps.peek("u@h:22") == []


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/d/a.bin.sshpipe-0a1b2c.partial",  # no leading dot: not a name we make
        "/d/.a.sshpipe-0a1b2c.partial/../../x",
        "/d/.a.sshpipe-XYZ123.partial",
        "/d/.a.sshpipe-0a1b2c.partialx",
    ],
)
def test_only_our_temp_names_are_ever_kept(path: str) -> None:
    assert not lefttemps.is_temp_name(path)
    lefttemps.record("u@h:22", [path])
    assert lefttemps.peek("u@h:22") == []


def test_a_tampered_record_removes_nothing_else(tmp_path: Path) -> None:
    lefttemps.record("u@h:22", ["/d/.a.sshpipe-0a1b2c.partial"])
    (record,) = (tmp_path / "sshpipe" / "leftover").iterdir()
    record.write_text('{"peer": "u@h:22", "paths": ["/home/u/.ssh/id_ed25519", 7]}')
    assert lefttemps.peek("u@h:22") == []
    record.write_text("not json")
    assert lefttemps.peek("u@h:22") == []
