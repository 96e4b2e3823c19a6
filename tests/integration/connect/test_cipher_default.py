"""The cipher the CPU's flags choose reaches a stock sshd, and what is set still wins.

``transport.cpuflags`` reads /proc/cpuinfo once per process; these tests point
it at a file of their own and clear its cache, so both branches of the choice
run here whatever this machine's CPU is.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sshpipe.core.cipherorder import AES_FIRST, CHACHA_FIRST
from sshpipe.core.config import DEFAULT_CIPHERS, ConnectConfig
from sshpipe.transport import cpuflags
from sshpipe.transport.sshoptions import read_options
from tests.support.cli import run_cli
from tests.support.peers import Peer

WITH_AES = "processor\t: 0\nflags\t\t: fpu sse2 pclmulqdq aes avx\n"
WITHOUT_AES = "processor\t: 0\nflags\t\t: fpu sse2\n"


@pytest.fixture
def fake_cpuinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cpuinfo file the edge reads instead of the machine's; the cache cleared around it."""
    path = tmp_path / "cpuinfo"
    monkeypatch.setattr(cpuflags, "CPUINFO", path)
    cpuflags.forget()
    yield path
    cpuflags.forget()


def _negotiated(text: str) -> str:
    return next(line for line in text.splitlines() if "; kex " in line)


@pytest.mark.parametrize(
    ("cpuinfo", "cipher"),
    [(WITH_AES, "aes128-gcm@openssh.com"), (WITHOUT_AES, "chacha20-poly1305@openssh.com")],
    ids=["aes", "no-aes"],
)
async def test_sshd_gets_the_first_cipher_of_the_cpus_order(
    openssh_peer: Peer,
    tmp_path: Path,
    fake_cpuinfo: Path,
    caplog: pytest.LogCaptureFixture,
    cpuinfo: str,
    cipher: str,
) -> None:
    fake_cpuinfo.write_text(cpuinfo)
    data = os.urandom(100_000)
    (openssh_peer.root / "src.bin").write_bytes(data)
    with caplog.at_level(logging.DEBUG, logger="sshpipe.ssh"):
        async with openssh_peer.client() as client:
            await client.get(openssh_peer.remote("src.bin"), str(tmp_path / "out"))
    assert (tmp_path / "out").read_bytes() == data
    assert f"; cipher {cipher}; MAC implicit (AEAD cipher);" in _negotiated(caplog.text)
    order = AES_FIRST if cipher.startswith("aes") else CHACHA_FIRST
    assert f"default cipher order {','.join(order)}: " in caplog.text


def test_unreadable_flags_keep_the_default_order(fake_cpuinfo: Path) -> None:
    choice = cpuflags.default_ciphers()  # the file was never written
    assert choice.order == DEFAULT_CIPHERS and "unreadable" in choice.reason


def test_the_cpu_is_read_once_per_process(fake_cpuinfo: Path) -> None:
    fake_cpuinfo.write_text(WITHOUT_AES)
    assert cpuflags.default_ciphers().order == CHACHA_FIRST
    fake_cpuinfo.write_text(WITH_AES)
    assert cpuflags.default_ciphers().order == CHACHA_FIRST  # cached, not re-read


def test_connections_opening_at_once_read_the_cpu_once(
    fake_cpuinfo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_options runs in threads: a second reader waits for the first's answer."""
    fake_cpuinfo.write_text(WITHOUT_AES)
    readers: list[int] = []
    second = threading.Event()
    parse = cpuflags.cpu_flags

    def counting(text: str) -> tuple[str, frozenset[str]] | None:
        readers.append(threading.get_ident())
        if len(readers) > 1:
            second.set()
        # Without the lock a second thread would arrive while this one waits.
        second.wait(timeout=0.2)
        return parse(text)

    monkeypatch.setattr(cpuflags, "cpu_flags", counting)
    with ThreadPoolExecutor(max_workers=4) as pool:
        orders = list(pool.map(lambda _: cpuflags.default_ciphers().order, range(4)))
    assert orders == [CHACHA_FIRST] * 4
    assert len(readers) == 1


@pytest.mark.parametrize(
    ("config_text", "fields", "expected"),
    [
        ("", {}, list(CHACHA_FIRST)),
        ("Host box\n  Ciphers aes256-ctr\n", {}, ["aes256-ctr"]),
        ("Ciphers aes256-ctr\n", {"ciphers": ("aes128-ctr",)}, ["aes128-ctr"]),
    ],
)
def test_ssh_config_and_the_api_still_beat_the_cpus_choice(
    tmp_path: Path, fake_cpuinfo: Path, config_text: str, fields: dict[str, tuple[str, ...]],
    expected: list[str],
) -> None:  # fmt: skip
    fake_cpuinfo.write_text(WITHOUT_AES)
    config = tmp_path / "config"
    config.write_text(config_text)
    known = tmp_path / "known_hosts"
    known.touch()
    cfg = ConnectConfig(host="box", ssh_config=(str(config),), known_hosts=(str(known),), **fields)
    assert read_options(cfg).options.encryption_algs == [name.encode() for name in expected]


def test_dash_vv_says_why_and_dash_c_wins(openssh_peer: Peer, tmp_path: Path) -> None:
    """The command line as a user runs it, on this machine's real CPU flags."""
    data = os.urandom(50_000)
    (openssh_peer.root / "src.bin").write_bytes(data)
    cpuflags.forget()
    order = cpuflags.default_ciphers().order  # what this machine's flags choose
    plain = run_cli(
        "get", "-vv", *openssh_peer.cli_options(), openssh_peer.spec("src.bin"), str(tmp_path / "a")
    )
    assert plain.returncode == 0, plain.stderr
    assert (tmp_path / "a").read_bytes() == data
    assert f"default cipher order {','.join(order)}: " in plain.stderr
    assert f"; cipher {order[0]};" in _negotiated(plain.stderr)  # stock sshd takes all of them
    forced = run_cli(
        "get", "-vv", "-c", "aes256-ctr", *openssh_peer.cli_options(),
        openssh_peer.spec("src.bin"), str(tmp_path / "b"),
    )  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    assert (tmp_path / "b").read_bytes() == data
    assert "; cipher aes256-ctr; MAC " in _negotiated(forced.stderr)
    assert "default cipher order" not in forced.stderr  # nothing chosen: -c did
