"""Debug logs carry no secrets and no payload, at sshpipe's most verbose setting."""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.keys import encrypted_copy
from tests.support.peers import Peer


def _key_body(key: Path) -> list[str]:
    """The base64 lines of a private key file: none may show up anywhere."""
    return [line for line in key.read_text().splitlines() if line and "PRIVATE KEY" not in line]


def test_debug_output_of_get_and_put_holds_no_payload_or_key(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    marker = f"PAYLOAD-{secrets.token_hex(8)}-"
    (openssh_peer.root / "secret.txt").write_text(marker * 20_000)
    env = {**os.environ, "SSHPIPE_DEBUG": "asyncssh"}  # sshpipe's and asyncssh's debug logs
    outputs = []
    for argv in (
        ["get", *openssh_peer.cli_options(), openssh_peer.spec("secret.txt"), str(tmp_path / "s")],
        ["put", *openssh_peer.cli_options(), str(tmp_path / "s"), openssh_peer.spec("back.txt")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "sshpipe", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    logs = "\n".join(outputs)
    assert "sshpipe:" in logs and "ms:" in logs, "debug logging was not on"
    assert (openssh_peer.root / "back.txt").read_text() == marker * 20_000
    assert marker not in logs
    assert marker.encode().hex() not in logs
    for line in _key_body(openssh_peer.client_key):
        assert line not in logs


async def test_a_password_is_never_logged(
    openssh_peer: Peer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    password = f"pw-{secrets.token_hex(8)}"
    (openssh_peer.root / "f.bin").write_bytes(b"x" * 1000)
    caplog.set_level(logging.DEBUG)  # every logger, sshpipe's and asyncssh's
    import sshpipe

    async with sshpipe.connect(
        f"{openssh_peer.user}@{openssh_peer.host}",
        port=openssh_peer.port,
        identity_files=[str(openssh_peer.client_key)],
        known_hosts=[str(openssh_peer.known_hosts)],
        ssh_config=[],
        password=password,
    ) as sp:
        await sp.get(openssh_peer.remote("f.bin"), str(tmp_path / "f.bin"))
        await sp.put(str(tmp_path / "f.bin"), openssh_peer.remote("g.bin"))
    assert caplog.records, "nothing was logged: the test would prove nothing"
    assert password not in caplog.text
    assert all(password not in repr(record.args) for record in caplog.records)


async def test_a_passphrase_and_the_key_it_opens_are_never_logged(
    openssh_peer: Peer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    passphrase, wrong = f"pp-{secrets.token_hex(8)}", f"wrong-{secrets.token_hex(8)}"
    key = encrypted_copy(openssh_peer.client_key, tmp_path, passphrase)
    (openssh_peer.root / "f.bin").write_bytes(b"x" * 1000)
    caplog.set_level(logging.DEBUG)  # every logger, sshpipe's and asyncssh's
    import sshpipe

    client = sshpipe.connect(
        f"{openssh_peer.user}@{openssh_peer.host}",
        port=openssh_peer.port,
        identity_files=[key],
        passphrase=passphrase,
        known_hosts=[str(openssh_peer.known_hosts)],
        ssh_config=[],
    )
    async with client as sp:
        await sp.get(openssh_peer.remote("f.bin"), str(tmp_path / "f.bin"))
        shown = repr(sp) + repr(sp.connect_config)
    # A wrong one fails without showing either.
    with pytest.raises(sshpipe.KeyLoadError) as caught:
        await sshpipe.connect(
            openssh_peer.host, port=openssh_peer.port, identity_files=[key], passphrase=wrong
        ).open()
    assert caplog.records, "nothing was logged: the test would prove nothing"
    for text in (caplog.text, shown, str(caught.value), repr(caught.value)):
        assert passphrase not in text and wrong not in text
    assert all(passphrase not in repr(record.args) for record in caplog.records)
    for line in _key_body(openssh_peer.client_key):
        assert line not in caplog.text
