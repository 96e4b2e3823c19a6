"""What a server says at the SSH level in bytes SSH does not allow there: read, escaped, no exit 70.

Its version line past ASCII (``SSH-2.0-Caf\\xe9_9.9``: OpenSSH copies the file;
stock asyncssh raised UnicodeDecodeError out of connect), and a log-in
banner, a debug message and a disconnect's reason that are not UTF-8, from
``sshpipe.testing.badtext`` (asyncssh's server, sending those raw bytes).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.badtext import bad_text
from sshpipe.testing.embedded import embedded_server
from sshpipe.transport.asyncssh_patches import PATCHES_VARIABLE
from tests.support.cli import assert_one_line_error, run_cli_async
from tests.support.peers import from_embedded

pytestmark = pytest.mark.asyncssh_server

CAFE = b"Caf\xe9_9.9"


@pytest.mark.needs_patches  # lenient_version reads it; stock asyncssh refuses it (below)
async def test_a_version_line_past_ascii_is_read_and_shown_escaped(tmp_path: Path) -> None:
    async with embedded_server(tmp_path / "s", connection_factory=bad_text(version=CAFE)) as s:
        peer = from_embedded(s)
        (peer.root / "f.txt").write_bytes(b"hello\n")
        result = await run_cli_async(
            *peer.cli_options(), "-v", "--json", "get", peer.spec("f.txt"), str(tmp_path)
        )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "f.txt").read_bytes() == b"hello\n"
    assert json.loads(result.stdout)["server"]["software"] == "Caf\\xe9_9.9"
    assert "server SSH-2.0-Caf\\xe9_9.9;" in result.stderr  # -v's line, escaped
    assert "\xe9" not in result.stderr and "\udce9" not in result.stdout


async def test_stock_asyncssh_meeting_it_is_one_clean_connect_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the patch does not apply (another asyncssh, or the patches off), the error
    asyncssh lets out is translated: exit 5, one escaped line, not an internal error."""
    monkeypatch.setenv(PATCHES_VARIABLE, "off")  # this process's client and the command's
    said = "the server sent what SSH does not allow as text: 'SSH-2.0-Caf\\xe9_9.9'"
    async with embedded_server(tmp_path / "s", connection_factory=bad_text(version=CAFE)) as s:
        peer = from_embedded(s)
        with pytest.raises(sshpipe.ConnectError) as raised:
            async with peer.client() as sp:
                await sp.ls(".")
        result = await run_cli_async(*peer.cli_options(), "get", peer.spec("f"), str(tmp_path))
    error = raised.value
    assert type(error) is sshpipe.ConnectError and error.exit_code == 5
    assert said in str(error)
    assert (error.host, error.port) == (peer.host, peer.port)
    assert_one_line_error(result, 5, said)


async def test_a_banner_and_a_debug_message_not_in_utf8_do_not_stop_the_log_in(
    tmp_path: Path,
) -> None:
    # asyncssh's default ("strict") dropped the connection over either.
    noise = bad_text(banner=b"Welcome \xff\xfe\x1b[2J\n", debug=b"debug \xc3\x28")
    async with embedded_server(tmp_path / "s", connection_factory=noise) as s:
        peer = from_embedded(s)
        (peer.root / "f.txt").write_bytes(b"hello\n")
        result = await run_cli_async(*peer.cli_options(), "get", peer.spec("f.txt"), str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "f.txt").read_bytes() == b"hello\n"


async def test_a_disconnect_reason_not_in_utf8_is_one_escaped_line(tmp_path: Path) -> None:
    refusal = bad_text(disconnect=b"go away \xff\x1b[31m now")
    async with embedded_server(tmp_path / "s", connection_factory=refusal) as s:
        peer = from_embedded(s)
        result = await run_cli_async(*peer.cli_options(), "get", peer.spec("f.txt"), str(tmp_path))
    assert_one_line_error(result, 5, "server disconnected: go away \\xff\\x1b[31m now")
