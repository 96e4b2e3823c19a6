"""Keys and host keys as objects, against the real sshd: passphrases, key objects,
a known_hosts callable, and connect errors a retry loop can trust (host, port,
fingerprint as attributes; what no retry fixes is not ``retryable``)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from pathlib import Path

import asyncssh
import pytest

import sshpipe
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.keys import encrypted_copy
from tests.support.peers import Peer

DATA = b"keys " * 2000


def _connect(peer: Peer, **options: object) -> sshpipe.Client:
    """A client that offers only the keys given (the fixture's by default): no agent."""
    defaults: dict[str, object] = {
        "port": peer.port,
        "identity_files": [str(peer.client_key)],
        "known_hosts": [str(peer.known_hosts)],
        "ssh_config": [],
        "agent_path": "none",
    }
    return sshpipe.connect(f"{peer.user}@{peer.host}", **{**defaults, **options})  # type: ignore[arg-type]


def _fingerprint(known_hosts: Path) -> str:
    """``ssh-keygen -lf``'s SHA-256 of the fixture's host key (its known_hosts entry)."""
    listed = subprocess.run(
        ["ssh-keygen", "-lf", str(known_hosts)], check=True, capture_output=True, text=True
    ).stdout.split()
    return listed[1]


async def _round_trip(client: sshpipe.Client, peer: Peer, tmp_path: Path) -> None:
    (peer.root / "k.bin").write_bytes(DATA)
    async with client as sp:
        await sp.get(peer.remote("k.bin"), str(tmp_path / "k.bin"))
    assert (tmp_path / "k.bin").read_bytes() == DATA


async def test_an_encrypted_key_logs_in_with_its_passphrase_only(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    passphrase = f"pp-{secrets.token_hex(6)}"
    key = encrypted_copy(openssh_peer.client_key, tmp_path, passphrase)
    # A path object, as PathLike.
    await _round_trip(
        _connect(openssh_peer, identity_files=[key], passphrase=passphrase), openssh_peer, tmp_path
    )
    for wrong in (None, "not-the-passphrase"):
        client = _connect(openssh_peer, identity_files=[str(key)], passphrase=wrong)
        assert passphrase not in repr(client.connect_config)
        with pytest.raises(sshpipe.KeyLoadError) as caught:
            await client.open()
        error = caught.value
        assert isinstance(error, sshpipe.AuthenticationError)
        assert not error.retryable and error.exit_code == 6
        assert error.key == str(key) and str(key) in str(error)
        assert error.host == openssh_peer.host and error.port == openssh_peer.port
        assert ("cannot decrypt" in str(error)) == (wrong is not None)
    with pytest.raises(sshpipe.KeyLoadError, match="No such file") as missing:
        await _connect(openssh_peer, identity_files=[str(tmp_path / "nope")]).open()
    assert not missing.value.retryable


async def test_key_objects_log_in(openssh_peer: Peer, tmp_path: Path) -> None:
    passphrase = f"pp-{secrets.token_hex(6)}"
    encrypted = encrypted_copy(openssh_peer.client_key, tmp_path, passphrase)
    from_bytes = sshpipe.load_key(encrypted.read_bytes(), passphrase=passphrase)
    from_file = sshpipe.load_key(encrypted, passphrase=passphrase)
    assert from_bytes == from_file  # the same public half; the secret is never compared
    assert from_bytes.type == "ssh-ed25519" and from_bytes.fingerprint.startswith("SHA256:")
    assert passphrase not in repr(from_bytes) and "PRIVATE" not in repr(from_bytes)
    await _round_trip(
        _connect(openssh_peer, keys=[from_bytes], identity_files=[]), openssh_peer, tmp_path
    )
    # An asyncssh key a user already holds goes in as it is.
    held = asyncssh.read_private_key(str(openssh_peer.client_key))
    await _round_trip(
        _connect(openssh_peer, keys=[held], identity_files=[]), openssh_peer, tmp_path
    )
    with pytest.raises(sshpipe.KeyLoadError, match="Passphrase must be specified"):
        sshpipe.load_key(encrypted)
    with pytest.raises(sshpipe.KeyLoadError, match="cannot decrypt"):
        sshpipe.load_key(encrypted.read_bytes(), passphrase="wrong")


async def test_a_known_hosts_callable_sees_the_key_and_decides(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    expected = _fingerprint(openssh_peer.known_hosts)
    entry = openssh_peer.known_hosts.read_text().split()
    seen: list[tuple[str, int, sshpipe.HostKey]] = []

    def trusting(host: str, port: int, key: sshpipe.HostKey) -> bool:
        seen.append((host, port, key))
        return key.fingerprint == expected

    await _round_trip(_connect(openssh_peer, known_hosts=trusting), openssh_peer, tmp_path)
    ((host, port, key),) = seen
    assert (host, port) == (openssh_peer.host, openssh_peer.port)
    assert key == sshpipe.HostKey(type=entry[1], fingerprint=expected, openssh=" ".join(entry[1:3]))

    with pytest.raises(sshpipe.HostKeyError) as refused:
        await _connect(openssh_peer, known_hosts=lambda h, p, k: False).open()
    error = refused.value
    assert type(error) is sshpipe.HostKeyError and not error.retryable and error.exit_code == 7
    assert (error.host, error.port) == (openssh_peer.host, openssh_peer.port)
    assert (error.fingerprint, error.key_type) == (expected, entry[1])
    assert "refused by the known_hosts callable" in str(error)

    def broken(host: str, port: int, key: sshpipe.HostKey) -> bool:
        raise KeyError("no such pin")

    with pytest.raises(sshpipe.HostKeyError, match="raised KeyError") as raised:
        await _connect(openssh_peer, known_hosts=broken).open()
    assert isinstance(raised.value.__cause__, KeyError)


async def test_unknown_and_changed_host_keys_say_which_key(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    expected = _fingerprint(openssh_peer.known_hosts)
    key_type = openssh_peer.known_hosts.read_text().split()[1]
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    with pytest.raises(sshpipe.UnknownHostKey) as unknown:
        await _connect(openssh_peer, known_hosts=[str(empty)]).open()
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().split()
    changed = tmp_path / "known_hosts_changed"
    changed.write_text(f"[{openssh_peer.host}]:{openssh_peer.port} {other[0]} {other[1]}\n")
    with pytest.raises(sshpipe.HostKeyMismatch) as mismatch:
        await _connect(openssh_peer, known_hosts=[str(changed)]).open()
    for error in (unknown.value, mismatch.value):
        assert (error.host, error.port) == (openssh_peer.host, openssh_peer.port)
        assert (error.fingerprint, error.key_type) == (expected, key_type)
        assert expected in str(error) and not error.retryable and error.exit_code == 7
    text = str(unknown.value)
    assert "strict_host_key_checking='accept-new' in the API" in text
    assert "-o StrictHostKeyChecking=accept-new on the command line" in text
    assert empty.read_text() == ""  # nothing recorded under "yes"


async def test_a_refused_port_is_a_retryable_connect_error_naming_it(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on (bound, never listened)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        client = sshpipe.connect(
            "127.0.0.1", port=port, ssh_config=[], known_hosts=[os.devnull], connect_timeout=5
        )
        with pytest.raises(sshpipe.ConnectError, match="connection refused") as caught:
            await client.open()
    error = caught.value
    assert type(error) is sshpipe.ConnectError and error.retryable and error.exit_code == 5
    assert (error.host, error.port) == ("127.0.0.1", port)


def test_cli_encrypted_key_without_passphrase_is_one_line_exit_6(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    key = encrypted_copy(openssh_peer.client_key, tmp_path, "a passphrase")
    (openssh_peer.root / "src.bin").write_bytes(b"x")
    options = openssh_peer.cli_options()
    options[options.index(str(openssh_peer.client_key))] = str(key)
    result = run_cli("get", *options, openssh_peer.spec("src.bin"), str(tmp_path / "out"))
    assert_one_line_error(result, 6, "cannot load private key", str(key), "encrypted")
    assert not (tmp_path / "out").exists()
