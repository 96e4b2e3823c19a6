#!/usr/bin/env python3
"""Where a transfer's client CPU goes: py-spy's raw stacks split into the hot path's parts.

Record a whole command with ``py-spy record --native -r 100 --format raw -o
get.txt -- python -m sshpipe get ...`` (a sshd on loopback), then:

    python benchmarks/profile_split.py get.txt [more.txt ...] [--cpu SECONDS ...]

(``.gz`` files are read as they are: ``results/cpu/profiles/`` keeps them so.)

Each sample goes to the first part, from the innermost frame outwards, that
one of its frames belongs to (the cipher before asyncssh's Python that called
it, the kernel's socket calls before the event loop). Idle samples (the event
loop waiting in epoll, idle worker threads) are left out, so the shares are of
the CPU the process used; ``--cpu`` (its user + system seconds, from
``/usr/bin/time``) turns them into CPU-seconds.
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections import Counter
from pathlib import Path

PARTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "cipher (AES-GCM, chacha20: OpenSSL/cryptography and asyncssh's shims)",
        re.compile(
            r"EVP_|aesni|gcm|GCM|chacha|poly1305|ossl_|libcrypto|cryptography|crypto/cipher"
        ),
    ),
    (
        "kernel: socket reads and writes",
        re.compile(r"uv__read|uv__write|uv__try_write|(?<!p)writev|sendmsg|recvmsg|sock_recv"),
    ),
    ("local file writes (pwritev, fdatasync)", re.compile(r"pwrite|fsync|fdatasync|local/target")),
    ("local file reads (pread)", re.compile(r"pread|readinto|local/source")),
    ("asyncssh: per SSH packet", re.compile(r"asyncssh/connection\.py|asyncssh/packet\.py")),
    ("asyncssh: channel", re.compile(r"asyncssh/channel\.py|asyncssh/session\.py")),
    ("sshpipe: asyncssh patches", re.compile(r"transport/asyncssh_patches")),
    ("sshpipe: SFTP replies (codec, requests)", re.compile(r"codec|requests\.py|/ssh\.py")),
    ("sshpipe: pumps, plan, flow control", re.compile(r"transfer/|core/|transport/sftp|pool")),
    ("event loop (uvloop, asyncio)", re.compile(r"uvloop|loop\.c|asyncio|uv_run")),
    ("start-up: imports, log-in", re.compile(r"importlib|_find_and_load|auth|kex|<module>")),
)
IDLE = ("epoll_pwait", "_queue_SimpleQueue_get", "PyThread_acquire_lock_timed", "Condition.wait")
OTHER = "other"


def part_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, pattern in PARTS:
            if pattern.search(frame):
                return name
    return OTHER


def split(path: Path) -> Counter[str]:
    """Samples per part (idle ones left out)."""
    counts: Counter[str] = Counter()
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit() or any(idle in stack for idle in IDLE):
            continue
        counts[part_of(stack.split(";"))] += int(count)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profiles", nargs="+", type=Path)
    parser.add_argument("--cpu", type=float, nargs="*", help="the CPU-s of each, in order")
    args = parser.parse_args()
    for index, path in enumerate(args.profiles):
        counts = split(path)
        total = sum(counts.values()) or 1
        cpu = args.cpu[index] if args.cpu and index < len(args.cpu) else None
        print(f"## {path} ({total} samples on CPU)")
        for name, count in counts.most_common():
            share = count / total
            seconds = f"  {share * cpu:5.2f} CPU-s" if cpu is not None else ""
            print(f"  {100 * share:5.1f} %{seconds}  {name}")


if __name__ == "__main__":
    main()
