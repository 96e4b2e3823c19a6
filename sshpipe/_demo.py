"""``demo`` and ``serve``: sshpipe against the embedded server, no setup needed."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shlex
import sys
import tempfile
from pathlib import Path

from ._client import Client, connect
from ._config import TransferConfig
from ._embedded import EmbeddedServer, embedded_server
from ._errors import SSHPipeError
from ._stats import TransferStats


def _client(server: EmbeddedServer, config: TransferConfig) -> Client:
    return connect(
        server.destination,
        port=server.port,
        identity_files=[str(server.client_key)],
        known_hosts=[str(server.known_hosts)],
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


async def demo(size: int) -> int:
    """Get and put one file with 128 and with 1 request in flight; verify; print a table."""
    with tempfile.TemporaryDirectory(prefix="sshpipe-demo-") as tmp:
        work = Path(tmp)
        async with embedded_server(work / "server") as server:
            source = server.root / "demo.bin"
            print(
                f"embedded SFTP server on {server.host}:{server.port}; "
                f"writing a {size / 2**20:.0f} MiB test file ...",
                flush=True,
            )
            expected = _make_file(source, size)
            rows: list[tuple[str, str, TransferStats]] = []
            for label, config in (
                ("sshpipe (128 in flight)", TransferConfig()),
                ("one request at a time", TransferConfig(requests=1)),
            ):
                async with _client(server, config) as client:
                    local = work / "got.bin"
                    rows.append((label, "get", await client.get("/demo.bin", str(local))))
                    _verify(local, expected, f"{label} get")
                    rows.append((label, "put", await client.put(str(local), "/put.bin")))
                    _verify(server.root / "put.bin", expected, f"{label} put")
                    local.unlink()
    _print_table(rows)
    return 0


def _verify(path: Path, expected: str, what: str) -> None:
    actual = _sha256(path)
    if actual != expected:
        raise SSHPipeError(f"{what}: sha256 mismatch ({actual} != {expected})")


def _print_table(rows: list[tuple[str, str, TransferStats]]) -> None:
    print(f"\n{'client':<26}{'dir':<5}{'MB/s':>9}{'seconds':>9}{'requests':>10}{'peak':>6}  sha256")
    for label, direction, stats in rows:
        print(
            f"{label:<26}{direction:<5}{stats.throughput / 1e6:>9.1f}{stats.seconds:>9.2f}"
            f"{stats.requests:>10}{stats.peak_requests_in_flight:>6}  ok"
        )
    print(
        "\nBoth run on this one machine, server in the same process: on loopback the\n"
        "round trip is tiny, so the gap here is per-request overhead; on a real link\n"
        "every request of the one-at-a-time client also waits a full round trip."
    )


async def serve(root: str | None, port: int) -> int:
    """Run the embedded server until interrupted, printing commands to try."""
    with tempfile.TemporaryDirectory(prefix="sshpipe-serve-") as tmp:
        served = Path(root).resolve() if root else Path(tmp) / "root"
        async with embedded_server(Path(tmp) / "server", root=served, port=port) as server:
            sample = served / "hello.bin"
            if not root:
                _make_file(sample, 8 * 1024 * 1024)
            options = " ".join(shlex.quote(o) for o in server.cli_options())
            prog = f"{shlex.quote(sys.executable)} -m sshpipe"
            print(f"serving {served} as / on {server.host}:{server.port} (Ctrl-C to stop)")
            print("try:")
            print(f"  {prog} get {options} {server.destination}:/hello.bin ./hello.bin")
            print(f"  {prog} put {options} ./hello.bin {server.destination}:/copy.bin", flush=True)
            await asyncio.Event().wait()  # until Ctrl-C cancels us
    return 0
