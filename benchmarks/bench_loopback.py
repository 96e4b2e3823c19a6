#!/usr/bin/env python3
"""Loopback SFTP, whole command: sshpipe vs OpenSSH sftp vs plain asyncssh, in one run.

Starts a throwaway OpenSSH sshd on 127.0.0.1 (stock ``MaxSessions 10``), writes
one random source file per size into its root, then, per repetition, has every
client copy a 1-byte file (its set-up) and then every size, get and put, each in
its own process, the client order rotated every repetition. The headline is the
whole command (process start to exit) and size / that time; net of set-up is a
second column. Every output is checked against its source's sha256. Tables:
``OUT/results.md``; everything: ``OUT/results.json``.

Run from the repo root:  python benchmarks/bench_loopback.py             (8M..1G, 3 reps)
                         python benchmarks/bench_loopback.py --quick     (8M,64M, 1 rep)
                         python benchmarks/bench_loopback.py --ciphers all --sizes 256M
                             (sshpipe and sftp with each cipher: client CPU-s/GiB)
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from _bench_common import (
    BENCH_DIR,
    MIB,
    Client,
    add_variant_option,
    compile_bytecode,
    machine_info,
    positive_int,
    scratch_dir,
    size_label,
    size_list,
)
from _cipher_report import cipher_alone, cipher_clients, cipher_list, cpu_table
from _wan_link import LocalServerFiles
from _whole import Matrix, Setting, Where, make_sources, run_setting, summarize
from _whole_report import format_header, format_tables, write_results

from sshpipe.testing.greenend import greenend_server
from sshpipe.testing.sshd import SSHServerInfo, openssh_server

BUILTIN_CLIENTS = ("sftp-default", "sftp-tuned", "asyncssh", "sshpipe")
# 261120, not 262144: OpenSSH 9.2 advertises a 261120-byte max write in
# limits@openssh.com and fails uploads with larger blocks.
SFTP_TUNED_ARGS = ("-R", "256", "-B", "261120", "-c", "aes128-gcm@openssh.com")
DEFAULT_SIZES = (8 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB)
QUICK_SIZES = (8 * MIB, 64 * MIB)
DEFAULT_OUT = BENCH_DIR / "results" / "loopback"
QUICK_OUT = BENCH_DIR / "results" / "loopback-quick"
# The SFTP servers --servers names: sshd's own, or Green End's behind sshd.
SERVERS: dict[str, Callable[..., contextlib.AbstractContextManager[SSHServerInfo]]] = {
    "openssh": openssh_server,
    "greenend": greenend_server,
}
# What a stock sshd allows, as in bench_wan.py.
STOCK_MAX_SESSIONS = 10


def parse_checkout(text: str) -> tuple[str, Path]:
    name, sep, where = text.partition("=")
    directory = Path(where).expanduser().resolve()
    if not sep or not name.strip() or not (directory / "sshpipe" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, DIR a checkout, got {text!r}")
    return name.strip(), directory


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", type=size_list, help="comma-separated file sizes (default 8M,64M,256M,1G)"
    )
    parser.add_argument("--reps", type=positive_int, help="repetitions (default 3)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: sizes 8M,64M, 1 rep, results in {QUICK_OUT.name}/ "
        "(explicit options still win)",
    )
    parser.add_argument(
        "--clients",
        action="append",
        help="comma-separated subset of clients (may repeat); default: all, "
        f"i.e. {', '.join(BUILTIN_CLIENTS)} and every --variant",
    )
    parser.add_argument(
        "--sshpipe-arg",
        action="append",
        default=[],
        metavar="ARGS",
        help="extra options for every sshpipe client, shell-split "
        "(e.g. --sshpipe-arg='-R 64'); may repeat",
    )
    add_variant_option(parser, "on top of --sshpipe-arg")
    parser.add_argument(
        "--checkout",
        action="append",
        type=parse_checkout,
        default=[],
        metavar="NAME=DIR",
        help="extra sshpipe client NAME run from the checkout DIR (another commit: "
        "git worktree add DIR COMMIT), compiled ahead as this one; may repeat",
    )
    parser.add_argument(
        "--ciphers",
        type=cipher_list,
        metavar="LIST",
        help="comma-separated ciphers, or 'all' (those a stock sshd accepts): per cipher, "
        "an sshpipe and an sftp client with -c CIPHER (sshpipe:NAME, sftp:NAME), and a table "
        "of client CPU-s/GiB; without --clients, they and the plain sshpipe are the clients",
    )
    parser.add_argument(
        "--servers",
        default="openssh",
        help="comma-separated servers measured one after the other in the same run: "
        "openssh (sshd's internal-sftp, with limits@openssh.com), greenend (Green End's "
        "gesftpserver behind sshd: no limits, the block found by trying); default openssh",
    )
    parser.add_argument(
        "--max-sessions",
        type=positive_int,
        default=STOCK_MAX_SESSIONS,
        help=f"sshd MaxSessions (default {STOCK_MAX_SESSIONS}, stock sshd's)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="parent of the scratch dir (default: system temp; use the checkout's file "
        "system, e.g. ../bench-scratch); the scratch dir is removed",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"directory for results.json and results.md (default {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="kill a transfer after this many s"
    )
    return parser


def select_clients(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[Client]:
    sshpipe_common = tuple(arg for chunk in args.sshpipe_arg for arg in shlex.split(chunk))
    available: dict[str, Client] = {
        "sftp-default": Client("sftp-default", "sftp"),
        "sftp-tuned": Client("sftp-tuned", "sftp", SFTP_TUNED_ARGS),
        "asyncssh": Client("asyncssh", "asyncssh"),
        # --json after -q: the stats object still prints, and lands in the JSON.
        "sshpipe": Client("sshpipe", "sshpipe", (*sshpipe_common, "--json")),
    }
    for name, extra in args.variant:
        if name in available:
            parser.error(f"--variant name {name!r} is already taken")
        available[name] = Client(name, "sshpipe", (*sshpipe_common, *extra, "--json"))
    for name, directory in args.checkout:
        if name in available:
            parser.error(f"--checkout name {name!r} is already taken")
        compile_bytecode(directory)
        available[name] = Client(
            name, "sshpipe", (*sshpipe_common, "--json"), checkout=str(directory)
        )
    by_cipher = cipher_clients(args.ciphers or (), sshpipe_common)
    available.update((client.name, client) for client in by_cipher)
    if not args.clients and by_cipher:
        return [available["sshpipe"], *by_cipher]
    if not args.clients:
        return list(available.values())
    wanted = [name.strip() for chunk in args.clients for name in chunk.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in available]
    if unknown:
        parser.error(f"unknown client(s) {unknown}; choose from {list(available)}")
    return [available[name] for name in dict.fromkeys(wanted)]


def benchmark(args: argparse.Namespace, matrix: Matrix) -> None:
    with scratch_dir(args.workdir) as scratch:
        (scratch / "local").mkdir()
        (scratch / "logs").mkdir()
        for setting in matrix.settings:
            name = setting.label.removeprefix("loopback").strip() or "openssh"
            with SERVERS[name](scratch / f"server-{name}", max_sessions=args.max_sessions) as srv:
                files = LocalServerFiles(srv.root)
                sources = make_sources(matrix, files, scratch)
                where = Where(
                    server=srv, files=files, sources=sources, local=scratch / "local",
                    logs=scratch / "logs", timeout=lambda _size: float(args.timeout),
                )  # fmt: skip
                run_setting(matrix, setting, where)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    sizes = args.sizes or (QUICK_SIZES if args.quick else DEFAULT_SIZES)
    reps = args.reps or (1 if args.quick else 3)
    out = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    clients = select_clients(args, parser)
    if shutil.which("sftp") is None and any(c.kind == "sftp" for c in clients):
        parser.error("OpenSSH sftp not found on PATH")
    servers = [name.strip() for name in args.servers.split(",") if name.strip()]
    unknown = [name for name in servers if name not in SERVERS]
    if unknown or not servers:
        parser.error(f"unknown server(s) {unknown}; choose from {list(SERVERS)}")
    labels = ["loopback"] if servers == ["openssh"] else [f"loopback {name}" for name in servers]
    matrix = Matrix(
        clients=clients,
        directions=["get", "put"],
        settings=[Setting(label, None, None, sizes, role="loopback") for label in labels],
        reps=reps,
    )
    machine = machine_info()
    where = f"127.0.0.1, one OpenSSH sshd on the same machine, MaxSessions {args.max_sessions}"
    header = format_header(machine, matrix, where)
    print(header + "\n", flush=True)
    alone = {cipher: cipher_alone(cipher) for cipher in args.ciphers or ()}
    try:
        benchmark(args, matrix)
    finally:
        # Partial results are still worth keeping after a crash or ^C.
        rows, setups = summarize(matrix)
        markdown = f"## SFTP on loopback: whole command\n\n{header}\n\n"
        markdown += format_tables(rows, setups, matrix)
        if args.ciphers:
            markdown += "\n\n" + cpu_table(matrix, alone)
        extra = {"max_sessions": args.max_sessions, "quick": args.quick,
                 "timeout_s": args.timeout, "cipher_alone_s_per_gib": alone}  # fmt: skip
        write_results(out, "loopback", machine, matrix, rows, setups, markdown, extra)
    print("\n" + markdown)
    print(f"\nresults: {out / 'results.md'}, {out / 'results.json'}")
    failed = [s for s in matrix.samples if not s.ok]
    if failed:
        print(f"\n{len(failed)} run(s) FAILED:", file=sys.stderr)
        for s in failed:
            print(
                f"  rep {s.rep + 1} {s.client} {s.direction} {size_label(s.size_bytes)}: {s.error}",
                file=sys.stderr,
            )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
