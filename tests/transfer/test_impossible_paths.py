"""A path no file can have (a NUL, a lone surrogate) is refused at the door: exit 2, nothing sent.

Sent anyway, a NUL ends the server's C string: the channel is dropped, or the
part before it is acted on. One check (``_paths.usable``) at every door: each
API method that takes a path, ``connect()``'s host, user and files, fsspec's
paths, the command line's remote words and URLs (``%00``). The client here
points at a port where nothing listens: reaching the network would be a
ConnectError, not the UsageError each call must raise first.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

import sshpipe
from sshpipe.cli.targets import parse_remote
from sshpipe.core.paths import usable
from sshpipe.fsspec import SSHPipeFileSystem

NUL = "logs/a\x00b.txt"
SURROGATE = "logs/a\ud800b.txt"  # no bytes stand for it (surrogateescape's are U+DC80-U+DCFF)


def test_what_a_path_may_hold_and_what_it_may_not() -> None:
    for fine in ("a b", "caf\u00e9", "caf\udce9", "\n", "", "~/x", "\U0001f680"):
        assert usable(fine) == fine  # a name that is not UTF-8 keeps its surrogates
    for impossible in ("\x00", NUL, SURROGATE, "\udfff"):
        with pytest.raises(sshpipe.UsageError) as refused:
            usable(impossible)
        assert refused.value.exit_code == 2
        assert "\x00" not in str(refused.value)  # named escaped


@pytest.fixture
def nowhere() -> int:
    """A port where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    async for _ in chunks:
        pass


async def _nothing() -> AsyncIterator[bytes]:
    yield b""


Call = Callable[[sshpipe.Client, str, Path], Awaitable[object]]
CALLS: dict[str, Call] = {
    "get remote": lambda c, p, d: c.get(p, d),
    "get local": lambda c, p, d: c.get("f", str(d / p)),
    "get several": lambda c, p, d: c.get(["ok", p], d),
    "put local": lambda c, p, d: c.put(str(d / p), "f"),
    "put remote": lambda c, p, d: c.put(str(d), p),
    "glob": lambda c, p, d: c.glob(p),
    "stream": lambda c, p, d: _drain(c.stream(p)),
    "put_stream": lambda c, p, d: c.put_stream(_nothing(), p),
    "ls": lambda c, p, d: c.ls(p),
    "stat": lambda c, p, d: c.stat(p),
    "lstat": lambda c, p, d: c.lstat(p),
    "exists": lambda c, p, d: c.exists(p),
    "remove": lambda c, p, d: c.remove(p),
    "rmdir": lambda c, p, d: c.rmdir(p),
    "rmtree": lambda c, p, d: c.rmtree(p),
    "mkdir": lambda c, p, d: c.mkdir(p),
    "rename from": lambda c, p, d: c.rename(p, "x"),
    "rename to": lambda c, p, d: c.rename("x", p),
    "copy from": lambda c, p, d: c.copy(p, "x"),
    "copy to": lambda c, p, d: c.copy("x", p),
    "checksum": lambda c, p, d: c.checksum(p),
}


@pytest.mark.parametrize("path", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize("call", list(CALLS))
async def test_every_api_method_refuses_it_before_connecting(
    call: str, path: str, nowhere: int, tmp_path: Path
) -> None:
    client = sshpipe.connect("127.0.0.1", port=nowhere, ssh_config=[], known_hosts=[])
    try:
        with pytest.raises(sshpipe.UsageError):
            await CALLS[call](client, path, tmp_path)
    finally:
        await client.aclose()


async def test_a_remote_file_opened_with_it_is_refused(nowhere: int) -> None:
    client = sshpipe.connect("127.0.0.1", port=nowhere, ssh_config=[], known_hosts=[])
    with pytest.raises(sshpipe.UsageError):
        client.open(NUL)
    await client.aclose()


def test_connect_refuses_it_in_a_host_user_or_file() -> None:
    for kwargs in (
        {"destination": "ho\x00st"},
        {"destination": "me\x00@host"},
        {"destination": "host", "username": "me\x00"},
        {"destination": "host", "identity_files": ["/k\x00"]},
        {"destination": "host", "known_hosts": ["/kh\x00"]},
        {"destination": "host", "ssh_config": ["/c\x00"]},
        {"destination": "host", "agent_path": "/a\x00"},
    ):
        with pytest.raises(sshpipe.UsageError):
            sshpipe.connect(**kwargs)  # type: ignore[arg-type]


def test_fsspec_paths_are_refused_too() -> None:
    with pytest.raises(sshpipe.UsageError):
        SSHPipeFileSystem._strip_protocol("sshpipe://host/a\x00b")
    assert SSHPipeFileSystem._strip_protocol("sshpipe://host/a/b/") == "/a/b"


@pytest.mark.parametrize(
    "word",
    ["sftp://host/a%00b", "scp://host//etc/x%00", "sftp://me%00@host/f", "sftp://host/%ED%A0%80"],
)
def test_a_remote_word_decoding_to_it_is_refused(word: str) -> None:
    with pytest.raises(sshpipe.UsageError):
        parse_remote(word)


def test_the_command_line_refuses_it_with_exit_2_before_connecting(tmp_path: Path) -> None:
    # No such host: had the word been taken, the command would fail resolving it (exit 5).
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sshpipe",
            "get",
            "sftp://no-such-host.invalid/a%00b",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "NUL" in lines[0] and "a\\x00b" in lines[0], result.stderr
