"""``python -m sshpipe`` against the real OpenSSH sshd: exit codes and one-line errors."""

from __future__ import annotations

import json
import os
import platform
import re
import socket
from pathlib import Path
from urllib.parse import quote

import asyncssh
import pytest

import sshpipe
from sshpipe.core.config import DEFAULT_CHANNELS_PER_CONNECTION, DEFAULT_RETRIES
from sshpipe.testing.sshd import openssh_server
from tests.support.cli import assert_one_line_error, run_cli
from tests.support.peers import Peer


def test_get_and_put_succeed_and_report(openssh_peer: Peer, tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 1)
    (openssh_peer.root / "src.bin").write_bytes(data)
    got = run_cli(
        "get", *openssh_peer.cli_options(), openssh_peer.spec("src.bin"), str(tmp_path / "got.bin")
    )
    assert got.returncode == 0, got.stderr
    assert "MB/s" in got.stdout and got.stderr == ""
    assert (tmp_path / "got.bin").read_bytes() == data
    put = run_cli(
        "put",
        "-q",
        "-R",
        "7",
        "-B",
        "64K",
        *openssh_peer.cli_options(),
        str(tmp_path / "got.bin"),
        openssh_peer.spec("put.bin"),
    )
    assert put.returncode == 0, put.stderr
    assert put.stdout == ""
    assert (openssh_peer.root / "put.bin").read_bytes() == data


def test_without_the_cli_extra_the_command_runs_on_the_stock_loop(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """uvloop is the cli extra's; where it cannot be imported, asyncio's loop runs, silently."""
    shadow = tmp_path / "no-uvloop"
    shadow.mkdir()
    tried = tmp_path / "uvloop-tried"
    # ``python -m`` puts its working directory first on sys.path: this uvloop is found first.
    (shadow / "uvloop.py").write_text(
        f"open({str(tried)!r}, 'w').close()\nraise ImportError('no uvloop here')\n"
    )
    data = os.urandom(300_000)
    (openssh_peer.root / "src.bin").write_bytes(data)
    got = run_cli(
        "get",
        *openssh_peer.cli_options(),
        openssh_peer.spec("src.bin"),
        str(tmp_path / "got.bin"),
        cwd=shadow,
    )
    assert got.returncode == 0, got.stderr
    assert got.stderr == ""
    assert tried.exists()  # the command did look for uvloop
    assert (tmp_path / "got.bin").read_bytes() == data


def test_json_stats(openssh_peer: Peer, tmp_path: Path, asyncssh_patched: bool) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"x" * 100_000)
    result = run_cli(
        "get",
        "--json",
        "-R",
        "4",
        "-B",
        "8192",
        "--channels",
        "1",
        *openssh_peer.cli_options(),
        openssh_peer.spec("src.bin"),
        str(tmp_path / "out"),
    )
    stats = json.loads(result.stdout)
    assert stats["bytes"] == 100_000
    assert stats["block_size"] == 8192
    assert stats["peak_requests_in_flight"] == 4  # -R caps each channel, as sftp -R does
    assert stats["requests"] == 14  # 13 blocks and the probe that finds EOF
    # Why it ran at the speed it did: one fixed channel on one connection, and the RTT.
    assert (stats["channels"], stats["connections"], stats["flow_phase"]) == (1, 1, "fixed")
    assert 0 < stats["rtt_min"] <= stats["rtt_initial"] < 1
    assert stats["receive_window"] == 15 * 1024 * 1024
    # The server's grant is read by a patch (``peer_window``); 0 where asyncssh runs stock.
    assert (stats["peer_window"] > 0) is asyncssh_patched


def test_port_from_o_option_and_user_from_spec(openssh_peer: Peer, tmp_path: Path) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"abc")
    options = openssh_peer.cli_options()
    options[:2] = ["-o", f"Port={openssh_peer.port}"]
    result = run_cli("get", *options, openssh_peer.spec("src.bin"), str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out").read_bytes() == b"abc"


# -- targets and option placement, as an scp/sftp user writes them ---------------------


def _without_port(peer: Peer) -> list[str]:
    options = peer.cli_options()
    assert options[0] == "-P"
    return options[2:]


def test_get_through_an_sftp_url_takes_its_port(openssh_peer: Peer, tmp_path: Path) -> None:
    data = os.urandom(200_000)
    (openssh_peer.root / "a b+c.bin").write_bytes(data)
    # An absolute path: the second '/' after the host; percent-escaped; no -P.
    url = f"sftp://{openssh_peer.user}@{openssh_peer.host}:{openssh_peer.port}/"
    url += quote(openssh_peer.remote("a b+c.bin"))
    assert "%20" in url and "%2B" in url and "//" in url.removeprefix("sftp://")
    got = run_cli("get", "-q", *_without_port(openssh_peer), url, str(tmp_path / "got.bin"))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "got.bin").read_bytes() == data


def test_put_with_the_options_before_the_verb(openssh_peer: Peer, tmp_path: Path) -> None:
    data = os.urandom(150_000)
    (tmp_path / "up.bin").write_bytes(data)
    put = run_cli(
        "-q",
        *openssh_peer.cli_options(),
        "put",
        "-R",
        "4",
        str(tmp_path / "up.bin"),
        openssh_peer.spec("up.bin"),
    )
    assert put.returncode == 0, put.stderr
    assert put.stdout == ""  # -q, given before the verb, was heard
    assert (openssh_peer.root / "up.bin").read_bytes() == data


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_get_over_ipv6_loopback(sshd_executable: Path, tmp_path: Path) -> None:
    """The shared sshd listens on 127.0.0.1 only: this one listens on ::1 too."""
    if not _ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine")
    with openssh_server(tmp_path / "sshd6", extra_config=["ListenAddress ::1"]) as info:
        known = tmp_path / "known_hosts6"  # the same key, known under its IPv6 name
        known.write_text(info.known_hosts.read_text().replace(f"[{info.host}]:", "[::1]:"))
        data = os.urandom(100_000)
        (info.root / "six.bin").write_bytes(data)
        url = f"sftp://{info.user}@[::1]:{info.port}/{info.root / 'six.bin'}"
        options = ["-i", str(info.client_key), "-o", f"UserKnownHostsFile={known}"]
        got = run_cli("get", *options, "-F", "/dev/null", url, str(tmp_path / "six.bin"))
        assert got.returncode == 0, got.stderr
        assert (tmp_path / "six.bin").read_bytes() == data
        assert " from ::1 port " in info.log_file.read_text()  # IPv6, not 127.0.0.1


def test_version_line() -> None:
    done = run_cli("--version")
    assert done.returncode == 0, done.stderr
    python = platform.python_version()
    expected = f"sshpipe {sshpipe.__version__} (Python {python}, asyncssh {asyncssh.__version__})"
    assert (done.stdout, done.stderr) == (expected + "\n", "")


def test_a_typo_is_one_line_naming_the_option_meant() -> None:
    typo = run_cli("get", "--verfy", "h:/x", "y")
    assert_one_line_error(typo, 2, "unknown option --verfy (did you mean --verify?)")
    assert_one_line_error(
        run_cli("gte", "h:/x", "y"), 2, "unknown command 'gte' (did you mean get?)"
    )


def test_missing_remote_file(openssh_peer: Peer, tmp_path: Path) -> None:
    result = run_cli(
        "get", *openssh_peer.cli_options(), openssh_peer.spec("nope.bin"), str(tmp_path / "out")
    )
    assert_one_line_error(result, 4, "nope.bin", "No such file")
    assert list(tmp_path.iterdir()) == []


def test_remote_directory_where_a_file_is_expected(openssh_peer: Peer, tmp_path: Path) -> None:
    (openssh_peer.root / "adir").mkdir()
    result = run_cli(
        "get", *openssh_peer.cli_options(), openssh_peer.spec("adir"), str(tmp_path / "out")
    )
    assert_one_line_error(result, 4, "adir", "is a directory")


def test_remote_permission_denied(openssh_peer: Peer, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # root reads anything; a directory it cannot write into does not exist for it,
        # so deny by making the target's parent a file instead.
        (openssh_peer.root / "blocker").write_bytes(b"")
        (tmp_path / "x").write_bytes(b"x")
        result = run_cli(
            "put", *openssh_peer.cli_options(), str(tmp_path / "x"), openssh_peer.spec("blocker/x")
        )
        assert result.returncode == 4, result.stderr
        assert "Traceback" not in result.stderr
        return
    secret = openssh_peer.root / "secret.bin"
    secret.write_bytes(b"x")
    secret.chmod(0)
    result = run_cli(
        "get", *openssh_peer.cli_options(), openssh_peer.spec("secret.bin"), str(tmp_path / "out")
    )
    assert_one_line_error(result, 4, "secret.bin", "Permission denied")


def test_local_errors_are_reported_before_connecting(tmp_path: Path) -> None:
    # Port 1 on loopback refuses connections: reaching it would be exit 5, not 3.
    result = run_cli("put", "-P", "1", str(tmp_path / "missing"), "127.0.0.1:/x")
    assert_one_line_error(result, 3, "missing", "No such file")
    result = run_cli("put", "-P", "1", str(tmp_path), "127.0.0.1:/x")
    assert_one_line_error(result, 3, "is a directory")
    result = run_cli("get", "-P", "1", "127.0.0.1:/x", str(tmp_path / "no" / "dir" / "x"))
    assert_one_line_error(result, 3, "no such directory")


def test_local_permission_denied(openssh_peer: Peer, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere; covered by the ordinary-user run")
    (openssh_peer.root / "src.bin").write_bytes(b"x")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    result = run_cli(
        "get", *openssh_peer.cli_options(), openssh_peer.spec("src.bin"), str(locked / "out")
    )
    assert_one_line_error(result, 3, "Permission denied")


def _refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


def test_connection_refused_and_unknown_host(tmp_path: Path) -> None:
    result = run_cli(
        "get", "-F", "/dev/null", "-P", str(_refused_port()), "127.0.0.1:/x", str(tmp_path / "x")
    )
    assert_one_line_error(result, 5, "connection refused")
    result = run_cli("get", "-F", "/dev/null", "no-such-host.invalid:/x", str(tmp_path / "x"))
    assert_one_line_error(result, 5, "no-such-host.invalid", "resolve")


def _option_help(command: str, option: str) -> str:
    """The help text of one option of ``command --help``, on one line."""
    done = run_cli(command, "--help")
    assert done.returncode == 0, done.stderr
    _, _, listed = done.stdout.partition("\noptions:\n")  # past the usage line
    text = " ".join(listed.split())  # argparse wraps at the terminal's width
    found = re.search(rf"{re.escape(option)} \S+ (.*?) (?=-[-\w])", text)
    assert found is not None, text
    return found.group(1)


@pytest.mark.parametrize("command", ["get", "put"])
def test_help_gives_the_channels_per_connection_the_library_uses(command: str) -> None:
    text = _option_help(command, "--channels-per-connection")
    assert re.findall(r"default (\d+)", text) == [str(DEFAULT_CHANNELS_PER_CONNECTION)], text


@pytest.mark.parametrize("command", ["get", "put"])
def test_help_says_uploads_and_trees_retry_too(command: str) -> None:
    text = _option_help(command, "--retries")
    assert "download" in text and "upload" in text and "tree" in text, text
    assert f"default {DEFAULT_RETRIES}" in text, text


def test_usage_errors(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("get", "-R", "0", "h:/x", "y"), 2, "-R")
    assert_one_line_error(run_cli("get", "local", "y"), 2, "remote source")
    assert_one_line_error(run_cli("put", "a", "b"), 2, "remote target")
    assert_one_line_error(run_cli("get", "-o", "Bogus=1", "h:/x", str(tmp_path / "y")), 2, "Bogus")
    assert_one_line_error(run_cli("get", "-c", "none", "h:/x", str(tmp_path / "y")), 2, "none")
    assert_one_line_error(run_cli("frobnicate"), 2)


# -- host keys: OpenSSH's StrictHostKeyChecking ------------------------------------


def _options_with_known_hosts(peer: Peer, known_hosts: Path, *extra: str) -> list[str]:
    return [
        "-P",
        str(peer.port),
        "-i",
        str(peer.client_key),
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-F",
        "/dev/null",
        *extra,
    ]


def test_unknown_host_key_is_refused_by_default(openssh_peer: Peer, tmp_path: Path) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"x")
    known = tmp_path / "known_hosts"
    result = run_cli(
        "get",
        *_options_with_known_hosts(openssh_peer, known),
        openssh_peer.spec("src.bin"),
        str(tmp_path / "out"),
    )
    assert_one_line_error(result, 7, "not known", "StrictHostKeyChecking")
    assert not known.exists()


def test_accept_new_records_the_key_then_trusts_it(openssh_peer: Peer, tmp_path: Path) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"x")
    known = tmp_path / "known_hosts"
    for _ in range(2):
        result = run_cli(
            "get",
            *_options_with_known_hosts(
                openssh_peer, known, "-o", "StrictHostKeyChecking=accept-new"
            ),
            openssh_peer.spec("src.bin"),
            str(tmp_path / "out"),
        )
        assert result.returncode == 0, result.stderr
    assert known.read_text().count(f"[127.0.0.1]:{openssh_peer.port} ssh-ed25519 ") == 1
    # ...and the recorded key is the server's real one.
    assert known.read_text().split()[1:3] == openssh_peer.known_hosts.read_text().split()[1:3]


@pytest.mark.parametrize("policy", ["yes", "accept-new", "no"])
def test_changed_host_key_is_always_refused(
    openssh_peer: Peer, tmp_path: Path, policy: str
) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"x")
    impostor = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{openssh_peer.port} {impostor}")
    result = run_cli(
        "get",
        *_options_with_known_hosts(openssh_peer, known, "-o", f"StrictHostKeyChecking={policy}"),
        openssh_peer.spec("src.bin"),
        str(tmp_path / "out"),
    )
    assert_one_line_error(result, 7, "has changed")
    assert not (tmp_path / "out").exists()


def test_wrong_key_is_an_authentication_error(openssh_peer: Peer, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong_key"
    wrong.write_bytes(asyncssh.generate_private_key("ssh-ed25519").export_private_key())
    wrong.chmod(0o600)
    options = openssh_peer.cli_options()
    options[3] = str(wrong)
    result = run_cli("get", *options, openssh_peer.spec("src.bin"), str(tmp_path / "out"))
    assert_one_line_error(result, 6, "authentication failed")


def test_unreadable_identity_file(openssh_peer: Peer, tmp_path: Path) -> None:
    options = openssh_peer.cli_options()
    options[3] = str(tmp_path / "no_such_key")
    result = run_cli("get", *options, openssh_peer.spec("src.bin"), str(tmp_path / "out"))
    # A key named on purpose that is not there: no retry finds it (exit 6, not 5).
    assert_one_line_error(result, 6, "cannot load private key", "no_such_key", "No such file")


def test_demo_runs_and_verifies(tmp_path: Path) -> None:
    result = run_cli("demo", "--size", "2M", "--rtt", "0", cwd=tmp_path)  # loopback
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("  ok") == 6  # 3 clients x get/put, each sha256-checked


def test_demo_over_an_emulated_link(tmp_path: Path) -> None:
    result = run_cli("demo", "--size", "4M", "--rtt", "40", "--rate", "400", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "emulated link (40 ms RTT, 400 Mbit/s)" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if line.endswith("  ok")]
    assert len(rows) == 4  # sshpipe and the sftp-like client, get and put
    # Every row measured the emulated round trip (column "RTT ms"), not loopback's.
    assert all(36 <= float(row[-2]) <= 60 for row in rows), result.stdout


def test_demo_rejects_a_negative_rtt(tmp_path: Path) -> None:
    result = run_cli("demo", "--rtt", "-5", cwd=tmp_path)
    assert result.returncode == 2
    assert "must be a finite number >= 0" in result.stderr
    assert "Traceback" not in result.stderr
