#!/usr/bin/env python3
"""``Client.rmtree`` next to asyncssh's ``SFTPClient.rmtree``, same sshd, same emulated link.

Starts a throwaway OpenSSH sshd on 127.0.0.1 and the link emulator in front
of it (``--rtt`` ms, 1 Gbit/s), makes a tree of ``--dirs`` directories of
``--files`` one-byte files under ``--workdir`` for each client in turn, times
each ``rmtree`` on a connection already open, and prints one line per run.

Run from the repo root:  python benchmarks/bench_rmtree.py --workdir /path/to/scratch
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

import asyncssh

import sshpipe
from sshpipe.testing.linkemu import LinkEmulator, LinkSpec
from sshpipe.testing.sshd import openssh_server


def make_tree(root: Path, dirs: int, files: int) -> None:
    for d in range(dirs):
        sub = root / f"d{d}"
        sub.mkdir(parents=True)
        for f in range(files):
            (sub / f"f{f}").write_bytes(b"x")


async def run(args: argparse.Namespace) -> None:
    work = Path(args.workdir)
    with openssh_server(work / "sshd") as info:
        spec = LinkSpec(rtt=args.rtt / 1000, rate=1e9)
        async with LinkEmulator("127.0.0.1", info.port, spec) as link:
            known = work / "known_hosts_link"
            known.write_text(
                info.known_hosts.read_text().replace(f"]:{info.port} ", f"]:{link.port} ")
            )
            tree = info.root / "tree"
            ours: list[float] = []
            theirs: list[float] = []
            async with sshpipe.connect(
                f"{info.user}@127.0.0.1",
                port=link.port,
                identity_files=[str(info.client_key)],
                known_hosts=[str(known)],
                ssh_config=[],
            ) as sp:
                await sp.exists("/")  # the channel open before the clock starts
                for _ in range(args.runs):
                    make_tree(tree, args.dirs, args.files)
                    start = time.monotonic()
                    await sp.rmtree(str(tree))
                    ours.append(time.monotonic() - start)
            async with (
                asyncssh.connect(
                    "127.0.0.1",
                    port=link.port,
                    username=info.user,
                    client_keys=[str(info.client_key)],
                    known_hosts=str(known),
                ) as conn,
                conn.start_sftp_client() as sftp,
            ):
                for _ in range(args.runs):
                    make_tree(tree, args.dirs, args.files)
                    start = time.monotonic()
                    await sftp.rmtree(str(tree))
                    theirs.append(time.monotonic() - start)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(
        f"rmtree of {args.dirs} dirs x {args.files} files at {args.rtt:g} ms, median of "
        f"{args.runs}: sshpipe {a:.2f} s, asyncssh {b:.2f} s (asyncssh/sshpipe {b / a:.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--rtt", type=float, default=50.0, help="round trip, ms")
    parser.add_argument("--dirs", type=int, default=20)
    parser.add_argument("--files", type=int, default=25)
    parser.add_argument("--runs", type=int, default=3)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
