"""fsspec's tree operations fail with the OSError subclass of the cause, its errno and path.

``fs.get``/``fs.put`` of many files run sshpipe's tree pipeline; what fails in
it (a remote file refused, a local path in the way) reaches the caller as the
single-file operations' errors do: ``PermissionError``, ``IsADirectoryError``...
with the errno and the path, sshpipe's error as the ``__cause__``.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import sshpipe
from sshpipe.fsspec import SSHPipeFileSystem
from sshpipe.fsspec._oserrors import as_oserror
from sshpipe.testing.hostile import Recorder, denies_open
from tests.support.fsspecfs import sshpipe_fs
from tests.support.peers import Peer, StartServer

__all__ = ["sshpipe_fs"]  # the session's filesystem, a fixture

# As many as make one directory a tree transfer (fsspec._bulk.TREE_FROM) and more.
FILES = 12


def _files(root: Path) -> None:
    root.mkdir(parents=True)
    for i in range(FILES):
        (root / f"f{i:02}.bin").write_bytes(bytes([i]) * 1000)
    (root / "locked.bin").write_bytes(b"secret")


def _fs(peer: Peer) -> SSHPipeFileSystem:
    return SSHPipeFileSystem(
        host=peer.host,
        port=peer.port,
        username=peer.user,
        identity_files=[str(peer.client_key)],
        known_hosts=[str(peer.known_hosts)],
        ssh_config=[],
        asynchronous=True,
        skip_instance_cache=True,
    )


async def test_a_tree_get_refused_on_the_server_is_a_permission_error(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    async with faulty_server(denies_open(Recorder())) as peer:
        _files(peer.root / "tree")
        fs = _fs(peer)
        try:
            with pytest.raises(PermissionError) as caught:
                await fs._get("/tree/", str(tmp_path / "out"), recursive=True)
        finally:
            await fs._close()
    assert caught.value.errno == errno.EACCES
    assert caught.value.filename == "/tree/locked.bin"
    assert isinstance(caught.value.__cause__, sshpipe.RemotePermissionDenied)


def test_a_local_directory_in_the_way_of_a_tree_get_is_an_is_a_directory_error(
    sshpipe_fs: SSHPipeFileSystem, openssh_peer: Peer, tmp_path: Path
) -> None:
    _files(openssh_peer.root / "tree")
    blocked = tmp_path / "out" / "f03.bin"
    blocked.mkdir(parents=True)
    with pytest.raises(IsADirectoryError) as caught:
        sshpipe_fs.get(str(openssh_peer.root / "tree") + "/", str(tmp_path / "out"), recursive=True)
    assert caught.value.errno == errno.EISDIR
    assert caught.value.filename == str(blocked)
    assert isinstance(caught.value.__cause__, sshpipe.LocalError)


def test_a_tree_put_of_a_missing_source_is_a_file_not_found_error(
    sshpipe_fs: SSHPipeFileSystem, openssh_peer: Peer, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        sshpipe_fs.put(
            [str(tmp_path / f"missing{i}") for i in range(FILES)],
            str(openssh_peer.root / "up") + "/",
        )
    assert caught.value.errno == errno.ENOENT
    assert str(caught.value.filename).startswith(str(tmp_path / "missing"))


async def test_an_incomplete_tree_is_the_errno_its_failures_share(
    faulty_server: StartServer, tmp_path: Path
) -> None:
    async with faulty_server(denies_open(Recorder())) as peer:
        _files(peer.root / "tree")
        (peer.root / "tree" / "sub").mkdir()
        (peer.root / "tree" / "sub" / "locked.bin").write_bytes(b"another")
        async with peer.client() as client:
            with pytest.raises(sshpipe.IncompleteTransfer) as caught:
                await client.get("/tree", str(tmp_path / "out"), recursive=True)
            shared = as_oserror(caught.value)
            (tmp_path / "out2" / "tree" / "f01.bin").mkdir(parents=True)
            with pytest.raises(sshpipe.IncompleteTransfer) as mixed:
                await client.get("/tree", str(tmp_path / "out2"), recursive=True)
    assert [f.errno for f in caught.value.failures] == [errno.EACCES, errno.EACCES]
    assert isinstance(shared, PermissionError) and shared.errno == errno.EACCES
    assert shared.filename == caught.value.failures[0].path
    assert "2 of " in str(shared)
    # A local EISDIR beside the remote EACCES: no one subclass is right.
    assert {f.errno for f in mixed.value.failures} == {errno.EACCES, errno.EISDIR}
    other = as_oserror(mixed.value)
    assert type(other) is OSError and other.errno == errno.EIO
