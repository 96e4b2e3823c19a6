"""A full local disk: one clear line, exit 3, nothing half-written (a 1 MiB tmpfs of our own).

Mounting needs root (CI runs the suite as root first); elsewhere these tests skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import assert_one_line_error, run_cli
from tests.support.files import leftover_temps, mounted_tmpfs
from tests.support.peers import Peer

TMPFS_BYTES = 1024 * 1024


@pytest.fixture
def full_disk(needs_root: None, tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted under tmp_path (mounting needs root), unmounted afterwards."""
    with mounted_tmpfs(tmp_path / "small-disk", TMPFS_BYTES) as mount:
        yield mount


def test_a_file_bigger_than_the_disk_fails_in_one_line_and_leaves_nothing(
    openssh_peer: Peer, full_disk: Path
) -> None:
    (openssh_peer.root / "big.bin").write_bytes(os.urandom(3 * TMPFS_BYTES))
    target = full_disk / "big.bin"
    result = run_cli("get", *openssh_peer.cli_options(), openssh_peer.spec("big.bin"), str(target))
    assert_one_line_error(result, 3, "local:", str(target), "No space left on device")
    assert os.listdir(full_disk) == []  # neither the file nor its .partial


def test_a_tree_stops_at_a_full_disk_and_keeps_only_whole_files(
    openssh_peer: Peer, full_disk: Path
) -> None:
    src = openssh_peer.root / "tree"
    files = {}
    for i in range(40):  # 2.5 MiB in 64 KiB files: about a third fits
        data = os.urandom(64 * 1024)
        (src / f"d{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 4}" / f"f{i:02}.bin").write_bytes(data)
        files[f"d{i % 4}/f{i:02}.bin"] = data
    dest = full_disk / "tree"
    result = run_cli("get", "-r", *openssh_peer.cli_options(), openssh_peer.spec("tree"), str(dest))
    # The first ENOSPC stops the tree: one line, not one per remaining file.
    assert_one_line_error(result, 3, "local:", "No space left on device")
    assert leftover_temps(full_disk) == []
    copied = [p for p in dest.rglob("*") if p.is_file()]
    assert copied, "some files should have fitted before the disk was full"
    for path in copied:  # whatever is there under a final name is whole
        assert path.read_bytes() == files[str(path.relative_to(dest))]


def test_a_full_remote_disk_fails_in_one_line_and_keeps_the_old_file(
    openssh_peer: Peer, full_disk: Path, tmp_path: Path
) -> None:
    """sshd writing into a full file system: sftp-server says only "Failure" (SFTP v3 has
    no code for it), so the message says what such a failure on a write usually is."""
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(3 * TMPFS_BYTES))
    (full_disk / "big.bin").write_bytes(b"the old file")
    result = run_cli(
        "put",
        *openssh_peer.cli_options(),
        str(source),
        openssh_peer.spec(str(full_disk / "big.bin")),
    )
    assert_one_line_error(result, 4, "remote:", str(full_disk / "big.bin"), "full")
    assert (full_disk / "big.bin").read_bytes() == b"the old file"
    assert os.listdir(full_disk) == ["big.bin"]  # no temporary file left behind
