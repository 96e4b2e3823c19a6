"""sshpipe on stock asyncssh: ``SSHPIPE_ASYNCSSH_PATCHES=off`` and the one gate it closes.

On a release the patches were not checked against sshpipe runs asyncssh
stock, and nothing a transfer needs rests on a patch. These run in either
mode (scripts/test-as-user.sh runs the OpenSSH tests with the variable off;
the canaries of the patches themselves are in test_asyncssh_patches.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path

import pytest

from sshpipe.transport import asyncssh_patches as patches
from sshpipe.transport.ssh import open_link
from tests.support.peers import Peer

CHECKED = ".".join(map(str, patches.CHECKED_TO))


@pytest.fixture
def stock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patches off for this test (the variable is read at each gate)."""
    monkeypatch.setenv(patches.PATCHES_VARIABLE, "off")


@pytest.mark.parametrize(
    ("value", "enabled"),
    [("off", False), ("OFF", False), (" off\n", False), ("", True), ("on", True)],
)
def test_the_variable_alone_decides_on_a_checked_release(
    value: str, enabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(patches.PATCHES_VARIABLE, value)
    assert patches.patches_enabled(CHECKED) is enabled
    assert patches.patches_enabled("3.0.0") is False  # unchecked: stock whatever it says


@pytest.mark.usefixtures("stock")
def test_with_the_variable_off_every_gate_stays_shut(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is touched: each gate returns before it looks at the connection."""
    monkeypatch.setattr(patches, "_STOCK_SAID", set())
    untouchable = object()  # any attribute read or written would raise
    with caplog.at_level(logging.DEBUG, logger="sshpipe.ssh"):
        assert patches.tune_connection(untouchable, CHECKED) == frozenset()  # type: ignore[arg-type]
        assert patches.prepare_handshake(untouchable, CHECKED) == set()  # type: ignore[arg-type]
        assert patches.watch_key_exchange(untouchable, CHECKED) == {}  # type: ignore[arg-type]
        assert patches.auth_method(untouchable, CHECKED) is None  # type: ignore[arg-type]
        assert patches.read_compression_auto(CHECKED) is False
        assert patches.bound_zlib(CHECKED) is False
    said = f"{patches.PATCHES_VARIABLE}=off: running asyncssh stock"
    assert caplog.text.count(said) == 1, caplog.text  # once, not once per gate
    assert "does not fit" not in caplog.text  # stock by choice, not by shape


@pytest.mark.usefixtures("stock")
async def test_with_the_patches_off_sshd_serves_a_copy_both_ways(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """A stock connection (no patch in force) logs in, downloads and uploads byte-exact;
    ``Compression auto`` in ssh_config and in ``-o`` reaches asyncssh's stock reader."""
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    Compression auto\n")
    link = await open_link(
        dataclasses.replace(
            openssh_peer.client(compression=None).connect_config,
            ssh_config=(str(config),),
            ssh_options=(("Compression", "auto"),),
        )
    )
    try:
        assert link.patches == frozenset()
        assert link.compression_mode == "auto"  # sshpipe's own reading of the word
    finally:
        await link.close()
    data = os.urandom(3 * 1024 * 1024 + 17)
    (openssh_peer.root / "src.bin").write_bytes(data)
    async with openssh_peer.client() as client:
        await client.get(openssh_peer.remote("src.bin"), tmp_path / "got.bin")
        await client.put(tmp_path / "got.bin", openssh_peer.remote("back.bin"))
    assert (tmp_path / "got.bin").read_bytes() == data
    assert (openssh_peer.root / "back.bin").read_bytes() == data
