"""An in-process asyncssh server that logs in by password, or by a 2FA challenge.

No key is authorised: only the password (``password_auth``) or a
keyboard-interactive round asking "Password: " (echo off) and "Code: " (echo
on) logs in. The challenge's name and instructions carry an escape sequence,
as a hostile server's would: the client must show it escaped. It serves SFTP
from ``root`` as the embedded server does, and counts the log-ins that
succeeded (each connection of a client logs in once).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from sshpipe.testing.embedded import chrooted_sftp

__all__ = ["CHALLENGE_INSTRUCTIONS", "CHALLENGE_NAME", "LoginServer", "login_server"]

CHALLENGE_NAME = "Second factor \x1b[2J"  # ESC [2J clears a terminal: must arrive escaped
CHALLENGE_INSTRUCTIONS = "Type the code from your phone."


@dataclass
class LoginServer:
    host: str
    port: int
    known_hosts: Path
    root: Path
    logins: int = 0  # log-ins that succeeded
    passwords: list[str] = field(default_factory=list)  # every password tried


class _Auth(asyncssh.SSHServer):
    def __init__(self, state: LoginServer, password: str, code: str | None) -> None:
        self._state = state
        self._password = password
        self._code = code

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return self._code is None

    def validate_password(self, username: str, password: str) -> bool:
        self._state.passwords.append(password)
        return password == self._password

    def kbdint_auth_supported(self) -> bool:
        return self._code is not None

    def get_kbdint_challenge(
        self, username: str, lang: str, submethods: str
    ) -> tuple[str, str, str, Sequence[tuple[str, bool]]]:
        return CHALLENGE_NAME, CHALLENGE_INSTRUCTIONS, "", [("Password: ", False), ("Code: ", True)]

    def validate_kbdint_response(self, username: str, responses: Sequence[str]) -> bool:
        self._state.passwords.append(responses[0] if responses else "")
        return list(responses) == [self._password, self._code]

    def auth_completed(self) -> None:
        self._state.logins += 1


@contextlib.asynccontextmanager
async def login_server(
    workdir: Path, *, password: str, code: str | None = None
) -> AsyncIterator[LoginServer]:
    """Serve for the ``async with`` block; with ``code``, only the 2FA round logs in."""
    root = workdir / "root"
    root.mkdir(parents=True, exist_ok=True)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    state = LoginServer("127.0.0.1", 0, workdir / "known_hosts", root)

    def sftp(chan: Any) -> asyncssh.SFTPServer:
        return chrooted_sftp(chan, root)

    server = await asyncssh.listen(
        state.host,
        0,
        server_host_keys=[host_key],
        server_factory=lambda: _Auth(state, password, code),
        sftp_factory=sftp,
        allow_scp=False,
    )
    state.port = server.sockets[0].getsockname()[1]
    line = f"[{state.host}]:{state.port} {host_key.export_public_key().decode().strip()}\n"
    state.known_hosts.write_text(line)
    try:
        yield state
    finally:
        server.close()
        await server.wait_closed()
