"""A RENAME said done is proven by what both names show after it (``remoteplace``).

The upload's own (``rename_into_place``) where the file it replaces looks
like the file written to the second (the temporary file's mtime is marked,
then put back), against sshd and a server whose RENAME lies; and a user's
``Client.rename`` (``rename_proven``) on the same. The command-line cases
are in ``test_hostile_server`` and ``test_interop``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.attacks import Scenario, attack_server, populate
from sshpipe.testing.embedded import embedded_server
from sshpipe.transfer.channelspec import channel_spec
from sshpipe.transport.remoteplace import Landing, rename_into_place
from tests.support.peers import Peer, from_embedded

DEFAULTS = channel_spec(sshpipe.TransferConfig())  # the channels of the default config

TIMES = (1_000_000_000, 1_000_000_007)


def _alike(*paths: Path) -> None:
    """Files of the same size, mode and times: only their bytes differ."""
    for path in paths:
        path.write_bytes(os.urandom(5000))
        path.chmod(0o640)
        os.utime(path, TIMES)


@pytest.fixture
async def hostile(tmp_path: Path) -> AsyncIterator[Peer]:
    async with embedded_server(
        tmp_path / "server", sftp_factory=attack_server(Scenario(tmp_path / "victim"))
    ) as server:
        populate(server.root)
        yield from_embedded(server)


async def _rename(peer: Peer, temp: str, dest: str) -> None:
    """``rename_into_place`` as an upload calls it, told what it replaces and what it wrote."""
    async with peer.client() as client, client._pool.lease(DEFAULTS) as lease:
        sftp = lease.channels[0]
        landing = Landing(5000, await sftp.stat(dest), await sftp.lstat(temp))
        await rename_into_place(sftp, temp, dest, landing)


async def test_a_file_replaced_by_its_twin_is_proven_by_a_mark_and_keeps_its_times(
    openssh_peer: Peer,
) -> None:
    root = openssh_peer.root
    _alike(root / ".f.tmp", root / "f")
    new = (root / ".f.tmp").read_bytes()
    await _rename(openssh_peer, openssh_peer.remote(".f.tmp"), openssh_peer.remote("f"))
    assert (root / "f").read_bytes() == new
    assert int((root / "f").stat().st_mtime) == TIMES[1]  # the mark put back
    assert sorted(os.listdir(root)) == ["f"]


@pytest.mark.parametrize("where", ["lying", "unlinking"])
async def test_a_lie_over_a_twin_is_caught_by_the_mark(hostile: Peer, where: str) -> None:
    _alike(hostile.root / where / ".f.tmp", hostile.root / where / "f")
    old = (hostile.root / where / "f").read_bytes()
    with pytest.raises(sshpipe.ProtocolError, match="said it renamed"):
        await _rename(hostile, f"/{where}/.f.tmp", f"/{where}/f")
    assert (hostile.root / where / "f").read_bytes() == old


async def test_client_rename_is_proven(hostile: Peer, openssh_peer: Peer) -> None:
    """Honest (sshd, hard links too: rename(2) leaves both names) and lying servers.

    Two names that show the same attributes (hard links, or twins to the second)
    cannot be told apart here: a user's rename marks nothing.
    """
    (openssh_peer.root / "a").write_bytes(b"a")
    os.link(openssh_peer.root / "a", openssh_peer.root / "b")
    (openssh_peer.root / "c").write_bytes(b"c")
    async with openssh_peer.client() as client:
        await client.rename(openssh_peer.remote("a"), openssh_peer.remote("b"), overwrite=True)
        await client.rename(openssh_peer.remote("c"), openssh_peer.remote("d"))
    assert sorted(os.listdir(openssh_peer.root)) == ["a", "b", "d"]
    for where in ("lying", "unlinking"):
        (hostile.root / where / "src").write_bytes(b"the new one")
        (hostile.root / where / "dst").write_bytes(b"old")
        async with hostile.client() as client:
            with pytest.raises(sshpipe.ProtocolError, match="said it renamed"):
                await client.rename(f"/{where}/src", f"/{where}/dst", overwrite=True)
        assert (hostile.root / where / "dst").read_bytes() == b"old"
