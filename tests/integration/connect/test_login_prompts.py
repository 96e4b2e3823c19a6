"""Logging in as people do: prompts on the terminal, BatchMode, no terminal, the API's callback.

The command line runs with a pseudo-terminal as its controlling terminal
(``tests.support.terminal``): the prompts must appear there, never on its
stdout or stderr, and a secret typed with echo off must appear nowhere.
Passwords and 2FA run against an in-process server (``tests.support.logins``),
the passphrase against the real sshd.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import shutil
from asyncio.subprocess import DEVNULL
from pathlib import Path

import pytest

import sshpipe
from sshpipe.transport.keys import is_encrypted
from tests.support.keys import encrypted_copy
from tests.support.logins import CHALLENGE_INSTRUCTIONS, LoginServer, login_server
from tests.support.peers import Peer
from tests.support.terminal import INTERRUPT, TTYRun, run_on_terminal

SECRET = "correct horse battery"
WRONG = "tr0ub4dor&3"


def _options(server: LoginServer) -> list[str]:
    """Options for the login server: no key at all, no ssh_config, no agent."""
    return [
        "-P",
        str(server.port),
        "-o",
        f"UserKnownHostsFile={server.known_hosts}",
        "-F",
        "/dev/null",
    ]


def _no_agent(home: Path) -> dict[str, str]:
    # No agent and an empty home (no ~/.ssh/id_*): only what the test gives logs in.
    home.mkdir(exist_ok=True)
    return {"SSH_AUTH_SOCK": "", "HOME": str(home)}


def _assert_one_line(run: TTYRun, code: int, *parts: str) -> None:
    assert run.returncode == code, (run.stderr, run.screen)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sshpipe: "), run.stderr
    for part in parts:
        assert part in lines[0], run.stderr


def _nowhere(run: TTYRun, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in run.stdout and secret not in run.stderr and secret not in run.screen


@pytest.mark.openssh
async def test_passphrase_asked_on_the_terminal_and_retried(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    key = encrypted_copy(openssh_peer.client_key, tmp_path, SECRET)
    data = os.urandom(100_001)
    (openssh_peer.root / "src.bin").write_bytes(data)
    options = [
        o if o != str(openssh_peer.client_key) else str(key) for o in openssh_peer.cli_options()
    ]
    run = await run_on_terminal(
        "get",
        "-q",
        *options,
        openssh_peer.spec("src.bin"),
        str(tmp_path / "got.bin"),
        answers=[
            (f"Enter passphrase for key '{key}': ", WRONG),
            (f"Bad passphrase, try again for {key}: ", SECRET),
        ],
        env={**_no_agent(tmp_path / "home"), "SSHPIPE_DEBUG": "1"},
    )
    assert run.returncode == 0, (run.stderr, run.screen)
    assert (tmp_path / "got.bin").read_bytes() == data
    _nowhere(run, SECRET, WRONG)  # echo was off, and the debug log holds neither
    assert "Enter passphrase" not in run.stdout + run.stderr  # the prompt went to /dev/tty only
    assert run.echo_after


@pytest.mark.openssh
async def test_a_default_key_is_unlocked_once_for_every_connection(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = encrypted_copy(openssh_peer.client_key, home / ".ssh", SECRET).rename(
        home / ".ssh" / "id_ed25519"
    )
    monkeypatch.setenv("HOME", str(home))  # asyncssh's default keys are ~/.ssh/id_*
    asked: list[sshpipe.Prompt] = []

    async def answer(prompt: sshpipe.Prompt) -> str:
        asked.append(prompt)
        return SECRET

    data = os.urandom(200_000)
    (openssh_peer.root / "src.bin").write_bytes(data)
    config = sshpipe.TransferConfig(channels=2, channels_per_connection=1, block_size=32768)
    async with sshpipe.connect(
        f"{openssh_peer.user}@{openssh_peer.host}",
        port=openssh_peer.port,
        known_hosts=[str(openssh_peer.known_hosts)],
        ssh_config=[],
        agent_path="none",
        prompt=answer,
        config=config,
    ) as client:
        await client.get(openssh_peer.remote("src.bin"), tmp_path / "got.bin")
    assert (tmp_path / "got.bin").read_bytes() == data
    assert [(p.kind, p.key_path, p.echo) for p in asked] == [("passphrase", str(key), False)]
    assert asked[0].text == f"Enter passphrase for key '{key}': "


@pytest.mark.asyncssh_server
async def test_password_prompted_three_times_then_exit_6(tmp_path: Path) -> None:
    async with login_server(tmp_path / "server", password=SECRET) as server:
        (server.root / "f").write_bytes(b"x" * 1000)
        target = tmp_path / "got"
        user = getpass.getuser()
        prompt = f"{user}@127.0.0.1's password: "
        wrong = await run_on_terminal(
            "get",
            *_options(server),
            f"{user}@127.0.0.1:/f",
            str(target),
            answers=[(prompt, WRONG), (prompt, WRONG + "2"), (prompt, WRONG + "3")],
            env=_no_agent(tmp_path / "home"),
        )
        _assert_one_line(wrong, 6, "authentication failed")
        assert wrong.screen.count(prompt) == 3, wrong.screen
        assert wrong.screen.count("Permission denied, please try again.") == 2
        assert server.passwords == [WRONG, WRONG + "2", WRONG + "3"]
        _nowhere(wrong, WRONG)
        assert not target.exists()


@pytest.mark.asyncssh_server
async def test_a_2fa_challenge_shows_the_server_text_escaped(tmp_path: Path) -> None:
    async with login_server(tmp_path / "server", password=SECRET, code="314159") as server:
        (server.root / "f").write_bytes(b"2fa" * 333)
        run = await run_on_terminal(
            "get",
            "-q",
            *_options(server),
            "127.0.0.1:/f",
            str(tmp_path / "got"),
            answers=[("Password: ", SECRET), ("Code: ", "314159")],
            env={**_no_agent(tmp_path / "home"), "SSHPIPE_DEBUG": "1"},  # nor in the log
        )
    assert run.returncode == 0, (run.stderr, run.screen)
    assert (tmp_path / "got").read_bytes() == b"2fa" * 333
    assert "Second factor \\x1b[2J\n" + CHALLENGE_INSTRUCTIONS + "\nPassword: " in run.screen
    assert "\x1b" not in run.screen
    assert "Code: 314159" in run.screen  # the server asked for echo: the code is shown
    _nowhere(run, SECRET)


@pytest.mark.asyncssh_server
async def test_batchmode_and_no_terminal_never_prompt(tmp_path: Path) -> None:
    async with login_server(tmp_path / "server", password=SECRET) as server:
        (server.root / "f").write_bytes(b"f")
        home = _no_agent(tmp_path / "home")
        batch = await run_on_terminal(
            "get",
            "-o",
            "BatchMode=yes",
            *_options(server),
            "127.0.0.1:/f",
            str(tmp_path / "a"),
            env=home,
        )
        _assert_one_line(batch, 6, "authentication failed", "(BatchMode: no prompts)")
        assert batch.screen == ""  # nothing written to the terminal
        config = tmp_path / "config"  # the same from ssh_config, which ssh reads for it
        config.write_text("Host 127.0.0.1\n  BatchMode yes\n")
        options = _options(server)
        options[options.index("/dev/null")] = str(config)
        from_file = await run_on_terminal(
            "get", *options, "127.0.0.1:/f", str(tmp_path / "c"), env=home
        )
        _assert_one_line(from_file, 6, "authentication failed", "(BatchMode: no prompts)")
        assert from_file.screen == ""
        alone = await run_on_terminal(
            "get", *_options(server), "127.0.0.1:/f", str(tmp_path / "b"), tty=False, env=home
        )
        _assert_one_line(alone, 6, "authentication failed", "no terminal")
        assert server.passwords == []  # not even an empty one was tried


@pytest.mark.openssh
async def test_an_encrypted_key_without_a_terminal_is_a_key_error(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    key = encrypted_copy(openssh_peer.client_key, tmp_path, SECRET)
    options = [
        o if o != str(openssh_peer.client_key) else str(key) for o in openssh_peer.cli_options()
    ]
    run = await run_on_terminal(
        "get",
        *options,
        openssh_peer.spec("none"),
        str(tmp_path / "x"),
        tty=False,
        env=_no_agent(tmp_path / "home"),
    )
    _assert_one_line(run, 6, f"cannot load private key {key}", "Passphrase must be specified")


@pytest.mark.asyncssh_server
async def test_ctrl_c_at_a_prompt_exits_130_with_echo_back_on(tmp_path: Path) -> None:
    async with login_server(tmp_path / "server", password=SECRET) as server:
        run = await run_on_terminal(
            "get",
            *_options(server),
            "127.0.0.1:/f",
            str(tmp_path / "got"),
            answers=[("'s password: ", INTERRUPT)],
            env=_no_agent(tmp_path / "home"),
        )
    _assert_one_line(run, 130, "interrupted")
    assert run.echo_after  # the prompt turned echo off; Ctrl-C turned it back on
    assert "Traceback" not in run.stderr


@pytest.mark.asyncssh_server
async def test_the_api_callback_is_asked_once_for_every_connection(tmp_path: Path) -> None:
    asked: list[sshpipe.Prompt] = []

    async def answer(prompt: sshpipe.Prompt) -> str | None:
        asked.append(prompt)
        return WRONG if len(asked) == 1 else SECRET

    data = os.urandom(300_000)
    async with login_server(tmp_path / "server", password=SECRET) as server:
        (server.root / "f").write_bytes(data)
        # A person's time at a prompt is not the connection's: the second
        # answer comes after connect_timeout, and still logs in.
        slow = answer

        async def answer(prompt: sshpipe.Prompt) -> str | None:
            if asked:
                await asyncio.sleep(0.7)  # a person typing: longer than connect_timeout
            return await slow(prompt)

        # Two connections of one channel each: the second logs in with what
        # the first learnt, asking nothing.
        config = sshpipe.TransferConfig(channels=2, channels_per_connection=1, block_size=32768)
        async with sshpipe.connect(
            "127.0.0.1",
            port=server.port,
            known_hosts=[str(server.known_hosts)],
            ssh_config=[],
            agent_path="none",
            prompt=answer,
            config=config,
            connect_timeout=0.5,
        ) as client:
            await client.get("/f", tmp_path / "got")
    assert (tmp_path / "got").read_bytes() == data
    assert [p.kind for p in asked] == ["password", "password"]
    assert [p.attempt for p in asked] == [1, 2] and not asked[0].echo
    assert server.logins >= 2, "the second connection logged in"
    assert server.passwords.count(SECRET) == server.logins  # each replayed what worked


@pytest.mark.asyncssh_server
async def test_a_plain_callback_answers_a_2fa_round_once_and_its_errors_end_the_login(
    tmp_path: Path,
) -> None:
    asked: list[sshpipe.Prompt] = []

    def answer(prompt: sshpipe.Prompt) -> str | None:  # blocking is allowed: a worker thread
        asked.append(prompt)
        return {"Password: ": SECRET, "Code: ": "2718"}[prompt.text]

    def broken(prompt: sshpipe.Prompt) -> str | None:
        raise LookupError("no such vault")

    data = os.urandom(200_000)
    async with login_server(tmp_path / "server", password=SECRET, code="2718") as server:
        (server.root / "f").write_bytes(data)
        where = {"port": server.port, "known_hosts": [str(server.known_hosts)], "ssh_config": []}
        config = sshpipe.TransferConfig(channels=2, channels_per_connection=1, block_size=32768)
        async with sshpipe.connect(
            "127.0.0.1", agent_path="none", prompt=answer, config=config, **where
        ) as client:
            await client.get("/f", tmp_path / "got")
        assert server.logins >= 2
        with pytest.raises(sshpipe.AuthenticationError, match="prompt callback raised LookupError"):
            async with sshpipe.connect("127.0.0.1", agent_path="none", prompt=broken, **where):
                pass
    assert (tmp_path / "got").read_bytes() == data
    assert [(p.kind, p.text, p.echo, p.first) for p in asked] == [
        ("challenge", "Password: ", False, True),
        ("challenge", "Code: ", True, False),
    ]  # the second connection replayed both answers
    assert (
        asked[0].name == "Second factor \\x1b[2J"
        and asked[0].instructions == CHALLENGE_INSTRUCTIONS
    )


@pytest.mark.filterwarnings("ignore:.*bcrypt.kdf:UserWarning")  # one round: fast
def test_encrypted_key_files_are_recognised_without_decoding(tmp_path: Path) -> None:
    import asyncssh

    key = asyncssh.generate_private_key("ssh-ed25519")
    assert not is_encrypted(key.export_private_key())
    assert is_encrypted(key.export_private_key(passphrase="x", rounds=1))
    ecdsa = asyncssh.generate_private_key("ecdsa-sha2-nistp256")
    assert not is_encrypted(ecdsa.export_private_key("pkcs8-pem"))
    assert is_encrypted(ecdsa.export_private_key("pkcs8-pem", passphrase="x"))
    assert is_encrypted(ecdsa.export_private_key("openssh", passphrase="x", rounds=1))
    assert not is_encrypted(b"not a key at all")


@pytest.mark.openssh
@pytest.mark.skipif(shutil.which("ssh-agent") is None, reason="no ssh-agent")
async def test_a_key_in_ssh_agent_logs_in_without_i(openssh_peer: Peer, tmp_path: Path) -> None:
    sock = tmp_path / "agent.sock"
    agent = await asyncio.create_subprocess_exec(
        "ssh-agent", "-D", "-a", str(sock), stdout=DEVNULL, stderr=DEVNULL
    )
    try:
        for _ in range(500):  # the socket appears once the agent listens
            if sock.exists():
                break
            await asyncio.sleep(0.01)
        added = await asyncio.create_subprocess_exec(
            "ssh-add",
            "-q",
            str(openssh_peer.client_key),
            env={**os.environ, "SSH_AUTH_SOCK": str(sock)},
            stdout=DEVNULL,
            stderr=DEVNULL,
        )
        assert await added.wait() == 0
        data = os.urandom(50_000)
        (openssh_peer.root / "src.bin").write_bytes(data)
        options = [
            "-P",
            str(openssh_peer.port),
            "-o",
            f"UserKnownHostsFile={openssh_peer.known_hosts}",
        ]
        # No -i, no ssh_config, an empty home: only the agent holds a key.
        home = tmp_path / "home"
        home.mkdir()
        run = await run_on_terminal(
            "get",
            "-q",
            "-o",
            "BatchMode=yes",
            *options,
            "-F",
            "/dev/null",
            openssh_peer.spec("src.bin"),
            str(tmp_path / "got.bin"),
            tty=False,
            env={"SSH_AUTH_SOCK": str(sock), "HOME": str(home)},
        )
        assert run.returncode == 0, run.stderr
        assert (tmp_path / "got.bin").read_bytes() == data
        # ssh_config's IdentityAgent names the socket when the environment has
        # none, and "none" turns the agent off (through the API: no start-up).
        config = home / "config"
        for line, logs_in in ((f"IdentityAgent {sock}", True), ("IdentityAgent none", False)):
            config.write_text(f"Host *\n  {line}\n")
            with pytest.MonkeyPatch.context() as env:
                env.setenv("SSH_AUTH_SOCK", "")
                env.setenv("HOME", str(home))
                client = sshpipe.connect(
                    openssh_peer.host,
                    port=openssh_peer.port,
                    username=openssh_peer.user,
                    known_hosts=[str(openssh_peer.known_hosts)],
                    ssh_config=[str(config)],
                )
                if logs_in:
                    async with client:
                        assert await client.glob(openssh_peer.remote("src.*")) == [
                            openssh_peer.remote("src.bin")
                        ]
                else:
                    with pytest.raises(sshpipe.AuthenticationError):
                        await client.open()
                    await client.aclose()
    finally:
        agent.terminate()
        await agent.wait()
