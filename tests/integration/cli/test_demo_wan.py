"""``demo`` as a newcomer runs it: over the emulated WAN, sshpipe's command against OpenSSH sftp.

A tiny file keeps it cheap: what is checked is that every client ran as a
command of its own through the emulator (its RTT in each row), every copy was
checked, and each line states the size.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.cli import run_cli


def test_the_default_demo_compares_commands_over_a_wan(tmp_path: Path) -> None:
    result = run_cli("demo", "--size", "96K", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    other = "OpenSSH sftp" if shutil.which("sftp") else "sshpipe as sftp: 64 x 32K, 1 ch"
    assert f"emulated link (50 ms RTT, 1000 Mbit/s), sshpipe vs {other}" in out
    rows = [line for line in out.splitlines() if line.endswith("  ok")]
    assert [row.split()[0] for row in rows] == ["sshpipe"] * 2 + [other.split()[0]] * 2
    assert all("96 KiB" in row for row in rows)
    # Every row went through the emulator: 50 ms, not loopback's fraction of one.
    assert all(45 <= float(row.split()[-2]) <= 80 for row in rows), out
    for direction in ("get", "put"):
        assert f"{direction} of 96 KiB: sshpipe " in out
    assert "net of set-up: too small a file to tell" in out  # under 8 MiB: not measured
    assert not list(tmp_path.iterdir())  # nothing left behind where it ran
