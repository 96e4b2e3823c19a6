"""The ``sshpipe://`` filesystem on the session's sshd, for the fsspec tests.

``sshpipe_fs`` is one filesystem for the whole session (fsspec caches
instances by their options anyway): one set of connections serves every
test. Each test works in a directory of its own under the server's root.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fsspec
import pytest

import sshpipe
from sshpipe.fsspec import SSHPipeFileSystem
from sshpipe.testing.sshd import SSHServerInfo

__all__ = ["opened", "register", "sshpipe_fs", "storage_options"]


def register() -> None:
    """Make ``sshpipe://`` known where the package's entry point is not installed yet
    (a checkout run without ``pip install -e .``); the entry point wins where it is."""
    try:
        fsspec.get_filesystem_class("sshpipe")
    except ValueError:
        fsspec.register_implementation("sshpipe", SSHPipeFileSystem)


def storage_options(info: SSHServerInfo) -> dict[str, Any]:
    """What a user passes to reach this server (no ssh_config of the machine read)."""
    return {
        "host": info.host,
        "port": info.port,
        "username": info.user,
        "identity_files": [str(info.client_key)],
        "known_hosts": [str(info.known_hosts)],
        "ssh_config": [],
    }


@pytest.fixture(scope="session")
def sshpipe_fs(openssh: SSHServerInfo) -> Iterator[SSHPipeFileSystem]:
    register()
    fs = fsspec.filesystem("sshpipe", **storage_options(openssh))
    assert isinstance(fs, SSHPipeFileSystem)
    yield fs
    fs.close()


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every RemoteFile the filesystem opens, to read its counters afterwards."""
    files: list[Any] = []
    original = sshpipe.Client.open

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = original(self, *args, **kwargs)
        if args:  # a path: a RemoteFile (without one, open() connects)
            files.append(made)
        return made

    monkeypatch.setattr(sshpipe.Client, "open", recording)
    return files
