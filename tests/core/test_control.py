"""Connection reuse's words (``core.control``) and the mux framing (``core.muxwire``), as tables."""

from __future__ import annotations

import hashlib

import pytest

from sshpipe.core.control import (
    ControlSettings,
    ControlWordError,
    control_master,
    control_persist,
    expand_control_path,
)
from sshpipe.core.muxwire import MAX_HEADER, MuxWireError, encode_header, split_header


@pytest.mark.parametrize(
    ("word", "mode"), [("auto", "auto"), ("yes", "auto"), ("AUTO", "auto"), ("no", "no")]
)
def test_control_master_values(word: str, mode: str) -> None:
    assert control_master(word) == mode


@pytest.mark.parametrize("word", ["ask", "autoask", "maybe", ""])
def test_control_master_refuses_what_would_prompt_or_is_unknown(word: str) -> None:
    with pytest.raises(ControlWordError):
        control_master(word)


@pytest.mark.parametrize(
    ("word", "seconds"),
    [
        ("yes", None),
        ("0", None),  # OpenSSH: 0 is "for ever", as yes
        ("no", 0.0),
        ("10", 10.0),
        ("10s", 10.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1W", 604800.0),
        ("2d1s", 172801.0),
    ],
)
def test_control_persist_values(word: str, seconds: float | None) -> None:
    assert control_persist(word) == seconds


@pytest.mark.parametrize("word", ["", "-1", "10x", "m", "1.5h", "1h 30m"])
def test_control_persist_refuses_what_is_no_time(word: str) -> None:
    with pytest.raises(ControlWordError):
        control_persist(word)


def _expand(template: str) -> str:
    return expand_control_path(
        template, host="example.org", port=2222, user="me", local_user="lu", local_host="box.lan"
    )


@pytest.mark.parametrize(
    ("template", "path"),
    [
        ("/s/%r@%h:%p", "/s/me@example.org:2222"),
        ("/s/%u-%l-%L-%n", "/s/lu-box.lan-box-example.org"),
        ("/s/100%%", "/s/100%"),
        ("/s/plain", "/s/plain"),
    ],
)
def test_control_path_tokens(template: str, path: str) -> None:
    assert _expand(template) == path


def test_percent_c_is_openssh_s_hash_of_local_host_host_port_user() -> None:
    digest = hashlib.sha1(b"box.lanexample.org2222me").hexdigest()
    assert _expand("/s/%C") == f"/s/{digest}"
    assert len(digest) == 40


@pytest.mark.parametrize("template", ["/s/%x", "/s/%"])
def test_an_unknown_token_is_refused(template: str) -> None:
    with pytest.raises(ControlWordError):
        _expand(template)


@pytest.mark.parametrize(
    ("settings", "enabled"),
    [
        (ControlSettings(), False),
        (ControlSettings(master="auto"), True),
        (ControlSettings(path="/s/%C"), True),  # a master may listen: used if one does
        (ControlSettings(master="auto", path="none"), False),
        (ControlSettings(master="auto", path="NONE"), False),
    ],
)
def test_when_reuse_is_on(settings: ControlSettings, enabled: bool) -> None:
    assert settings.enabled is enabled


def test_a_header_round_trips_and_keeps_what_follows() -> None:
    line = encode_header({"op": "sftp", "command": "a\nb"})
    assert line.count(b"\n") == 1  # JSON escapes a newline inside
    assert split_header(line + b"\x00\x00\x00\x05raw") == (
        {"op": "sftp", "command": "a\nb"},
        b"\x00\x00\x00\x05raw",
    )


@pytest.mark.parametrize("cut", [0, 1, 5])
def test_a_header_not_yet_whole_waits(cut: int) -> None:
    assert split_header(encode_header({"op": "check"})[:cut]) is None


@pytest.mark.parametrize("raw", [b"[1, 2]\n", b"{nope\n", b"x" * (MAX_HEADER + 1)])
def test_a_bad_or_endless_header_is_refused(raw: bytes) -> None:
    with pytest.raises(MuxWireError):
        split_header(raw)
