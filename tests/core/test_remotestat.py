"""``RemoteStat`` from SFTP attributes: the type from the mode bits, the name from the path."""

from __future__ import annotations

import dataclasses

import pytest

from sshpipe import RemoteStat
from sshpipe.core.codec import Attrs
from sshpipe.core.remotestat import remote_stat


@pytest.mark.parametrize(
    ("permissions", "kind"),
    [
        (0o100644, "file"),
        (0o040755, "directory"),
        (0o120777, "symlink"),
        (0o010644, "other"),  # a fifo
        (0o140755, "other"),  # a socket
        (0o020600, "other"),  # a character device
        (None, "file"),  # no mode sent: taken for a file, as a transfer does
    ],
)
def test_the_type_comes_from_the_mode_bits(permissions: int | None, kind: str) -> None:
    found = remote_stat("/d/x", Attrs(permissions=permissions))
    assert found.type == kind
    assert (found.is_file(), found.is_dir(), found.is_symlink()) == (
        kind == "file",
        kind == "directory",
        kind == "symlink",
    )


@pytest.mark.parametrize(
    ("path", "name"), [("/d/x", "x"), ("/d/sub/", "sub"), ("x", "x"), ("/", "/"), (".", ".")]
)
def test_the_name_is_the_last_component(path: str, name: str) -> None:
    assert remote_stat(path, Attrs()).name == name


def test_every_attribute_is_kept_and_the_result_is_frozen() -> None:
    attrs = Attrs(size=5, uid=1, gid=2, permissions=0o100600, atime=3, mtime=4)
    found = remote_stat("/d/x", attrs, name="x")
    assert found == RemoteStat(
        path="/d/x", name="x", type="file", size=5, mode=0o100600, mtime=4, atime=3, uid=1, gid=2
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.size = 6  # type: ignore[misc]
