"""Which value wins, before any connection: the API's field, ``-o``, the file, our default.

``read_options`` builds asyncssh's options without connecting, so these run
in milliseconds: ssh_config's Ciphers, Compression, ConnectTimeout and
StrictHostKeyChecking are no longer overridden by sshpipe's defaults, and
the "none" cipher stays refused wherever it comes from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sshpipe
from sshpipe.cli.args import parse_args
from sshpipe.cli.settings import ssh_kwargs
from sshpipe.cli.targets import parse_remote
from sshpipe.core.config import DEFAULT_CONNECT_TIMEOUT, ConnectConfig
from sshpipe.transport.cpuflags import default_ciphers
from sshpipe.transport.sshconfig import own_options
from sshpipe.transport.sshoptions import Prepared, compression_mode, read_options


def _prepared(tmp_path: Path, text: str, **fields: Any) -> Prepared:
    config = tmp_path / "config"
    config.write_text(text)
    known = tmp_path / "known_hosts"
    known.touch()
    cfg = ConnectConfig(host="box", ssh_config=(str(config),), known_hosts=(str(known),), **fields)
    return read_options(cfg)


def test_without_ssh_config_our_defaults_apply(tmp_path: Path) -> None:
    prepared = _prepared(tmp_path, "")
    # The order this machine's CPU flags choose (tests/integration/connect/test_cipher_default.py).
    assert prepared.options.encryption_algs == [c.encode() for c in default_ciphers().order]
    assert prepared.options.compression_algs == [b"none"]
    assert prepared.connect_timeout == DEFAULT_CONNECT_TIMEOUT
    assert prepared.strict == "yes" and prepared.jumps == []


def test_ssh_configs_values_are_no_longer_overridden(tmp_path: Path) -> None:
    text = (
        "Host box\n  Ciphers aes256-ctr\n  Compression yes\n  ConnectTimeout 7\n"
        "  StrictHostKeyChecking accept-new\n  ProxyJump me@hop:2222,inner\n"
    )
    prepared = _prepared(tmp_path, text)
    assert prepared.options.encryption_algs == [b"aes256-ctr"]
    assert prepared.options.compression_algs[0] == b"zlib@openssh.com"
    assert prepared.connect_timeout == 7.0
    assert prepared.strict == "accept-new"
    assert prepared.jumps == [("me", "hop", 2222), (None, "inner", None)]


@pytest.mark.parametrize(
    ("field", "text", "mode"),
    [
        (None, "", "auto"),  # sshpipe's default (OpenSSH's is no)
        (None, "Compression auto\n", "auto"),
        (None, "Compression yes\n", "yes"),
        (None, "Compression no\n", "no"),
        ("auto", "Compression yes\n", "auto"),  # the field beats the file
        (True, "", "yes"),
        (False, "Compression yes\n", "no"),
    ],
)
def test_compression_mode(tmp_path: Path, field: bool | str | None, text: str, mode: str) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(text)
    cfg = ConnectConfig(host="box", ssh_config=(str(config),), compression=field)  # type: ignore[arg-type]
    assert compression_mode(cfg) == mode


def test_the_api_fields_beat_ssh_config(tmp_path: Path) -> None:
    text = (
        "Ciphers aes256-ctr\nCompression yes\nConnectTimeout 7\n"
        "StrictHostKeyChecking accept-new\nProxyJump hop\n"
    )
    prepared = _prepared(
        tmp_path,
        text,
        ciphers=("aes128-ctr",),
        compression=False,
        connect_timeout=3.0,
        strict_host_key_checking="no",
        proxy_jump="none",
    )
    assert prepared.options.encryption_algs == [b"aes128-ctr"]
    assert prepared.options.compression_algs == [b"none"]
    assert prepared.connect_timeout == 3.0
    assert prepared.strict == "no" and prepared.jumps == []


@pytest.mark.parametrize(("value", "policy"), [("ask", "yes"), ("off", "no"), ("YES", "yes")])
def test_strict_host_key_checkings_other_spellings(tmp_path: Path, value: str, policy: str) -> None:
    prepared = _prepared(tmp_path, f"StrictHostKeyChecking {value}\n")
    assert prepared.strict == policy


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Ciphers none\n", "'none' cipher is never allowed"),
        ("Ciphers +none\n", "'none' cipher is never allowed"),
        ("StrictHostKeyChecking maybe\n", "StrictHostKeyChecking must be"),
        ("ConnectTimeout soon\n", "ConnectTimeout must be"),
        ("ProxyJump host:99999\n", "bad port in jump host"),
        ('Host box\n  User "open\n', "line 2: No closing quotation"),
    ],
)
def test_bad_values_in_the_file_are_usage_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(sshpipe.UsageError, match=message):
        _prepared(tmp_path, text)


def test_o_lines_beat_the_file_for_asyncsshs_keywords_too(tmp_path: Path) -> None:
    prepared = _prepared(
        tmp_path,
        "Host box\n  HostName 10.0.0.1\n  Port 2200\n",
        ssh_options=(("HostName", "10.9.9.9"), ("Ciphers", "aes128-ctr")),
    )
    assert prepared.options.host == "10.9.9.9"
    assert prepared.port == 2200
    assert prepared.options.encryption_algs == [b"aes128-ctr"]


def test_a_missing_config_file_is_one_usage_error(tmp_path: Path) -> None:
    with pytest.raises(sshpipe.UsageError, match="cannot read ssh_config file"):
        own_options([str(tmp_path / "nope")], "box")


def test_own_options_keeps_to_its_table(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host box\n  Port 1\n  BatchMode yes\n  ControlPersist 60\n")
    assert own_options([str(config)], "box", options=[("BatchMode", "no")]) == {
        "batchmode": "no",
        "controlpersist": "60",
    }


async def test_a_proxy_jump_loop_ends_in_one_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host loop\n  ProxyJump loop\n")
    client = sshpipe.connect("loop", ssh_config=[config], known_hosts=[tmp_path / "kh"])
    with pytest.raises(sshpipe.UsageError, match="jump hosts deep"):
        await client.open()


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["-J", "a,b"], {"proxy_jump": "a,b"}),
        (["-J", "none", "-o", "ProxyJump=a"], {"proxy_jump": "none"}),  # -J beats -o
        (["-o", "ProxyJump=a", "-o", "ProxyJump=b"], {"proxy_jump": "a"}),  # the first -o
        (
            ["-o", "HostName=10.0.0.5", "-o", "identitiesonly yes"],
            {"ssh_options": [("HostName", "10.0.0.5"), ("IdentitiesOnly", "yes")]},
        ),
        (["-o", "StrictHostKeyChecking=ask"], {"strict_host_key_checking": "yes"}),
        (["-o", "StrictHostKeyChecking=off"], {"strict_host_key_checking": "no"}),
        (["-C", "-o", "Compression=no"], {"compression": True}),  # -C first, as in ssh
        (["-o", "Compression=no"], {"compression": False}),
        (["-o", "Compression=AUTO"], {"compression": "auto"}),  # sshpipe's own word
        ([], {"compression": None}),  # then ssh_config's, else auto (``compression_mode``)
        (["-o", "ConnectTimeout=3", "-o", "ConnectTimeout=9"], {"connect_timeout": 3.0}),
    ],
)
def test_the_command_lines_ssh_options(words: list[str], expected: dict[str, object]) -> None:
    args = parse_args(["get", *words, "host:x", "."])
    spec = parse_remote("host:x")
    assert spec is not None
    kwargs = ssh_kwargs(args, spec)
    assert {key: kwargs.get(key) for key in expected} == expected


@pytest.mark.parametrize(
    "words", [["-o", "Host=x"], ["-o", "Compression=maybe"], ["-o", "NoSuchOption=1"]]
)
def test_o_options_refused(words: list[str]) -> None:
    args = parse_args(["get", *words, "host:x", "."])
    spec = parse_remote("host:x")
    assert spec is not None
    with pytest.raises(sshpipe.UsageError):
        sshpipe.connect("host", **ssh_kwargs(args, spec))
