#!/usr/bin/env python3
"""Sweep sshpipe's knobs on loopback against a real sshd, to choose defaults.

One knob varies at a time from the defaults: channels, max SSH packet size we
advertise, byte budget in flight, requests in flight. Transfers run in this
process through the API (throughput net of start-up and connect); each setting
is run ``--reps`` times, interleaved, and the median is printed with the
client CPU seconds per GiB. Every output is verified by sha256.

Run from the repo root:  python benchmarks/sweep_loopback.py --size 256M --reps 3
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import uvloop

import sshpipe
from sshpipe.testing.sshd import SSHServerInfo, openssh_server

KIB, MIB = 1 << 10, 1 << 20
BASE = sshpipe.TransferConfig()
SETTINGS: dict[str, sshpipe.TransferConfig] = {
    "defaults": BASE,
    "channels=2": replace(BASE, channels=2),
    "channels=4": replace(BASE, channels=4),
    "packet=32K": replace(BASE, max_packet_size=32 * KIB),
    "packet=64K": replace(BASE, max_packet_size=64 * KIB),
    "packet=128K": replace(BASE, max_packet_size=128 * KIB),
    "in-flight=4M": replace(BASE, max_bytes_in_flight=4 * MIB),
    "in-flight=8M": replace(BASE, max_bytes_in_flight=8 * MIB),
    "in-flight=32M": replace(BASE, max_bytes_in_flight=32 * MIB, window=32 * MIB),
    "packet=64K,in-flight=4M": replace(BASE, max_packet_size=64 * KIB, max_bytes_in_flight=4 * MIB),
    "requests=16": replace(BASE, requests=16),
    "requests=1": replace(BASE, requests=1),
}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(MIB):
            digest.update(block)
    return digest.hexdigest()


async def _one(
    srv: SSHServerInfo, config: sshpipe.TransferConfig, direction: str, src: Path, out: Path
) -> tuple[float, float]:
    client = sshpipe.connect(
        srv.destination(),
        port=srv.port,
        identity_files=[str(srv.client_key)],
        known_hosts=[str(srv.known_hosts)],
        ssh_config=[],
        config=config,
    )
    async with client:
        cpu, started = _cpu(), time.perf_counter()
        if direction == "get":
            await client.get(str(src), str(out))
        else:
            await client.put(str(src), str(out))
        return time.perf_counter() - started, _cpu() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="256M", help="file size (K/M/G suffix)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="setting names to run (default: all)")
    args = parser.parse_args()
    size = int(args.size[:-1]) * {"K": KIB, "M": MIB, "G": 1 << 30}[args.size[-1].upper()]
    names = args.only or list(SETTINGS)
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="sshpipe-sweep-") as tmp,
        openssh_server(Path(tmp) / "sshd") as srv,
    ):
        src = srv.root / "source.bin"
        with src.open("wb") as file:
            for _ in range(size // MIB):
                file.write(os.urandom(MIB))
        expected = _sha256(src)
        for rep in range(args.reps):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                for direction in ("get", "put"):
                    out = Path(tmp) / "got.bin" if direction == "get" else srv.root / "put.bin"
                    seconds, cpu = uvloop.run(_one(srv, SETTINGS[name], direction, src, out))
                    if _sha256(out) != expected:
                        print(f"VERIFY FAILED: {name} {direction}", file=sys.stderr)
                        return 1
                    out.unlink()
                    samples.setdefault((name, direction), []).append((seconds, cpu))
    gib = size / (1 << 30)
    print(f"size {size / MIB:.0f} MiB, reps {args.reps}, nproc {os.cpu_count()}")
    print(f"{'setting':<16}{'get MB/s':>10}{'cpu s/GiB':>10}{'put MB/s':>10}{'cpu s/GiB':>10}")
    for name in names:
        row = f"{name:<16}"
        for direction in ("get", "put"):
            runs = samples[(name, direction)]
            rate = statistics.median(size / s / 1e6 for s, _ in runs)
            cpu = statistics.median(c / gib for _, c in runs)
            row += f"{rate:>10.0f}{cpu:>10.2f}"
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
