"""The set-up timeline (``core.timeline``): every phase reported, in order, against sshd.

The phases' names and order, not their timings: how many round trips each
takes is measured in the benchmarks.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.peers import Peer

OPENED = ["connect", "key_exchange", "auth", "channel", "sftp_init"]


def test_a_get_reports_every_phase_in_json(openssh_peer: Peer, tmp_path: Path) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"x" * 300_000)
    result = run_cli(
        "get",
        "--json",
        *openssh_peer.cli_options(),
        openssh_peer.spec("src.bin"),
        str(tmp_path / "out"),
    )
    assert result.returncode == 0, result.stderr
    setup = json.loads(result.stdout)["setup"]
    assert [phase["name"] for phase in setup] == [*OPENED, "open", "first_data", "commit"]
    stats = json.loads(result.stdout)
    for phase in setup:
        assert phase["seconds"] >= 0
        assert phase["round_trips"] == pytest.approx(phase["seconds"] / stats["rtt_initial"])


def test_a_put_reports_its_fsync_close_and_rename(openssh_peer: Peer, tmp_path: Path) -> None:
    (tmp_path / "src.bin").write_bytes(b"y" * 300_000)
    result = run_cli(
        "put",
        "--json",
        *openssh_peer.cli_options(),
        str(tmp_path / "src.bin"),
        openssh_peer.spec("up.bin"),
    )
    assert result.returncode == 0, result.stderr
    setup = json.loads(result.stdout)["setup"]
    assert [phase["name"] for phase in setup] == [
        *OPENED,
        "open",
        "first_data",
        "fsync_close",
        "rename",
    ]
    assert (openssh_peer.root / "up.bin").read_bytes() == b"y" * 300_000


async def test_a_reused_channel_reports_no_set_up_of_its_own(
    openssh_peer: Peer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The second transfer of a client pays for no connection: it says so, and logs it."""
    (openssh_peer.root / "src.bin").write_bytes(b"z" * 1000)
    with caplog.at_level(logging.DEBUG, logger="sshpipe.flow"):
        async with openssh_peer.client() as client:
            first = await client.get(openssh_peer.remote("src.bin"), str(tmp_path / "a"))
            second = await client.get(openssh_peer.remote("src.bin"), str(tmp_path / "b"))
    assert [phase.name for phase in first.setup][:5] == OPENED
    assert [phase.name for phase in second.setup] == ["open", "first_data", "commit"]
    assert "set-up: connect" in caplog.text  # the debug log's line of the first
