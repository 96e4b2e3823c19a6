"""Which key logs in: OpenSSH's order, and an encrypted key asked for only once the server wants it.

With ``-i`` (or IdentityFile) the default ``~/.ssh/id_*`` keys are not
offered at all; the named ones go in their order, an encrypted one by its
public half, its passphrase asked only when the server accepts that half
(PK_OK). Which key logged in matters (an authorized_keys line can tie a key
to a forced command, a ``from=`` rule, another principal), so here each key
is tied to a start directory of its own (``command="internal-sftp -d DIR"``)
and ``who.txt``, read relative to it, says which key logged in.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.sshd import SSHServerInfo, openssh_server
from tests.support.keys import new_key
from tests.support.terminal import run_on_terminal
from tests.support.waits import eventually

pytestmark = pytest.mark.openssh

SECRET = "open sesame"


@dataclass(frozen=True)
class Keyed:
    """An sshd whose keys each log in to a directory of their own."""

    info: SSHServerInfo
    home: Path  # its .ssh/id_ed25519 is the unencrypted default key, "default"
    keys: dict[str, Path]  # "named" (encrypted), "plain", "pem" (encrypted, no public half)
    publics: dict[str, str]  # their public halves, as authorized_keys lines

    def authorize(self, *names: str) -> None:
        lines = [
            f'command="internal-sftp -d {self.info.root / name}" {self.publics[name]}\n'
            for name in names
        ]
        self.info.authorized_keys.write_text("".join(lines))

    def client(self, **options: object) -> sshpipe.Client:
        options.setdefault("agent_path", "none")
        return sshpipe.connect(
            f"{self.info.user}@{self.info.host}",
            port=self.info.port,
            known_hosts=[str(self.info.known_hosts)],
            **options,  # type: ignore[arg-type]
        )


@pytest.fixture(scope="module")
def keyed(sshd_executable: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keyed]:
    workdir = tmp_path_factory.mktemp("keyorder")
    home = workdir / "home"
    (home / ".ssh").mkdir(parents=True)
    keys = {
        "default": new_key(home / ".ssh", "id_ed25519"),
        "named": new_key(workdir, "named", passphrase=SECRET),
        "plain": new_key(workdir, "plain"),
        "pem": new_key(workdir, "pem", passphrase=SECRET, pem=True),
    }
    publics = {name: Path(f"{path}.pub").read_text().strip() for name, path in keys.items()}
    Path(f"{keys['pem']}.pub").unlink()  # the PEM key has no public half left to read
    with openssh_server(workdir / "sshd") as info:
        for name in keys:
            (info.root / name).mkdir()
            (info.root / name / "who.txt").write_text(name)
        yield Keyed(info, home, keys, publics)


@pytest.fixture
def asked(keyed: Keyed, monkeypatch: pytest.MonkeyPatch) -> list[sshpipe.Prompt]:
    monkeypatch.setenv("HOME", str(keyed.home))  # where the default keys are
    return []


def _answer(asked: list[sshpipe.Prompt]) -> object:
    async def answer(prompt: sshpipe.Prompt) -> str:
        asked.append(prompt)
        return SECRET

    return answer


async def _who(client: sshpipe.Client, tmp_path: Path) -> str:
    async with client as sp:
        await sp.get("who.txt", tmp_path / "who.txt")
    return (tmp_path / "who.txt").read_text()


async def test_a_named_encrypted_key_is_asked_for_and_logs_in_where_a_default_one_would(
    keyed: Keyed, asked: list[sshpipe.Prompt], tmp_path: Path
) -> None:
    """The issue's case: an unencrypted, authorized ~/.ssh/id_ed25519 logged in instead."""
    keyed.authorize("default", "named")
    named = keyed.keys["named"]
    client = keyed.client(identity_files=[named], ssh_config=[], prompt=_answer(asked))
    assert await _who(client, tmp_path) == "named"
    assert [(p.kind, p.key_path) for p in asked] == [("passphrase", str(named))]


async def test_a_named_key_the_server_refuses_is_not_asked_for_nor_a_default_offered(
    keyed: Keyed, asked: list[sshpipe.Prompt], tmp_path: Path
) -> None:
    keyed.authorize("default")  # the named key's public half is refused: no PK_OK
    named = keyed.keys["named"]
    client = keyed.client(identity_files=[named], ssh_config=[], prompt=_answer(asked))
    with pytest.raises(sshpipe.AuthenticationError):
        await _who(client, tmp_path)
    assert asked == []


async def test_named_keys_go_in_their_order_an_encrypted_one_in_its_turn(
    keyed: Keyed, asked: list[sshpipe.Prompt], tmp_path: Path
) -> None:
    keyed.authorize("named", "plain")
    files = [keyed.keys["named"], keyed.keys["plain"]]
    client = keyed.client(identity_files=files, ssh_config=[], prompt=_answer(asked))
    assert await _who(client, tmp_path) == "named"  # not the unencrypted one after it
    assert len(asked) == 1
    asked.clear()
    client = keyed.client(identity_files=files[::-1], ssh_config=[], prompt=_answer(asked))
    assert await _who(client, tmp_path) == "plain"
    assert asked == []  # the encrypted one was never reached


async def test_ssh_configs_identity_file_is_offered_first_too(
    keyed: Keyed, asked: list[sshpipe.Prompt], tmp_path: Path
) -> None:
    keyed.authorize("default", "named")
    config = tmp_path / "ssh_config"
    config.write_text(f"Host *\n  IdentityFile {keyed.keys['named']}\n  IdentityFile ~/nowhere\n")
    client = keyed.client(ssh_config=[str(config)], prompt=_answer(asked))
    assert await _who(client, tmp_path) == "named"
    assert len(asked) == 1


async def test_without_any_key_named_the_default_one_logs_in(
    keyed: Keyed, asked: list[sshpipe.Prompt], tmp_path: Path
) -> None:
    keyed.authorize("default", "named")
    client = keyed.client(ssh_config=[], prompt=_answer(asked))
    assert await _who(client, tmp_path) == "default"
    assert asked == []


async def test_a_key_with_no_public_half_is_asked_for_and_no_default_offered(
    keyed: Keyed, asked: list[sshpipe.Prompt], tmp_path: Path
) -> None:
    """An encrypted PEM key without its .pub cannot be offered before it is opened:
    it is asked for when the others are spent, and the default keys are not offered."""
    keyed.authorize("default", "pem")
    pem = keyed.keys["pem"]
    client = keyed.client(identity_files=[pem], ssh_config=[], prompt=_answer(asked))
    assert await _who(client, tmp_path) == "pem"
    assert [p.key_path for p in asked] == [str(pem)]


async def test_on_a_terminal_the_named_key_is_asked_for_and_logs_in(
    keyed: Keyed, tmp_path: Path
) -> None:
    keyed.authorize("default", "named")
    named = keyed.keys["named"]
    run = await run_on_terminal(
        "get",
        "-q",
        "-P",
        str(keyed.info.port),
        "-o",
        f"UserKnownHostsFile={keyed.info.known_hosts}",
        "-F",
        "/dev/null",
        "-i",
        str(named),
        f"{keyed.info.user}@{keyed.info.host}:who.txt",
        str(tmp_path / "who.txt"),
        answers=[(f"Enter passphrase for key '{named}': ", SECRET)],
        env={"SSH_AUTH_SOCK": "", "HOME": str(keyed.home)},
    )
    assert run.returncode == 0, (run.stderr, run.screen)
    assert (tmp_path / "who.txt").read_text() == "named"
    assert SECRET not in run.screen + run.stderr + run.stdout


@pytest.mark.skipif(shutil.which("ssh-agent") is None, reason="no ssh-agent")
async def test_with_identities_only_the_agents_copy_of_a_named_key_signs_unasked(
    keyed: Keyed, asked: list[sshpipe.Prompt], tmp_path: Path
) -> None:
    """The agent holds the encrypted key's private half: ssh signs with it, asking
    nothing, and IdentitiesOnly keeps the agent's other keys (here: plain) out."""
    keyed.authorize("named", "plain")
    sock = tmp_path / "agent.sock"
    agent = await asyncio.create_subprocess_exec(
        "ssh-agent", "-D", "-a", str(sock), stdout=DEVNULL, stderr=DEVNULL
    )
    try:
        await eventually(sock.exists)  # the agent listens
        agent_env = {**os.environ, "SSH_AUTH_SOCK": str(sock), "SSH_ASKPASS_REQUIRE": "never"}
        for name in ("plain", "named"):  # the agent offers plain first
            add = await asyncio.create_subprocess_exec(
                "ssh-add",
                "-q",
                str(keyed.keys[name]),
                env=agent_env,
                stdin=PIPE,
                stdout=DEVNULL,
                stderr=DEVNULL,
            )
            await add.communicate(f"{SECRET}\n".encode() if name == "named" else b"")
            assert add.returncode == 0, name
        config = tmp_path / "ssh_config"
        config.write_text(f"Host *\n  IdentitiesOnly yes\n  IdentityFile {keyed.keys['named']}\n")
        client = keyed.client(ssh_config=[str(config)], prompt=_answer(asked), agent_path=sock)
        assert await _who(client, tmp_path) == "named"
        assert asked == []
    finally:
        agent.terminate()
        await agent.wait()
