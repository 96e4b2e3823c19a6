"""RemoteShell and exec: commands on the server, their status and output, within bounds."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

import sshpipe
from sshpipe.transfer.channelspec import channel_spec
from sshpipe.transport.wiring import RunCommand, Shell
from tests.support.peers import Peer

DEFAULTS = channel_spec(sshpipe.TransferConfig())  # the channels of the default config

BOUNDS: dict[str, Any] = {"within": 30.0, "max_output": 4096}


async def test_commands_run_in_order_with_their_status_and_output(openssh_peer: Peer) -> None:
    async with openssh_peer.client() as sp, sp._pool.lease(DEFAULTS) as lease:
        sftp = lease.channels[0]
        assert sftp.open_shell is not None
        shell = await sftp.open_shell()
        assert shell is not None
        try:
            assert await shell.run("true", **BOUNDS) == (0, "")
            assert await shell.run("exit_with() { return $1; }; exit_with 3", **BOUNDS) == (3, "")
            assert await shell.run("printf 'a\\nb'", **BOUNDS) == (
                0,
                "a\nb",
            )  # no newline at the end
            assert await shell.run("echo one; echo two", **BOUNDS) == (0, "one\ntwo\n")
            assert await shell.run("cat", **BOUNDS) == (
                0,
                "",
            )  # stdin is /dev/null, not our commands
            status, out = await shell.run("sync --version", **BOUNDS)
            assert status == 0 and "GNU coreutils" in out
            assert (await shell.run(f"sync -f -- '{openssh_peer.root}'", **BOUNDS))[0] == 0
            assert (await shell.run("no-such-command-here", **BOUNDS))[0] == 127
        finally:
            shell.close()
        assert await shell.run("true", **BOUNDS) is None  # closed: no more commands


async def test_a_shell_that_exits_is_reported_gone(openssh_peer: Peer) -> None:
    async with openssh_peer.client() as sp, sp._pool.lease(DEFAULTS) as lease:
        assert lease.channels[0].open_shell is not None
        shell = await lease.channels[0].open_shell()
        assert shell is not None
        assert await shell.run("exit 0", **BOUNDS) is None
        assert await shell.run("true", **BOUNDS) is None


@pytest.fixture
async def commands(openssh_peer: Peer) -> AsyncIterator[tuple[Shell, RunCommand]]:
    """A shell kept open on sshd, and the exec of one command, on one connection."""
    async with openssh_peer.client() as sp, sp._pool.lease(DEFAULTS) as lease:
        sftp = lease.channels[0]
        assert sftp.open_shell is not None and sftp.run_command is not None
        shell = await sftp.open_shell()
        assert shell is not None
        try:
            yield shell, sftp.run_command
        finally:
            shell.close()


async def test_a_command_that_prints_without_end_is_refused_not_held(
    commands: tuple[Shell, RunCommand],
) -> None:
    """A server's shell or exec may print for ever: what is read stops at the bound."""
    shell, run_command = commands
    with pytest.raises(sshpipe.ProtocolError, match="printed more than"):
        await shell.run("yes", within=30.0, max_output=100_000)
    assert await shell.run("true", **BOUNDS) is None  # closed after the breach
    with pytest.raises(sshpipe.ProtocolError, match="printed more than"):
        await run_command("yes", within=30.0, max_output=100_000)
    assert await run_command("echo ok", **BOUNDS) == (0, "ok\n")


async def test_a_command_that_does_not_finish_in_time_counts_as_none(
    commands: tuple[Shell, RunCommand],
) -> None:
    shell, run_command = commands
    started = time.monotonic()
    assert await shell.run("sleep 30", within=0.5, max_output=100) is None
    assert await run_command("sleep 30", within=0.5, max_output=100) is None
    assert time.monotonic() - started < 10
