"""Smoke tests for the foreign test servers: ProFTPD's mod_sftp and Green End behind sshd."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import asyncssh
import pytest

import sshpipe.testing.proftpd
from sshpipe.testing.proftpd import ProFTPDError, ProFTPDInfo, proftpd_server
from sshpipe.testing.sshd import SSHServerInfo


def _banner(host: str, port: int) -> bytes:
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(b"SSH-2.0-sshpipe_test\r\n")
        return sock.makefile("rb").readline()


async def _sftp_session(
    host: str, port: int, user: str, key: Path, known_hosts: Path
) -> tuple[str, int]:
    """Log in with the fixture's own key and known_hosts: the working directory, the version."""
    async with (
        asyncssh.connect(
            host,
            port=port,
            username=user,
            client_keys=[str(key)],
            known_hosts=str(known_hosts),
            config=None,
            agent_path=None,
        ) as conn,
        conn.start_sftp_client() as sftp,
    ):
        return await sftp.getcwd(), sftp.version


async def test_proftpd_serves_sftp_from_its_root(proftpd: ProFTPDInfo) -> None:
    assert _banner(proftpd.host, proftpd.port).startswith(b"SSH-2.0-mod_sftp")
    # Only root can chroot; as an ordinary user the real paths are served.
    assert proftpd.chrooted == (os.geteuid() == 0)
    cwd, version = await _sftp_session(
        proftpd.host, proftpd.port, proftpd.user, proftpd.client_key, proftpd.known_hosts
    )
    assert version == 3
    assert cwd == proftpd.remote(proftpd.root)
    assert "/etc/proftpd" not in proftpd.config.read_text()


async def test_greenend_runs_behind_sshd(
    greenend: SSHServerInfo, gesftpserver_executable: Path
) -> None:
    # The banner is sshd's; the SFTP server behind it is not.
    assert _banner(greenend.host, greenend.port).startswith(b"SSH-2.0-OpenSSH")
    config = (greenend.ssh_config.parent / "sshd_config").read_text()
    assert f"Subsystem sftp cd {greenend.root} && exec {gesftpserver_executable}\n" in config
    cwd, version = await _sftp_session(
        greenend.host, greenend.port, greenend.user, greenend.client_key, greenend.known_hosts
    )
    assert version == 3
    assert cwd == str(greenend.root)  # not $HOME: stray relative paths stay in the temp dir


def test_a_proftpd_that_cannot_start_says_why(
    proftpd_executable: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sshpipe.testing.proftpd._config_lines

    def broken(*args: object, **kwargs: object) -> list[str]:
        return [*real(*args, **kwargs), "NoSuchDirective on"]  # type: ignore[arg-type]

    monkeypatch.setattr(sshpipe.testing.proftpd, "_config_lines", broken)
    with pytest.raises(ProFTPDError, match="NoSuchDirective") as caught, proftpd_server(tmp_path):
        pass
    assert "proftpd exited with code" in str(caught.value)
