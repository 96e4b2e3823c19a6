"""An upload that must not replace (``put(overwrite=False)``, fsspec's ``mode="create"``).

The early look (the STAT sent with the OPEN) saves sending a file that would be
refused; the guarantee is the commit itself: hardlink@openssh.com (link(2)
refuses an existing name), else a plain RENAME, which filexfer-02 §6.5 says
must fail over an existing file. The race is staged with a hook: a file
created at the destination just before the commit, after every look.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import sshpipe
import sshpipe.transfer.upload
from sshpipe.fsspec import SSHPipeFileSystem
from sshpipe.testing.embedded import embedded_server
from sshpipe.testing.restrictive import NoExtensions, restricted_server
from sshpipe.transport.sftp import SFTPSession
from tests.support.files import leftover_temps, random_file
from tests.support.fsspecfs import sshpipe_fs
from tests.support.peers import ALL_SERVER_PARAMS, Peer, from_embedded

__all__ = ["sshpipe_fs"]  # the session's filesystem, a fixture

HARDLINK = "hardlink@openssh.com"
RACER = b"created by someone else meanwhile"


@pytest.fixture(params=ALL_SERVER_PARAMS)
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Peer]:
    if request.param == "asyncssh":
        async with embedded_server(tmp_path / "embedded") as embedded:
            yield from_embedded(embedded)
        return
    yield request.getfixturevalue(f"{request.param}_peer")


@pytest.fixture
def racer(monkeypatch: pytest.MonkeyPatch) -> Callable[[Path, bool], list[bool]]:
    """``racer(dest, hide_hardlink)``: ``dest`` is created just before the commit (each
    time it is reached: the list records them); with ``hide_hardlink`` the session
    forgets the server offers hardlink@openssh.com, so the plain RENAME decides."""
    original = sshpipe.transfer.upload.rename_into_place

    def arm(dest: Path, hide_hardlink: bool) -> list[bool]:
        reached: list[bool] = []

        async def racing(sftp: SFTPSession, *args: Any, **kwargs: Any) -> None:
            reached.append(True)
            if hide_hardlink:
                sftp.extensions = {k: v for k, v in sftp.extensions.items() if k != HARDLINK}
            dest.write_bytes(RACER)
            await original(sftp, *args, **kwargs)

        monkeypatch.setattr(sshpipe.transfer.upload, "rename_into_place", racing)
        return reached

    return arm


@pytest.mark.parametrize("via", ["hardlink", "rename"])
async def test_a_file_created_before_the_commit_is_not_replaced(
    server: Peer, tmp_path: Path, racer: Callable[[Path, bool], list[bool]], via: str
) -> None:
    data = random_file(tmp_path / "src.bin", 300_000)
    dest = server.root / "dest.bin"
    reached = racer(dest, via == "rename")
    async with server.client() as client:
        with pytest.raises(sshpipe.RemoteExists) as caught:
            await client.put(str(tmp_path / "src.bin"), server.remote("dest.bin"), overwrite=False)
        assert caught.value.path == server.remote("dest.bin")
        assert reached == [True]
        assert dest.read_bytes() == RACER
        # Nothing there: the same call lands the file, the commit is not refused.
        dest.unlink()
        reached.clear()
        racer(server.root / "elsewhere", via == "rename")
        await client.put(str(tmp_path / "src.bin"), server.remote("dest.bin"), overwrite=False)
    assert dest.read_bytes() == data
    assert leftover_temps(server.root) == []


async def test_an_existing_file_is_refused_before_a_byte_is_sent(
    openssh_peer: Peer, tmp_path: Path, racer: Callable[[Path, bool], list[bool]]
) -> None:
    random_file(tmp_path / "src.bin", 1_000_000)
    dest = openssh_peer.root / "dest.bin"
    dest.write_bytes(b"old")
    reached = racer(openssh_peer.root / "unused", False)
    async with openssh_peer.client() as client:
        with pytest.raises(sshpipe.RemoteExists):
            await client.put(
                str(tmp_path / "src.bin"), openssh_peer.remote("dest.bin"), overwrite=False
            )
        with pytest.raises(sshpipe.UsageError):
            await client.put([str(tmp_path / "src.bin")], openssh_peer.remote("d"), overwrite=False)
        # The default replaces, as before.
        stats = await client.put(str(tmp_path / "src.bin"), openssh_peer.remote("dest.bin"))
    assert reached == [True]  # only the replacing put reached a commit
    assert stats.bytes == 1_000_000 and dest.stat().st_size == 1_000_000
    assert leftover_temps(openssh_peer.root) == []


async def test_without_extensions_it_looks_first_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = random_file(tmp_path / "src.bin", 100_000)
    async with restricted_server(tmp_path / "server", NoExtensions()) as embedded:
        peer = from_embedded(embedded)
        (peer.root / "taken").write_bytes(b"old")
        with caplog.at_level(logging.INFO, logger="sshpipe.transport.remoteplace"):
            async with peer.client() as client:
                await client.put(str(tmp_path / "src.bin"), "/new", overwrite=False)
                with pytest.raises(sshpipe.RemoteExists):
                    await client.put(str(tmp_path / "src.bin"), "/taken", overwrite=False)
        assert (peer.root / "new").read_bytes() == data
        assert (peer.root / "taken").read_bytes() == b"old"
        assert any("looked for it before the rename" in r.getMessage() for r in caplog.records)
        assert leftover_temps(peer.root) == []


@pytest.mark.openssh
def test_fsspec_create_modes_never_replace_a_file_created_meanwhile(
    sshpipe_fs: SSHPipeFileSystem,
    openssh_peer: Peer,
    tmp_path: Path,
    racer: Callable[[Path, bool], list[bool]],
) -> None:
    random_file(tmp_path / "src.bin", 50_000)
    dest = openssh_peer.root / "made.bin"
    reached = racer(dest, False)
    fs = sshpipe_fs
    with pytest.raises(FileExistsError):
        fs.put_file(str(tmp_path / "src.bin"), str(dest), mode="create")
    assert dest.read_bytes() == RACER and reached == [True]
    dest.unlink()
    with pytest.raises(FileExistsError):
        fs.put(str(tmp_path / "src.bin"), str(dest), mode="create")
    assert dest.read_bytes() == RACER and reached == [True, True]
    assert leftover_temps(openssh_peer.root) == []
