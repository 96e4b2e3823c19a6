"""``fs.get`` through ``sshpipe://`` against sshd: the right files, and no look-ups on the wire.

fsspec's own ``_get`` STATs a source before it gets it, and asks again of
paths its listings described: a round trip each. These tests record every
request the client sends and fail if those look-ups come back: a single file
costs its OPEN and the STAT sent with it, as ``sshpipe get`` does.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sshpipe.core import codec
from sshpipe.fsspec import SSHPipeFileSystem
from sshpipe.testing.sshd import SSHServerInfo
from sshpipe.transport.requests import RequestChannel
from tests.support.fsspecfs import sshpipe_fs

__all__ = ["sshpipe_fs"]  # the session's filesystem, a fixture

MiB = 1024 * 1024
# The requests that look at a path: what a get may send besides its READs and CLOSEs.
LOOKS = {
    codec.FXP_STAT: "STAT",
    codec.FXP_LSTAT: "LSTAT",
    codec.FXP_OPENDIR: "OPENDIR",
    codec.FXP_REALPATH: "REALPATH",
    codec.FXP_OPEN: "OPEN",
}


@pytest.fixture
def looks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The look-ups and OPENs every SFTP channel sends, in order, while the test runs."""
    sent: list[str] = []
    original = RequestChannel._send

    def recording(self: RequestChannel, request_id: int, data: bytes) -> None:
        kind = LOOKS.get(data[4])  # after the 4-byte length: the message type
        if kind is not None:
            sent.append(kind)
        original(self, request_id, data)

    monkeypatch.setattr(RequestChannel, "_send", recording)
    yield sent


@pytest.fixture
def here(openssh: SSHServerInfo, tmp_path: Path) -> Path:
    root = openssh.root / f"fsspec-get-{tmp_path.name}"
    root.mkdir()
    return root


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_one_file_costs_its_open_and_stat(
    sshpipe_fs: SSHPipeFileSystem, here: Path, tmp_path: Path, looks: list[str]
) -> None:
    data = os.urandom(3 * MiB + 11)
    (here / "f.bin").write_bytes(data)
    sshpipe_fs.get(str(here / "f.bin"), str(tmp_path / "as-named"))
    assert looks == ["STAT", "OPEN"]  # the STAT goes out with the OPEN, none before it
    looks.clear()
    (tmp_path / "into").mkdir()
    sshpipe_fs.get(str(here / "f.bin"), str(tmp_path / "into"))
    assert looks == ["STAT", "OPEN"]
    assert _files(tmp_path) == {"as-named": data, "into/f.bin": data}


def test_a_directory_without_recursive_copies_nothing(
    sshpipe_fs: SSHPipeFileSystem, here: Path, tmp_path: Path, looks: list[str]
) -> None:
    (here / "d").mkdir()
    (here / "d" / "x").write_bytes(b"x")
    out = tmp_path / "out"
    out.mkdir()
    sshpipe_fs.get(str(here / "d"), str(out / "d"))
    assert looks == ["STAT", "OPEN"]  # its OPEN told: no listing, no look first
    assert list(out.iterdir()) == []  # nothing made, no temporary file left


def test_missing_source_raises_after_one_look(
    sshpipe_fs: SSHPipeFileSystem, here: Path, tmp_path: Path, looks: list[str]
) -> None:
    with pytest.raises(FileNotFoundError):
        sshpipe_fs.get(str(here / "nope"), str(tmp_path / "nope"))
    assert looks == ["STAT", "OPEN"]
    assert list(tmp_path.iterdir()) == []


def test_recursive_get_lists_each_directory_once(
    sshpipe_fs: SSHPipeFileSystem, here: Path, tmp_path: Path, looks: list[str]
) -> None:
    tree = {"a": os.urandom(70_000), "sub/b": os.urandom(5), "sub/deeper/c": b"", "d": b"d"}
    for name, data in tree.items():
        (here / "t" / name).parent.mkdir(parents=True, exist_ok=True)
        (here / "t" / name).write_bytes(data)
    sshpipe_fs.get(str(here / "t"), str(tmp_path / "copy"), recursive=True)
    assert _files(tmp_path / "copy") == tree
    # The root's one STAT (is it a directory?), a listing per directory, and
    # each file's OPEN with its STAT: nothing asked twice.
    assert looks.count("OPENDIR") == 3
    assert looks.count("OPEN") == looks.count("STAT") - 1 == len(tree)
    assert "LSTAT" not in looks


def test_glob_stats_no_match_again(
    sshpipe_fs: SSHPipeFileSystem, here: Path, tmp_path: Path, looks: list[str]
) -> None:
    for name in ("x1.csv", "x2.csv", "x3.csv", "y.txt"):
        (here / name).write_bytes(name.encode() * 100)
    (here / "z.csv").mkdir()  # a directory the glob matches: not copied
    out = tmp_path / "out"
    sshpipe_fs.get(str(here / "*.csv"), str(out) + "/")
    assert _files(out) == {n: n.encode() * 100 for n in ("x1.csv", "x2.csv", "x3.csv")}
    assert looks.count("OPENDIR") == 1
    assert looks.count("STAT") == 1 + 3  # the root's; each file's with its OPEN


def test_list_with_a_directory_in_it(
    sshpipe_fs: SSHPipeFileSystem, here: Path, tmp_path: Path, looks: list[str]
) -> None:
    (here / "f").write_bytes(b"file")
    (here / "d").mkdir()
    out = tmp_path / "out"
    sshpipe_fs.get([str(here / "f"), str(here / "d")], str(out) + "/")
    assert _files(out) == {"f": b"file"}
    assert (out / "d").is_dir()  # a directory named in a list is made (fsspec's rule)
    assert looks.count("STAT") == looks.count("OPEN") == 2  # found by their OPENs


def test_missing_destination_directory_is_made(
    sshpipe_fs: SSHPipeFileSystem, here: Path, tmp_path: Path
) -> None:
    (here / "f").write_bytes(b"abc")
    (here / "d").mkdir()
    sshpipe_fs.get(str(here / "f"), str(tmp_path / "new" / "deeper" / "f"))
    assert _files(tmp_path) == {"new/deeper/f": b"abc"}
    # A directory is still looked at first there: fsspec makes no parents for it.
    sshpipe_fs.get(str(here / "d"), str(tmp_path / "other" / "d"))
    assert not (tmp_path / "other").exists()
