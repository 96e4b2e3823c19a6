"""``demo`` and ``serve``: sshpipe against the embedded server, no setup needed."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shlex
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..client.client import Client
from ..client.connect import connect
from ..core.config import TransferConfig
from ..core.errors import SSHPipeError
from ..core.stats import TransferStats
from ..core.treeplan import has_magic
from ..testing.embedded import EmbeddedServer, embedded_server
from . import wandemo
from .args import DEMO_RATE_MBIT, DEMO_RTT_MS


def _client(server: EmbeddedServer, port: int, known_hosts: Path, config: TransferConfig) -> Client:
    return connect(
        server.destination,
        port=port,
        identity_files=server.client_key,
        known_hosts=known_hosts,
        ssh_config=[],
        config=config,
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def _make_file(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    with path.open("wb") as file:
        remaining = size
        while remaining:
            block = os.urandom(min(remaining, 1024 * 1024))
            digest.update(block)
            file.write(block)
            remaining -= len(block)
    return digest.hexdigest()


# What a classic client does, for comparison: OpenSSH sftp's defaults are 64
# requests of 32 KiB on one channel with a 2 MiB window (sftp.c, channels.h).
_SFTP_LIKE = TransferConfig(requests=64, block_size=32 * 1024, channels=1, window=2 * 1024 * 1024)


def _rows() -> list[tuple[str, TransferConfig]]:
    """The loopback run's clients: sshpipe, its sftp-like setting, one request at a time."""
    return [
        ("sshpipe (flow control)", TransferConfig()),
        ("like sftp: 64 x 32 KiB, 1 ch", _SFTP_LIKE),
        ("one request at a time", TransferConfig(requests=1, channels=1)),
    ]


# The WAN the demo emulates unless told otherwise (args.py): a 50 ms round trip
# (a continent away) at 1 Gbit/s, where one 2 MiB window per round trip is 42 MB/s.


async def demo(size: int, *, rtt_ms: float = DEMO_RTT_MS, rate_mbit: float | None = None) -> int:
    """Get and put one file with sshpipe and another client; verify; print a table.

    By default through the link emulator (``sshpipe.testing.linkemu``) at ``rtt_ms``
    and ``rate_mbit`` (1 Gbit/s when only the RTT is given), each client a
    command of its own (``wandemo``): sshpipe against OpenSSH's ``sftp`` where
    it is installed. ``rtt_ms`` 0 with no rate: today's loopback run, in this
    process, with several of sshpipe's settings.
    """
    if rtt_ms and rate_mbit is None:
        rate_mbit = DEMO_RATE_MBIT
    with tempfile.TemporaryDirectory(prefix="sshpipe-demo-") as tmp:
        work = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            server = await stack.enter_async_context(embedded_server(work / "server"))
            port, known_hosts, where = server.port, server.known_hosts, "loopback"
            if rtt_ms or rate_mbit:
                port = await stack.enter_async_context(
                    wandemo.emulated(server.host, server.port, rtt_ms=rtt_ms, rate_mbit=rate_mbit)
                )
                known_hosts = work / "known_hosts_link"
                # The same host key, known under the emulator's port.
                known_hosts.write_text(
                    server.known_hosts.read_text().replace(f"]:{server.port} ", f"]:{port} ")
                )
                rate = f"{rate_mbit:g} Mbit/s" if rate_mbit else "unlimited rate"
                where = f"an emulated link ({rtt_ms:g} ms RTT, {rate})"
            source = server.root / "demo.bin"
            clients = (
                wandemo.Clients(server, port, known_hosts, work) if port != server.port else None
            )
            versus = f", sshpipe vs {clients.other}" if clients is not None else ""
            print(
                f"embedded SFTP server on {server.host}:{server.port}, reached over "
                f"{where}{versus}; writing a {wandemo.size_text(size)} test file ...",
                flush=True,
            )
            expected = _make_file(source, size)
            if clients is not None:
                rows = await wandemo.compare(clients, size, expected, _verify)
                wandemo.print_rows(rows, other=clients.other)
                return 0
            stats: list[tuple[str, str, TransferStats]] = []
            for label, config in _rows():
                async with _client(server, port, known_hosts, config) as client:
                    local = work / "got.bin"
                    stats.append((label, "get", await client.get("/demo.bin", str(local))))
                    _verify(local, expected, f"{label} get")
                    stats.append((label, "put", await client.put(str(local), "/put.bin")))
                    _verify(server.root / "put.bin", expected, f"{label} put")
                    local.unlink()
    _print_table(stats)
    return 0


def _verify(path: Path, expected: str, what: str) -> None:
    actual = _sha256(path)
    if actual != expected:
        raise SSHPipeError(f"{what}: sha256 mismatch ({actual} != {expected})")


def _print_table(rows: list[tuple[str, str, TransferStats]]) -> None:
    print(
        f"\n{'client':<30}{'dir':<5}{'MB/s':>8}{'seconds':>9}{'peak req':>9}"
        f"{'channels':>9}{'conns':>6}{'RTT ms':>8}  sha256"
    )
    for label, direction, stats in rows:
        print(
            f"{label:<30}{direction:<5}{stats.throughput / 1e6:>8.1f}{stats.seconds:>9.2f}"
            f"{stats.peak_requests_in_flight:>9}{stats.channels:>9}{stats.connections:>6}"
            f"{stats.rtt_min * 1000:>8.1f}  ok"
        )
    print(
        "\nAll run on this one machine, server in the same process: on loopback the\n"
        "round trip is tiny, so the gaps here are per-request overhead. Plain `demo`\n"
        f"runs over an emulated WAN ({DEMO_RTT_MS:g} ms, {DEMO_RATE_MBIT:g} Mbit/s) instead."
    )


async def serve(root: str | None, port: int) -> int:
    """Run the embedded server until SIGINT or SIGTERM, printing commands to try.

    Its keys and known_hosts live in a temporary folder, removed when either
    signal stops it (Ctrl-C, ``kill``): the exit code is then 0.
    """
    with tempfile.TemporaryDirectory(prefix="sshpipe-serve-") as tmp:
        served = Path(root).resolve() if root else Path(tmp) / "root"
        async with embedded_server(Path(tmp) / "server", root=served, port=port) as server:
            if not root:
                _make_file(served / "hello.bin", 8 * 1024 * 1024)
            with _stopped_by_signals() as stopped:  # before the commands are shown
                print(f"serving {served} as / on {server.host}:{server.port} (Ctrl-C to stop)")
                print("\n".join(_examples(server, served)), flush=True)
                await stopped.wait()
    print("stopped", flush=True)
    return 0


def _examples(server: EmbeddedServer, served: Path) -> list[str]:
    """Commands that work against ``server``: a get of a file ``served`` has, a put of it back.

    With no such file, the put comes first, of a file the user makes.
    """
    options = " ".join(shlex.quote(o) for o in server.cli_options())
    prog = f"{shlex.quote(sys.executable)} -m sshpipe"
    name = _a_file_in(served)

    def remote(path: str) -> str:
        return shlex.quote(f"{server.destination}:/{path}")

    if name is None:
        return [
            f"{served} has no file to get yet; make one and put it there first:",
            f"  {shlex.quote(sys.executable)} -c {shlex.quote(_ONE_MIB)}",
            f"  {prog} put {options} ./hello.bin {remote('hello.bin')}",
            f"  {prog} get {options} {remote('hello.bin')} ./hello-copy.bin",
        ]
    local = shlex.quote(f"./{name}")
    return [
        "try:",
        f"  {prog} get {options} {remote(name)} {local}",
        f"  {prog} put {options} {local} {remote('copy-of-' + name)}",
    ]


# A file to put, made by the Python that runs us (no head -c, which differs by OS).
_ONE_MIB = 'import os; open("hello.bin", "wb").write(os.urandom(1 << 20))'


def _a_file_in(root: Path) -> str | None:
    """The first (by name) regular file at the top of ``root`` a command can name as it is.

    Not hidden, no wildcard characters (the command line expands those on
    the server), not a link.
    """
    try:
        entries = list(os.scandir(root))
    except OSError:
        return None
    names = [
        entry.name
        for entry in entries
        if entry.is_file(follow_symlinks=False)
        and not entry.name.startswith((".", "-"))
        and not has_magic(entry.name)
    ]
    return min(names, default=None)


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[asyncio.Event]:
    """An event set at SIGINT or SIGTERM; the ``with`` blocks around then remove the keys.

    Without a handler SIGTERM ends the process at once and the temporary
    folder stays behind. Where none can be installed (not the main thread,
    Windows), Ctrl-C still raises KeyboardInterrupt through those blocks.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    handled: list[signal.Signals] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, stop.set)
            handled.append(signum)
    try:
        yield stop
    finally:
        for signum in handled:
            loop.remove_signal_handler(signum)
