"""Commands through the shell kept open: a cancelled one answers for no other; probes shared."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import sshpipe
from sshpipe.transfer.channelspec import channel_spec
from sshpipe.transport.commands import RemoteCommands
from sshpipe.transport.sftp import SFTPSession
from tests.support.peers import Peer

DEFAULTS = channel_spec(sshpipe.TransferConfig())  # the channels of the default config

BOUNDS = {"within": 30.0, "max_output": 4096}


@pytest.fixture
async def channel(openssh_peer: Peer) -> AsyncIterator[SFTPSession]:
    async with openssh_peer.client() as sp, sp._pool.lease(DEFAULTS) as lease:
        yield lease.channels[0]


async def test_a_command_cancelled_mid_way_does_not_answer_the_next(channel: SFTPSession) -> None:
    assert channel.open_shell is not None
    shell = await channel.open_shell()
    assert shell is not None
    async with asyncio.TaskGroup() as group:
        slow = group.create_task(shell.run("sleep 0.5; echo late", **BOUNDS))
        await asyncio.sleep(0.1)
        slow.cancel()
    assert slow.cancelled()
    # The shell still runs "sleep; echo late": its marker must not pass for this one's.
    assert await shell.run("echo mine", **BOUNDS) in (None, (0, "mine\n"))
    shell.close()


async def test_callers_asking_at_once_share_one_probe(channel: SFTPSession) -> None:
    commands = RemoteCommands(lambda: channel)
    asked: list[str] = []
    run = commands.run

    async def counted(command: str, **kwargs: int) -> tuple[int, str] | None:
        asked.append(command)
        return await run(command, **kwargs)

    commands.run = counted  # type: ignore[method-assign]
    try:
        async with asyncio.TaskGroup() as group:
            answers = [group.create_task(commands.has("sync")) for _ in range(5)]
        assert [answer.result() for answer in answers] == [True] * 5
        assert asked == ["sync --version"]
    finally:
        await commands.close()


async def test_a_cancelled_asker_leaves_the_question_open(channel: SFTPSession) -> None:
    commands = RemoteCommands(lambda: channel)
    slow_sync = "sleep 0.3; sync"  # probed as "sleep 0.3; sync --version"
    try:
        assert await commands.run("true", max_output=16) == (0, "")  # the shell is open
        async with asyncio.TaskGroup() as group:
            first = group.create_task(commands.has(slow_sync))
            await asyncio.sleep(0.1)  # the probe is running in the shell
            first.cancel()
        assert first.cancelled()
        assert await commands.has(slow_sync)  # asked again, on a fresh shell
    finally:
        await commands.close()
