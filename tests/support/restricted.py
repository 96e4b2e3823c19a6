"""What the tests against the restrictive servers (``sshpipe.testing.restrictive``) share.

The command line run at one of them (never an internal error, never a
traceback), its paths spelled for it, a tree compared with nothing left behind,
and asyncssh's own client, with which a test shows a restriction really bites.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import asyncssh

from sshpipe.testing.embedded import EmbeddedServer
from tests.support.cli import run_cli_async
from tests.support.files import leftover_temps
from tests.support.trees import compare_trees, summarize

__all__ = [
    "EXIT_INTERNAL",
    "assert_ok",
    "assert_same_tree",
    "asyncssh_connection",
    "asyncssh_sftp",
    "cli",
    "spec",
]

EXIT_INTERNAL = 70
NOISE = ("Traceback", "Future exception was never retrieved", "Task exception was never retrieved")


async def cli(server: EmbeddedServer, verb: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m sshpipe VERB`` at ``server``: never an internal error, never a traceback."""
    result = await run_cli_async(verb, *server.cli_options(), *args)
    assert result.returncode != EXIT_INTERNAL, result.stderr
    for noise in NOISE:
        assert noise not in result.stderr, result.stderr
    return result


def spec(server: EmbeddedServer, path: str) -> str:
    """``path`` on ``server`` as the command line takes it."""
    return f"{server.destination}:{path}"


def assert_ok(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr


def assert_same_tree(source: Path, copy: Path, *sides: Path) -> None:
    """``copy`` is ``source``, and no temporary file of ours is left in ``sides``."""
    diffs = compare_trees(source, copy)
    assert diffs == [], summarize(diffs)
    assert leftover_temps(*sides) == []


@contextlib.asynccontextmanager
async def asyncssh_connection(
    server: EmbeddedServer,
) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """asyncssh's own connection to ``server`` (no ssh_config read)."""
    async with asyncssh.connect(
        server.host,
        port=server.port,
        username=server.username,
        client_keys=[str(server.client_key)],
        known_hosts=str(server.known_hosts),
        config=None,
    ) as conn:
        yield conn


@contextlib.asynccontextmanager
async def asyncssh_sftp(server: EmbeddedServer) -> AsyncIterator[asyncssh.SFTPClient]:
    """asyncssh's own SFTP client at ``server``."""
    async with asyncssh_connection(server) as conn, conn.start_sftp_client() as sftp:
        yield sftp
