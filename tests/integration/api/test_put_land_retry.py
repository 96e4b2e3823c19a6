"""A put whose connection breaks at the rename, after its check passed.

The landing step is retried on a new connection. The check is not done twice
(its bytes are already proven), and a rename the server did before the break
is found done rather than tried again over the file it put in place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import sshpipe
import sshpipe.transfer.upload as upload
from tests.support.files import leftover_temps
from tests.support.peers import Peer

HASHED = sshpipe.TransferConfig(verify="hash")


def count_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    checks: list[str] = []
    real = upload.verify_copy

    async def counted(*args: Any, **kwargs: Any) -> Any:
        checks.append(kwargs["shown"])
        return await real(*args, **kwargs)

    monkeypatch.setattr(upload, "verify_copy", counted)
    return checks


@pytest.mark.parametrize("renamed_before_break", [False, True])
async def test_a_break_at_the_rename_neither_checks_nor_renames_twice(
    openssh_peer: Peer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    renamed_before_break: bool,
) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    (tmp_path / "up.bin").write_bytes(data)
    checks = count_checks(monkeypatch)
    renames: list[str] = []
    real_rename = upload.rename_into_place

    async def breaks_once(*args: Any, **kwargs: Any) -> None:
        renames.append(args[1])
        if len(renames) == 1:
            if renamed_before_break:  # the reply is what the break took
                await real_rename(*args, **kwargs)
            raise sshpipe.ConnectionBroken("cut at the rename (test)")
        await real_rename(*args, **kwargs)

    monkeypatch.setattr(upload, "rename_into_place", breaks_once)
    async with openssh_peer.client(HASHED) as sp:
        stats = await sp.put(str(tmp_path / "up.bin"), openssh_peer.remote("up.bin"))
    assert (openssh_peer.root / "up.bin").read_bytes() == data
    assert stats.verified == "hash-remote" and stats.reconnects == 1
    assert len(checks) == 1, checks  # the retry went straight to the rename
    assert len(renames) == (1 if renamed_before_break else 2), renames
    assert leftover_temps(openssh_peer.root) == []


@pytest.mark.parametrize("there", ["our hard link", "a twin someone put there"])
async def test_a_break_between_the_no_clobber_link_and_its_unlink(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, there: str
) -> None:
    """overwrite=False lands by hardlink@openssh.com, then removes the temp name.

    Cut between the two, the retry finds both names holding the upload: that is
    done, not "already exists". A file someone else put there, alike in size,
    mode and times to the second, is still refused and kept.
    """
    data = os.urandom(2 * 1024 * 1024 + 5)
    (tmp_path / "up.bin").write_bytes(data)
    dest = openssh_peer.root / "once.bin"
    landings: list[str] = []
    real_rename = upload.rename_into_place

    async def breaks_after_the_link(*args: Any, **kwargs: Any) -> None:
        landings.append(args[1])
        if len(landings) > 1:
            await real_rename(*args, **kwargs)
            return
        temp = openssh_peer.root / Path(args[1]).name
        if there == "our hard link":
            os.link(temp, dest)
        else:
            dest.write_bytes(temp.read_bytes())
            os.chmod(dest, temp.stat().st_mode)
            os.utime(dest, ns=(temp.stat().st_atime_ns, temp.stat().st_mtime_ns))
        raise sshpipe.ConnectionBroken("cut between the link and the unlink (test)")

    monkeypatch.setattr(upload, "rename_into_place", breaks_after_the_link)
    async with openssh_peer.client() as sp:
        if there == "our hard link":
            stats = await sp.put(
                str(tmp_path / "up.bin"), openssh_peer.remote("once.bin"), overwrite=False
            )
            assert stats.reconnects == 1 and len(landings) == 1, landings
        else:
            with pytest.raises(sshpipe.RemoteExists):
                await sp.put(
                    str(tmp_path / "up.bin"), openssh_peer.remote("once.bin"), overwrite=False
                )
            assert len(landings) == 2, landings
    assert dest.read_bytes() == data
    assert dest.stat().st_nlink == 1
    assert leftover_temps(openssh_peer.root) == []
    dest.unlink()
