"""RemoteShell: many commands through one sh on the server, each with its status and output."""

from __future__ import annotations

import sshpipe
from tests.conftest import Peer


async def test_commands_run_in_order_with_their_status_and_output(openssh_peer: Peer) -> None:
    async with openssh_peer.client() as sp, sp._lease(sshpipe.TransferConfig()) as lanes:
        sftp = lanes.channels[0]
        assert sftp.open_shell is not None
        shell = await sftp.open_shell()
        assert shell is not None
        try:
            assert await shell.run("true") == (0, "")
            assert await shell.run("exit_with() { return $1; }; exit_with 3") == (3, "")
            assert await shell.run("printf 'a\\nb'") == (0, "a\nb")  # no newline at the end
            assert await shell.run("echo one; echo two") == (0, "one\ntwo\n")
            assert await shell.run("cat") == (0, "")  # stdin is /dev/null, not our commands
            status, out = await shell.run("sync --version")
            assert status == 0 and "GNU coreutils" in out
            assert (await shell.run(f"sync -f -- '{openssh_peer.root}'"))[0] == 0
            assert (await shell.run("no-such-command-here"))[0] == 127
        finally:
            shell.close()
        assert await shell.run("true") is None  # closed: no more commands


async def test_a_shell_that_exits_is_reported_gone(openssh_peer: Peer) -> None:
    async with openssh_peer.client() as sp, sp._lease(sshpipe.TransferConfig()) as lanes:
        assert lanes.channels[0].open_shell is not None
        shell = await lanes.channels[0].open_shell()
        assert shell is not None
        assert await shell.run("exit 0") is None
        assert await shell.run("true") is None
