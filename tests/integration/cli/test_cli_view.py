"""What ``python -m sshpipe`` prints, against the real sshd: progress, -q, -v, --json, exit codes.

Progress is drawn only on a terminal (stderr a pty here), with rich when the
cli extra is there and the plain line without it; ``--json`` is a stable
schema (every key and its type listed here, as the README lists them);
``-v`` says what was negotiated, ``-vvv`` adds asyncssh's own log; and the
exit codes the other CLI tests do not reach get one real run each.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.support.cli import assert_one_line_error, run_cli, run_cli_tty_stderr
from tests.support.peers import Peer

# rich's live display: the cursor hidden while it draws, shown again at its end.
HIDE_CURSOR, SHOW_CURSOR = "\x1b[?25l", "\x1b[?25h"
# A name a hostile server may send: rich markup and a terminal escape.
HOSTILE = "[bold]x\x1b[31m.bin"

# --json's keys and their types: a key renamed, dropped or added fails here,
# and the README's list ("What it prints") must follow.
SETUP_PHASE = {"name": str, "seconds": float, "round_trips": float}
FILE_KEYS: dict[str, Any] = {
    "source": str,
    "target": str,
    "bytes": int,
    "seconds": float,
    "requests": int,
    "short_reads_reissued": int,
    "short_writes_reissued": int,
    "peak_requests_in_flight": int,
    "peak_bytes_in_flight": int,
    "channels": int,
    "block_size": int,
    "size_changed": bool,
    "connections": int,
    "rtt_initial": float,
    "rtt_min": float,
    "rtt_smoothed": float,
    "peak_delivery_rate": float,
    "peak_target_in_flight": int,
    "receive_window": int,
    "peer_window": int,
    "flow_phase": str,
    "verified": str,
    "reconnects": int,
    "resumed_bytes": int,
    "setup": list,
    "compression": dict,  # Compression auto's report (null unless Compression=auto)
    "workers": int,
    "throughput": float,
    "server": dict,
}
TREE_KEYS: dict[str, Any] = {
    "source": list,
    "target": str,
    "files": int,
    "files_done": int,
    "files_failed": int,
    "directories": int,
    "symlinks": int,
    "skipped": int,
    "bytes": int,
    "seconds": float,
    "failures": list,
    "failures_unlisted": int,
    "skipped_paths": list,
    "reconnects": int,
    "verified": str,
    "resumed_files": int,
    "entries": int,
    "throughput": float,
    "files_per_second": float,
    "compression": list,  # Compression auto's report per big file
    "server": dict,
}
COMPRESSION_KEYS = {
    "used", "algorithm", "plain_bytes", "compressed_bytes", "ratio", "link_rate",
    "compressed_rate", "reason",
}  # fmt: skip
# errno: the POSIX errno the failure is (ENOENT...), null where none says it.
FAILURE_KEYS = {"path": str, "error": str, "exit_code": int, "errno": (int, type(None))}
SERVER_KEYS = {"software", "symlink_order", "offers", "limits", "learned", "profile", "adapted"}


def _check_schema(shown: dict[str, Any], schema: dict[str, Any]) -> None:
    assert set(shown) == set(schema), set(shown) ^ set(schema)
    for key, kind in schema.items():
        value = shown[key]
        # JSON has one number type: a float that happens to be whole reads as an int.
        ok = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
        assert ok and not (kind is int and isinstance(value, bool)), (key, value)


def test_a_file_on_a_terminal_gets_rich_frames_ending_at_100_and_escaped_names(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    data = os.urandom(3 * 1024 * 1024 + 1)
    source = tmp_path / HOSTILE  # a put names its local source: no glob is read in it
    source.write_bytes(data)
    got = run_cli_tty_stderr(
        "put", *openssh_peer.cli_options(), str(source), openssh_peer.spec("a.bin")
    )
    assert got.returncode == 0, got.stderr
    assert (openssh_peer.root / "a.bin").read_bytes() == data
    err = got.stderr
    assert err.startswith(HIDE_CURSOR) and err.rstrip("\n").endswith(SHOW_CURSOR), repr(err)
    assert "━" in err  # rich's bar
    last = err.rsplit("\r", 1)[-1]  # each frame is redrawn from the line's start
    assert "100%" in last and "3.0 MiB/3.0 MiB" in last and "MB/s" in last, repr(err)
    assert "in 0:0" in last, repr(err)  # the time it took, once it ended (no ETA left)
    # The name is shown as text: its markup not read, its escape not sent.
    assert "[bold]x\\x1b[31m.bin" in err and "\x1b[31m" not in err, repr(err)
    # Every ETA shown is unknown or a time ahead: never negative, never infinite.
    etas = re.findall(r"ETA (\S+)", err)
    assert all(re.fullmatch(r"-:--|\d+:\d\d", eta) for eta in etas), etas
    # The summary line, on stdout as without a terminal.
    assert got.stdout.count("\n") == 1 and "MB/s" in got.stdout


def test_a_tree_on_a_terminal_counts_its_files_to_the_end(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    tree = openssh_peer.root / "tree"
    (tree / "sub").mkdir(parents=True)
    contents = {f"sub/f{i}": os.urandom(1000 * i) for i in range(7)}
    for name, data in contents.items():
        (tree / name).write_bytes(data)
    got = run_cli_tty_stderr(
        "get", "-r", *openssh_peer.cli_options(), openssh_peer.spec("tree"), str(tmp_path)
    )
    assert got.returncode == 0, got.stderr
    for name, data in contents.items():
        assert (tmp_path / "tree" / name).read_bytes() == data
    last = got.stderr.rsplit("\r", 1)[-1]
    assert "100%" in last and "7/7 files" in last, repr(got.stderr)
    assert got.stderr.rstrip("\n").endswith(SHOW_CURSOR)
    assert "7 files" in got.stdout


def test_without_rich_the_plain_line_is_drawn(openssh_peer: Peer, tmp_path: Path) -> None:
    """rich is the cli extra's: where it cannot be imported, the one-line display is drawn."""
    shadow = tmp_path / "no-rich"
    shadow.mkdir()
    # ``python -m`` puts its working directory first on sys.path: this rich is found first.
    (shadow / "rich.py").write_text("raise ImportError('no rich here')\n")
    data = os.urandom(3 * 1024 * 1024 + 1)
    (openssh_peer.root / "src.bin").write_bytes(data)
    source = openssh_peer.spec("src.bin")
    got = run_cli_tty_stderr(
        "get", *openssh_peer.cli_options(), source, str(tmp_path / "a.bin"), cwd=shadow
    )
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "a.bin").read_bytes() == data
    lines = got.stderr.split("\r")  # each report redraws the line
    assert lines[0] == "" and len(lines) >= 3, got.stderr  # the first report and the final
    assert "3.0 MiB/3.0 MiB (100%)" in lines[-1] and lines[-1].endswith("\n"), got.stderr
    assert HIDE_CURSOR not in got.stderr and "━" not in got.stderr
    assert "MB/s" in got.stdout


def test_quiet_prints_nothing_even_on_a_terminal(openssh_peer: Peer, tmp_path: Path) -> None:
    (openssh_peer.root / "src.bin").write_bytes(os.urandom(300_000))
    got = run_cli_tty_stderr(
        "get", "-q", *openssh_peer.cli_options(), openssh_peer.spec("src.bin"), str(tmp_path / "a")
    )
    assert got.returncode == 0, got.stderr
    assert (got.stdout, got.stderr) == ("", "")
    assert (tmp_path / "a").read_bytes() == (openssh_peer.root / "src.bin").read_bytes()


def test_json_of_a_file_on_a_terminal_is_its_schema_and_nothing_else(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    data = os.urandom(500_000)
    (openssh_peer.root / "src.bin").write_bytes(data)
    got = run_cli_tty_stderr(
        "get", "--json", "-o", "Compression=auto",  # its report is part of the schema
        *openssh_peer.cli_options(), openssh_peer.spec("src.bin"), str(tmp_path),
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert got.stderr == ""  # no frame, no line
    assert (tmp_path / "src.bin").read_bytes() == data
    shown = json.loads(got.stdout)
    _check_schema(shown, FILE_KEYS)
    assert shown["bytes"] == len(data) and shown["flow_phase"] in ("startup", "steady", "fixed")
    assert shown["setup"] and all(
        set(phase) == set(SETUP_PHASE)
        and all(
            isinstance(phase[k], t if t is str else (int, float)) for k, t in SETUP_PHASE.items()
        )
        for phase in shown["setup"]
    )
    assert set(shown["server"]) == SERVER_KEYS
    assert set(shown["compression"]) == COMPRESSION_KEYS
    assert shown["compression"]["used"] is False  # loopback: faster than zlib, never decided


def test_json_of_a_tree_and_of_a_tree_that_failed(openssh_peer: Peer, tmp_path: Path) -> None:
    tree = openssh_peer.root / "mixed"
    tree.mkdir()
    (tree / "ok.txt").write_bytes(b"fine")
    (tree / "blocked.txt").write_bytes(b"lands on a directory")
    put = run_cli(
        "put", "-r", "--json", *openssh_peer.cli_options(), str(tree), openssh_peer.spec("up")
    )
    assert put.returncode == 0, put.stderr
    shown = json.loads(put.stdout)
    _check_schema(shown, TREE_KEYS)
    assert (shown["files"], shown["files_done"], shown["bytes"]) == (2, 2, 24)
    assert (openssh_peer.root / "up" / "blocked.txt").read_bytes() == b"lands on a directory"
    # A get where one file lands on a local directory (exit 3) and one remote
    # entry is a link to nowhere followed with -L (exit 4): the tree fails
    # with 1, their codes differing, and --json still prints its one object.
    os.symlink("/nonexistent/sshpipe", tree / "dangling")
    (tmp_path / "mixed" / "blocked.txt" / "inside").mkdir(parents=True)
    got = run_cli(
        "get",
        "-r",
        "-L",
        "--json",
        *openssh_peer.cli_options(),
        openssh_peer.spec("mixed"),
        str(tmp_path),
    )
    assert got.returncode == 1, got.stderr
    assert "Traceback" not in got.stderr
    shown = json.loads(got.stdout)
    _check_schema(shown, TREE_KEYS)
    assert (tmp_path / "mixed" / "ok.txt").read_bytes() == b"fine"
    assert shown["files_done"] == 1 and shown["files_failed"] == 1
    for failure in shown["failures"]:
        _check_schema(failure, FAILURE_KEYS)
    codes = sorted((failure["exit_code"], failure["errno"]) for failure in shown["failures"])
    # The local directory in the way is EISDIR; the dangling link, ENOENT on the server.
    assert codes == [(3, errno.EISDIR), (4, errno.ENOENT)], shown["failures"]


def test_verbose_says_what_was_negotiated_and_no_secret(openssh_peer: Peer, tmp_path: Path) -> None:
    data = os.urandom(200_000)
    (openssh_peer.root / "src.bin").write_bytes(data)
    got = run_cli(
        "get", "-v", *openssh_peer.cli_options(), openssh_peer.spec("src.bin"), str(tmp_path / "a")
    )
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "a").read_bytes() == data
    err = got.stderr
    negotiated = next(line for line in err.splitlines() if "; kex " in line)
    for part in ("server SSH-2.0-OpenSSH_", "host key ssh-", "cipher ", "compression none"):
        assert part in negotiated, negotiated
    assert "kex unknown" not in negotiated and "auth publickey" in negotiated, negotiated
    assert "connection set-up: connect " in err and "key_exchange " in err and "auth " in err
    assert "transfer set-up: " in err and "first_data" in err
    assert "used 1 SFTP channel(s) on 1 SSH connection(s)" in err
    assert "[conn=" not in err  # asyncssh's own log is -vvv's
    key_body = [
        line
        for line in openssh_peer.client_key.read_text().splitlines()
        if line and "PRIVATE KEY" not in line
    ]
    assert not any(line in err for line in key_body)
    assert all(line.startswith("sshpipe: ") for line in err.splitlines()), err


def test_vvv_adds_sshpipes_and_asyncssh_debug_logs(openssh_peer: Peer, tmp_path: Path) -> None:
    (openssh_peer.root / "src.bin").write_bytes(b"y" * 50_000)
    got = run_cli(
        "-vvv",
        "get",
        *openssh_peer.cli_options(),
        openssh_peer.spec("src.bin"),
        str(tmp_path / "a"),
    )
    assert got.returncode == 0, got.stderr
    err = got.stderr
    assert "[conn=0] Received version SSH-2.0-OpenSSH_" in err  # asyncssh's
    assert "Key exchange alg: " in err  # asyncssh's level 2
    assert f"{openssh_peer.remote('src.bin')}: set-up: " in err  # sshpipe's debug log (-vv)
    assert "; kex " in err  # and -v's lines
    assert all(line.startswith("sshpipe: ") and " ms: " in line for line in err.splitlines())


def test_a_server_that_never_answers_times_out_with_exit_5(tmp_path: Path) -> None:
    """ConnectTimeout: the TCP connection is made, no SSH banner ever comes."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        accepted: list[socket.socket] = []
        waiter = threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True)
        waiter.start()
        try:
            result = run_cli(
                "get",
                "-o",
                "ConnectTimeout=1",
                "-F",
                "/dev/null",
                "-P",
                str(port),
                "127.0.0.1:x",
                str(tmp_path / "x"),
            )
        finally:
            for conn in accepted:
                conn.close()
    assert_one_line_error(result, 5, "timed out after 1 s")
    assert not (tmp_path / "x").exists()


def test_ctrl_c_under_the_live_display_leaves_a_clean_terminal(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """Exit 130, the display stopped first: cursor shown, the last frame's line ended."""
    (openssh_peer.root / "slow.bin").write_bytes(os.urandom(4 * 1024 * 1024))
    # Through the link emulator at 16 Mbit/s: the copy would take ~2 s, time to interrupt it.
    emulator = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sshpipe.testing.linkemu",
            "--target",
            f"127.0.0.1:{openssh_peer.port}",
            "--rtt",
            "10",
            "--rate",
            "16",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert emulator.stdout is not None
        port = int(emulator.stdout.readline().rsplit(":", 1)[1])
        behind = openssh_peer.behind(port, tmp_path)
        got = run_cli_tty_stderr(
            "get",
            *behind.cli_options(),
            behind.spec("slow.bin"),
            str(tmp_path / "slow.bin"),
            interrupt_at="KiB/4.0 MiB",  # a frame with bytes moving
        )
    finally:
        emulator.terminate()
        emulator.wait(timeout=10)
    assert got.returncode == 130, got.stderr
    assert got.stdout == ""
    frames, _, after = got.stderr.rpartition(SHOW_CURSOR)
    assert frames.startswith(HIDE_CURSOR) and "KiB/4.0 MiB" in frames, repr(got.stderr)
    # The last frame's line ended, the cursor shown, then the one line of the error.
    assert frames.endswith("\n") and after == "sshpipe: interrupted\n", repr(got.stderr)
    assert not (tmp_path / "slow.bin").exists()
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name or "sshpipe" in p.name]


def test_a_bug_of_ours_is_one_line_and_exit_70() -> None:
    """EX_SOFTWARE: whatever broke inside is named in one line, never a traceback."""
    bug = (
        "import sys, sshpipe.cli.args as a, sshpipe.cli.main as m\n"
        "def broken(argv):\n"
        "    raise KeyError('no such thing')\n"
        "a.parse_args = broken\n"
        "sys.exit(m.main(['get', 'h:x', 'y']))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"}
    result = subprocess.run(
        [sys.executable, "-c", bug], capture_output=True, text=True, timeout=60, env=env
    )
    assert_one_line_error(result, 70, "internal error: KeyError", "SSHPIPE_DEBUG=1")
