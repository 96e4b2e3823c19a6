"""Smoke tests for the real-OpenSSH test server."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import asyncssh

from sshpipe.testing.sshd import SSHServerInfo


def test_server_accepts_ssh_connections(openssh: SSHServerInfo) -> None:
    with socket.create_connection((openssh.host, openssh.port), timeout=5) as sock:
        sock.sendall(b"SSH-2.0-sshpipe_test\r\n")
        assert sock.makefile("rb").readline().startswith(b"SSH-2.0-OpenSSH")
    assert openssh.root.is_absolute() and openssh.root.is_dir()


def test_openssh_sftp_round_trips_file(
    openssh: SSHServerInfo,
    tmp_path: Path,
) -> None:
    sftp = shutil.which("sftp")
    assert sftp is not None, "OpenSSH sftp client not installed"
    original = tmp_path / "original.bin"
    original.write_bytes(os.urandom(100 * 1024))
    remote = openssh.root / "round_trip.bin"
    fetched = tmp_path / "fetched.bin"
    batch = tmp_path / "batch"
    batch.write_text(f'put "{original}" "{remote}"\nget "{remote}" "{fetched}"\n')

    result = subprocess.run(
        [sftp, *openssh.sftp_args(), "-b", str(batch), openssh.destination()],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert remote.read_bytes() == original.read_bytes()
    assert fetched.read_bytes() == original.read_bytes()


def test_asyncssh_sftp_stats_root(openssh: SSHServerInfo) -> None:
    attrs = asyncio.run(_stat_remote(openssh, openssh.root))

    assert attrs.permissions is not None
    assert stat.S_ISDIR(attrs.permissions)


async def _stat_remote(info: SSHServerInfo, path: Path) -> asyncssh.SFTPAttrs:
    # config=None and agent_path=None keep the caller's ~/.ssh and agent out.
    async with (
        asyncssh.connect(
            info.host,
            port=info.port,
            username=info.user,
            client_keys=[str(info.client_key)],
            known_hosts=str(info.known_hosts),
            config=None,
            agent_path=None,
        ) as conn,
        conn.start_sftp_client() as sftp,
    ):
        return await sftp.stat(str(path))
