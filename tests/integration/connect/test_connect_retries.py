"""Connections the server turns away before the log-in (sshd's MaxStartups) are tried again.

Within ``--retries``, with backoff and jitter: the first connection of a
command or an API client, and the pool's later ones. A refused port is not
tried again (nothing listens there), nor anything the log-in itself refused.
The deterministic cases go through ``sshpipe.testing.throttle`` in front of
the real sshd; the last test is the one the issue measured: 32 concurrent
commands against an sshd with its stock ``MaxStartups 10:30:100``.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import SimpleNamespace

import asyncssh
import pytest

import sshpipe
from sshpipe.testing.sshd import openssh_server
from sshpipe.testing.throttle import Throttle, first
from sshpipe.transport.ssh import _dropped_why
from tests.support.cli import assert_one_line_error, run_cli_async
from tests.support.files import random_file
from tests.support.peers import Peer, from_openssh

pytestmark = pytest.mark.openssh


async def test_a_connection_turned_away_before_the_log_in_is_tried_again(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    data = random_file(openssh_peer.root / "f.bin", 1000)
    async with Throttle(openssh_peer.host, openssh_peer.port, first(2)) as throttle:
        far = openssh_peer.behind(throttle.port, tmp_path)
        async with far.client(sshpipe.TransferConfig(retries=2)) as sp:
            await sp.get(far.remote("f.bin"), str(tmp_path / "f.bin"))
    assert (tmp_path / "f.bin").read_bytes() == data
    assert (throttle.accepted, throttle.dropped) == (3, 2)


async def test_the_pools_later_connections_are_tried_again_too(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    random_file(openssh_peer.root / "f.bin", 1 << 20)
    config = sshpipe.TransferConfig(channels=2, channels_per_connection=1, retries=2)
    # The second connection, the one a second channel needs, is turned away once.
    async with Throttle(openssh_peer.host, openssh_peer.port, lambda n: n == 2) as throttle:
        far = openssh_peer.behind(throttle.port, tmp_path)
        async with far.client(config) as sp:
            stats = await sp.get(far.remote("f.bin"), str(tmp_path / "f.bin"))
    assert stats.connections == 2 and stats.channels == 2
    assert (throttle.accepted, throttle.dropped) == (3, 1)


@pytest.mark.parametrize(
    ("say", "heard"),
    [
        # The lines before the version are heard by a patch (``lenient_version``).
        pytest.param(
            b"Exceeded MaxStartups\r\n",
            "it said 'Exceeded MaxStartups'",
            marks=pytest.mark.needs_patches,
        ),
        (None, "connection reset by peer"),  # sshd closed with our version line unread
    ],
)
async def test_giving_up_says_the_server_closed_it_before_the_log_in_and_why(
    openssh_peer: Peer, tmp_path: Path, say: bytes | None, heard: str
) -> None:
    async with Throttle(openssh_peer.host, openssh_peer.port, first(10), say=say) as throttle:
        far = openssh_peer.behind(throttle.port, tmp_path)
        result = await run_cli_async(
            *far.cli_options(), "--retries", "1", "get", far.spec("f.bin"), str(tmp_path)
        )
    assert_one_line_error(
        result,
        5,
        "the server closed the connection before the log-in",
        heard,
        "sshd's MaxStartups throttling?",
        "after 2 tries",
    )
    assert throttle.accepted == 2


async def test_a_refused_port_is_not_tried_again(tmp_path: Path) -> None:
    """Nothing listens there: OpenSSH's ConnectionAttempts is 1, and so is ours."""
    with_nobody = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = with_nobody.sockets[0].getsockname()[1]
    with_nobody.close()
    await with_nobody.wait_closed()
    result = await run_cli_async(
        "-vv", "-F", "/dev/null", "-P", str(port), "get", "me@127.0.0.1:f", str(tmp_path)
    )
    assert result.returncode == 5, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("connection refused")
    assert "trying again" not in result.stderr


def _policy(*, began: float = 0.0, said: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(auth_began_at=began, said_before_version=said)


def test_a_close_before_the_log_in_is_a_drop_and_after_it_is_not() -> None:
    reset = ConnectionResetError(104, "Connection reset by peer")
    assert _dropped_why(reset, _policy()) == "connection reset by peer"  # type: ignore[arg-type]
    lost = asyncssh.ConnectionLost("Connection lost")
    assert _dropped_why(lost, _policy()) == "connection closed"  # type: ignore[arg-type]
    said = _policy(said="Too many\x1b[2J users")
    assert _dropped_why(lost, said) == "it said 'Too many\x1b[2J users'"  # type: ignore[arg-type]
    shown = str(sshpipe.ConnectDropped(f"h:22: {_dropped_why(lost, said)}"))  # type: ignore[arg-type]
    assert shown == "h:22: it said 'Too many\\x1b[2J users'"  # escaped by the error's str()
    # Once the log-in began, a close is the log-in's own failure: never tried again.
    assert _dropped_why(reset, _policy(began=1.0)) is None  # type: ignore[arg-type]
    refused = ConnectionRefusedError(111, "Connection refused")
    assert _dropped_why(refused, _policy()) is None  # type: ignore[arg-type]
    denied = asyncssh.PermissionDenied("Permission denied")
    assert _dropped_why(denied, _policy()) is None  # type: ignore[arg-type]


def test_a_disconnect_for_too_many_connections_is_a_drop_with_the_servers_reason() -> None:
    busy = asyncssh.DisconnectError(asyncssh.DISC_TOO_MANY_CONNECTIONS, "Server busy")
    assert _dropped_why(busy, _policy()) == "it said 'Server busy'"  # type: ignore[arg-type]
    other = asyncssh.DisconnectError(2, "Protocol error")
    assert _dropped_why(other, _policy()) is None  # type: ignore[arg-type]


CONCURRENT = 32
# Connections that never say a word hold this many of sshd's start-ups until
# it has turned one of the commands away: on two loaded cores the 32
# interpreters may come too far apart for sshd ever to throttle on its own.
HELD = 10


async def _hold_start_ups(port: int, log_file: Path) -> int:
    """Hold ``HELD`` silent connections until sshd's log shows a drop past
    MaxStartups (or 30 s); the drops seen then."""
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(HELD)]
    try:
        for _ in range(600):
            if "past MaxStartups" in log_file.read_text():
                break
            await asyncio.sleep(0.05)
    finally:
        for _, writer in held:
            writer.close()
    return log_file.read_text().count("past MaxStartups")


@pytest.mark.slow  # 32 interpreters at once: 15-20 s on two cores
async def test_32_concurrent_commands_against_stock_max_startups_all_succeed(
    sshd_executable: Path, tmp_path: Path
) -> None:
    """sshd's default MaxStartups 10:30:100 turns away about a third of 32 at once
    (7-9 of them failed before); with the default retries every one gets in."""
    with openssh_server(tmp_path / "sshd", max_startups="10:30:100") as info:
        peer = from_openssh(info, info.root)
        data = random_file(info.root / "f.bin", 64 * 1024)
        holding = asyncio.create_task(_hold_start_ups(info.port, info.log_file))
        results = await asyncio.gather(
            *(
                run_cli_async(
                    "-q", *peer.cli_options(), "get", peer.spec("f.bin"), str(tmp_path / f"{n}")
                )
                for n in range(CONCURRENT)
            )
        )
        dropped_while_held = await holding
        dropped = info.log_file.read_text().count("past MaxStartups")
    failed = [r.stderr for r in results if r.returncode != 0]
    assert failed == [], failed
    assert all((tmp_path / f"{n}").read_bytes() == data for n in range(CONCURRENT))
    print(f"sshd dropped {dropped} connections past MaxStartups", file=sys.stderr)
    assert dropped_while_held > 0  # else the test proves nothing: the server never throttled
