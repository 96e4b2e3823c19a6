"""``demo`` over an emulated WAN: the commands a user runs, timed as the user sees them.

The embedded server sits behind the link emulator (``python -m
sshpipe.testing.linkemu``, a process of its own: in this one, with the server, the two
would share one core and cap both clients alike), and each client is a fresh
process started the way a user types it: ``python -m sshpipe get`` / ``put``,
and OpenSSH's own ``sftp -b``
when it is installed (pointed at the emulator's port with a ``-F`` config of
its own: the embedded server's client key and host key, ``BatchMode yes``).
Without ``sftp`` the second client is sshpipe's command with sftp's
settings (``-R 64 -B 32K --channels 1``).

Each row gives the whole command's time (process start to exit) and its time
net of set-up: less the same client's command for an empty file (start,
log-in, open, close, exit), so both clients are measured the same way.
Every copy is checked by sha256.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import SSHPipeError
from ..testing.embedded import EmbeddedServer, cli_options

# OpenSSH sftp's own defaults, for the comparison without it (sftp.c: 64
# requests of 32 KiB; one channel, whose 2 MiB window sshd sets).
SFTP_LIKE = ["-R", "64", "-B", "32K", "--channels", "1"]
# What one OpenSSH channel carries per round trip: its receive window, and
# sshd's (channels.h: CHAN_SES_WINDOW_DEFAULT, 64 packets of 32 KiB).
SFTP_WINDOW = 2 * 1024 * 1024
COMMAND_LIMIT = 300.0  # seconds any one command may take before the demo gives up
# Below this a net time says nothing: two starts of one command differ by as much.
NOISE = 0.05
# Files smaller than this get no net time (nor the empty-file command that
# measures it): an 8 MiB copy at 50 ms is a few tenths of a second, and a
# process's start varies by a tenth on a busy machine.
NET_MIN_SIZE = 8 * 1024 * 1024


@dataclass(frozen=True)
class Timed:
    """One command: its whole time and what sshpipe said of its transfer (``--json``)."""

    seconds: float
    shown: dict[str, object]


@dataclass(frozen=True)
class Row:
    client: str
    direction: str
    size: int
    whole: float
    setup: float | None  # the empty-file command's seconds; None: not measured
    rtt_ms: float

    @property
    def net(self) -> float | None:
        """Seconds net of set-up; None when the set-up's own noise is as large."""
        if self.setup is None:
            return None
        net = self.whole - self.setup
        return net if net >= NOISE else None


class Clients:
    """The two clients the demo compares, pointed at ``port`` (the emulator's)."""

    def __init__(self, server: EmbeddedServer, port: int, known_hosts: Path, work: Path) -> None:
        self.server = server
        self.port = port
        self.known_hosts = known_hosts
        self.work = work
        self.sftp = shutil.which("sftp")
        self.config = work / "ssh_config"
        self.config.write_text(
            "Host demo\n"
            f"  HostName {server.host}\n"
            f"  Port {port}\n"
            f"  User {server.username}\n"
            f"  IdentityFile {server.client_key}\n"
            "  IdentitiesOnly yes\n"
            "  IdentityAgent none\n"
            f"  UserKnownHostsFile {known_hosts}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n"
            "  LogLevel ERROR\n"
        )

    @property
    def other(self) -> str:
        return "OpenSSH sftp" if self.sftp else "sshpipe as sftp: 64 x 32K, 1 ch"

    async def sshpipe(self, direction: str, source: str, target: str, *extra: str) -> Timed:
        remote = f"{self.server.destination}:"
        words = [
            *cli_options(self.port, self.server.client_key, self.known_hosts),
            *extra,
            "--json",
            remote + source if direction == "get" else source,
            remote + target if direction == "put" else target,
        ]
        out = await _run([sys.executable, "-m", "sshpipe", direction, *words])
        return Timed(out[0], json.loads(out[1]))

    async def other_client(self, direction: str, source: str, target: str) -> Timed:
        if self.sftp is None:
            return await self.sshpipe(direction, source, target, *SFTP_LIKE)
        batch = self.work / "batch"
        batch.write_text(f'{direction} "{source}" "{target}"\n')
        seconds, _ = await _run([self.sftp, "-q", "-F", str(self.config), "-b", str(batch), "demo"])
        return Timed(seconds, {})


@contextlib.asynccontextmanager
async def emulated(
    host: str, port: int, *, rtt_ms: float, rate_mbit: float | None
) -> AsyncIterator[int]:
    """The link emulator in front of ``host:port`` for the block; yields the port it listens on."""
    argv = [sys.executable, "-m", "sshpipe.testing.linkemu", "--target", f"{host}:{port}"]
    argv += ["--rtt", f"{rtt_ms:g}"] + (["--rate", f"{rate_mbit:g}"] if rate_mbit else [])
    child = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        async with asyncio.timeout(30):
            line = (await child.stdout.readline()).decode()
        if not line.startswith("listening on "):
            err = (await child.stderr.read()).decode() if child.stderr else ""
            raise SSHPipeError(f"the link emulator did not start: {err.strip() or line.strip()}")
        yield int(line.rsplit(":", 1)[1])
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGINT)  # it prints its stats and exits 0
            try:
                async with asyncio.timeout(10):
                    await child.communicate()
            except TimeoutError:
                child.kill()
                await child.wait()


async def _run(argv: list[str]) -> tuple[float, str]:
    """Run ``argv`` to its end: (seconds from start to exit, stdout)."""
    started = time.perf_counter()
    child = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(COMMAND_LIMIT):
            out, err = await child.communicate()
    except TimeoutError:
        child.kill()
        await child.wait()
        raise SSHPipeError(f"{Path(argv[0]).name} took over {COMMAND_LIMIT:g} s") from None
    seconds = time.perf_counter() - started
    if child.returncode != 0:
        why = err.decode(errors="replace").strip().splitlines()
        raise SSHPipeError(
            f"{Path(argv[0]).name} failed (exit {child.returncode}): {why[-1] if why else ''}"
        )
    return seconds, out.decode()


Check = Callable[[Path, str, str], None]  # (file, expected sha256, what): raises if not


async def compare(clients: Clients, size: int, expected: str, check: Check) -> list[Row]:
    """Empty get (for a file of NET_MIN_SIZE and more), get and put with each client, in
    that order; every copy checked."""
    server, work = clients.server, clients.work
    (server.root / "empty.bin").write_bytes(b"")
    rows: list[Row] = []
    rtt_ms = 0.0
    for name in ("sshpipe", clients.other):
        mine = name == "sshpipe"

        async def run(direction: str, source: str, target: str, *, mine: bool = mine) -> Timed:
            if mine:
                return await clients.sshpipe(direction, source, target)
            return await clients.other_client(direction, source, target)

        setup: float | None = None
        if size >= NET_MIN_SIZE:
            empty = await run("get", "/empty.bin", str(work / "empty.bin"))
            setup = empty.seconds
        local = work / "got.bin"
        got = await run("get", "/demo.bin", str(local))
        check(local, expected, f"{name} get")
        put = await run("put", str(local), "/put.bin")
        check(server.root / "put.bin", expected, f"{name} put")
        local.unlink()
        for direction, timed in (("get", got), ("put", put)):
            rtt = timed.shown.get("rtt_min")  # sftp's rows: the link's, as sshpipe's saw it
            row_rtt = float(str(rtt)) * 1000 if rtt is not None else rtt_ms
            rtt_ms = row_rtt if mine else rtt_ms
            rows.append(Row(name, direction, size, timed.seconds, setup, row_rtt))
    return rows


def print_rows(rows: list[Row], *, other: str) -> None:
    print(
        f"\n{'client':<33}{'dir':<5}{'size':>10}{'whole s':>9}{'net s':>8}"
        f"{'MB/s net':>10}{'RTT ms':>8}  sha256"
    )
    for row in rows:
        net = row.net
        print(
            f"{row.client:<33}{row.direction:<5}{size_text(row.size):>10}{row.whole:>9.2f}"
            + (f"{net:>8.2f}{row.size / net / 1e6:>10.1f}" if net else f"{'-':>8}{'-':>10}")
            + f"{row.rtt_ms:>8.1f}  ok"
        )
    print()
    for direction in ("get", "put"):
        mine = next(r for r in rows if r.client == "sshpipe" and r.direction == direction)
        theirs = next(r for r in rows if r.client == other and r.direction == direction)
        ratio = (
            f"{theirs.net / mine.net:.1f}x net of set-up ({mine.net:.2f} s vs {theirs.net:.2f} s)"
            if mine.net and theirs.net
            else "net of set-up: too small a file to tell"
        )
        print(
            f"{direction} of {size_text(mine.size)}: sshpipe {theirs.whole / mine.whole:.1f}x "
            f"as fast as {other} by the whole command ({mine.whole:.2f} s vs "
            f"{theirs.whole:.2f} s), {ratio}"
        )
    print(
        "\nwhole: process start to exit; net: less the same command for an empty file "
        + (
            f"(set-up: sshpipe {rows[0].setup:.2f} s, {other} {rows[-1].setup:.2f} s)."
            if rows[0].setup is not None and rows[-1].setup is not None
            else f"(not measured under {size_text(NET_MIN_SIZE)}: a process's start varies more)."
        )
    )
    if not other.startswith("sshpipe"):
        print(f"RTT ms: the link's, as sshpipe measured it ({other} does not say).")
    ceiling = SFTP_WINDOW / (rows[0].rtt_ms / 1000) / 1e6 if rows[0].rtt_ms else 0.0
    print(
        "sftp keeps one channel, and so at most one 2 MiB window, in flight per round\n"
        f"trip (here {ceiling:.0f} MB/s at most); sshpipe's flow controller measures the RTT\n"
        "and delivery rate and opens the channels (and connections) that keep the pipe\n"
        "full, up to what the server itself can send (the embedded one is Python)."
    )


def size_text(size: int) -> str:
    """``64 MiB``, ``1.5 MiB``, ``512 KiB``: the size in every line."""
    if size >= 2**20:
        return f"{size / 2**20:.4g} MiB"
    return f"{size / 1024:.4g} KiB" if size >= 1024 else f"{size} B"
