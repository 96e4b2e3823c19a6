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
