#!/usr/bin/env python3
"""Whole-command SFTP time over a slow link: sshpipe vs OpenSSH sftp (vs asyncssh).

Starts one throwaway OpenSSH sshd (stock ``MaxSessions 10``) and, for every
(RTT, rate) setting, one user-space link emulator process
(``python -m sshpipe.testing.linkemu``) in front of it; every client connects to the
emulator's port. Per setting and repetition each client copies a 1-byte file
(its set-up), then every size, get and put, the client order rotated every
repetition. The headline is the whole command (process start to exit) and
size / that time; net of set-up is a second column. A thin link (40 ms,
20 Mbit/s, 12 MiB) follows the matrix. Every output is checked against its
source's sha256. Tables: ``OUT/results.md``; everything: ``OUT/results.json``.

With ``--server HOST:PORT`` it skips sshd and the emulator and measures one
existing server over whatever link lies between (e.g. kernel netem, see
docker-compose.yml).

Run from the repo root:  python benchmarks/bench_wan.py            (full matrix, ~30 min)
                         python benchmarks/bench_wan.py --quick    (smoke run, ~2 min)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _bench_common import (
    MIB,
    REPO_ROOT,
    Client,
    Paths,
    add_variant_option,
    build_argv,
    machine_info,
    parse_size,
    positive_int,
    run_measured,
    scratch_dir,
    size_label,
    size_list,
)
from _wan_link import (
    SFTP_TUNED_ARGS,
    BenchError,
    Link,
    LinkRecord,
    LocalServerFiles,
    RemoteServerFiles,
    ServerFiles,
    Source,
    client_view,
    emulated_view,
)
from _wan_report import format_links
from _whole import SETUP_SIZE, Matrix, Setting, Where, make_sources, run_setting, summarize
from _whole_report import format_header, format_tables, write_results

from sshpipe.testing.sshd import SSHServerInfo, openssh_server

# Run as a file, this directory is on sys.path (for the _*.py helpers); sshpipe
# itself must be installed (scripts/test.sh: pip install -e .).
BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
DEFAULT_OUT = RESULTS_DIR / "wan"
QUICK_OUT = RESULTS_DIR / "wan-quick"
ALL_CLIENTS = ("sftp-default", "sftp-tuned", "asyncssh", "sshpipe")
# sftp with its defaults is what sshpipe is compared with; the other two only add
# minutes (each is capped by the same 2 MiB window): opt in with --clients.
DEFAULT_CLIENTS = ("sftp-default", "sshpipe")
ALL_DIRECTIONS = ("get", "put")
# Stock sshd's MaxSessions: the benchmark is about what a default server allows.
STOCK_MAX_SESSIONS = 10
DEFAULTS: dict[str, Any] = {
    "rtts": (20.0, 100.0, 300.0),
    "rates": (1000.0,),
    "sizes": (8 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB),
    # sftp's one 2 MiB window per round trip is ~7 MB/s at 300 ms: 1 GiB would be
    # 2.5 min a transfer, 15 min of the run (--sizes-at 300=8M,64M,256M,1G adds it).
    "sizes_at": {300.0: (8 * MIB, 64 * MIB, 256 * MIB)},
    "reps": 3,
}
QUICK: dict[str, Any] = {
    "rtts": (20.0,),
    "rates": (1000.0,),
    "sizes": (8 * MIB, 64 * MIB),
    "sizes_at": {},
    "reps": 1,
}
# Issue 13's thin link: a slow line where only the link, not the window, limits.
THIN_RTT_MS = 40.0
THIN_RATE_MBIT = 20.0
THIN_SIZE = 12 * MIB
HOST_KEY_CHECK_TIMEOUT = 60.0


# --------------------------------------------------------------------------- CLI


def float_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 20,100,300: {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive numbers: {text!r}")
    return values


def name_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def rtt_sizes(text: str) -> tuple[float, tuple[int, ...]]:
    rtt, sep, sizes = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected RTT=SIZES like 300=8M,64M: {text!r}")
    return float_list(rtt)[0], size_list(sizes)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rtts", type=float_list, help="RTTs in ms (default 20,100,300)")
    parser.add_argument("--rates", type=float_list, help="link rates in Mbit/s (default 1000)")
    parser.add_argument(
        "--queue", type=parse_size, help="emulator queue in bytes (default: the emulator's own)"
    )
    parser.add_argument(
        "--sizes", type=size_list, help="file sizes at every RTT (default 8M,64M,256M,1G)"
    )
    parser.add_argument(
        "--sizes-at",
        type=rtt_sizes,
        action="append",
        metavar="RTT=SIZES",
        help="other sizes at one RTT, e.g. 300=8M,64M,256M,1G; may repeat "
        "(default, without --sizes: 300=8M,64M,256M)",
    )
    parser.add_argument(
        "--no-thin",
        dest="thin",
        action="store_false",
        help=f"skip the thin link ({THIN_RTT_MS:g} ms, {THIN_RATE_MBIT:g} Mbit/s, "
        f"{size_label(THIN_SIZE)})",
    )
    parser.add_argument("--reps", type=positive_int, help="repetitions (default 3)")
    parser.add_argument(
        "--clients",
        type=name_list,
        default=list(DEFAULT_CLIENTS),
        help=f"comma-separated subset of {','.join(ALL_CLIENTS)} "
        f"(default {','.join(DEFAULT_CLIENTS)})",
    )
    add_variant_option(parser, "whether or not --clients names it")
    parser.add_argument(
        "--directions", type=name_list, default=list(ALL_DIRECTIONS), help="get,put or one of them"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: rtt 20, sizes 8M,64M, 1 rep, results in {QUICK_OUT.name}/ "
        "(explicit options still win)",
    )
    parser.add_argument(
        "--max-sessions",
        type=positive_int,
        default=STOCK_MAX_SESSIONS,
        help=f"sshd MaxSessions (default {STOCK_MAX_SESSIONS}, stock sshd's)",
    )
    parser.add_argument(
        "--timeout-base", type=float, default=60.0, help="seconds every transfer may take (60)"
    )
    parser.add_argument(
        "--timeout-rate",
        type=float,
        default=1.0,
        metavar="MB/S",
        help="plus size / this rate: a transfer slower than ~1 MB/s is killed (default 1)",
    )
    parser.add_argument(
        "--workdir", type=Path, help="parent of the scratch dir (default: temp; use the "
        "checkout's file system, e.g. ../bench-scratch)"
    )  # fmt: skip
    parser.add_argument(
        "--out",
        type=Path,
        help=f"directory for results.json and results.md (default {DEFAULT_OUT})",
    )
    remote = parser.add_argument_group(
        "existing server (no local sshd, no emulator; one link setting)"
    )
    remote.add_argument("--server", type=host_port, metavar="HOST:PORT")
    remote.add_argument("--user", help="login name (default: $USER)")
    remote.add_argument("--identity", type=Path, metavar="KEY", help="private key file")
    remote.add_argument(
        "--known-hosts", type=Path, metavar="FILE", help="known_hosts with the server's key"
    )
    remote.add_argument(
        "--link-label", help='how the link is described, e.g. "netem 100ms 1000mbit"'
    )
    remote.add_argument(
        "--remote-dir",
        default="sshpipe-bench",
        help="scratch directory on the server, relative to the login's home "
        "(default sshpipe-bench; created and emptied of our files at the end)",
    )
    return parser


def resolve_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    preset = QUICK if args.quick else DEFAULTS
    if args.reps is None:
        args.reps = preset["reps"]
    explicit = dict(args.sizes_at or [])
    if args.sizes is None:
        args.sizes = preset["sizes"]
        args.sizes_at = {**preset["sizes_at"], **explicit}
    else:
        args.sizes_at = explicit
    if args.out is None:
        args.out = QUICK_OUT if args.quick else DEFAULT_OUT
    variants = [name for name, _ in args.variant]
    taken = [name for name in variants if name in ALL_CLIENTS]
    if taken or len(set(variants)) != len(variants):
        parser.error(f"--variant names must be new and distinct: {', '.join(variants)}")
    args.clients = list(dict.fromkeys([*args.clients, *variants]))
    unknown = [c for c in args.clients if c not in (*ALL_CLIENTS, *variants)]
    if unknown or not args.clients:
        parser.error(f"--clients: choose from {','.join(ALL_CLIENTS)} or a --variant")
    bad = [d for d in args.directions if d not in ALL_DIRECTIONS]
    if bad or not args.directions:
        parser.error("--directions: get, put or get,put")
    if args.timeout_base <= 0 or args.timeout_rate <= 0:
        parser.error("--timeout-base and --timeout-rate must be positive")
    if args.server is None:
        for key in ("rtts", "rates"):
            if getattr(args, key) is None:
                setattr(args, key, preset[key])
        for flag in ("user", "identity", "known_hosts", "link_label"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag.replace('_', '-')} only goes with --server")
        return
    # --server: one setting; --rtts/--rates, if given, describe the link (for
    # "% link" and the floor), they do not shape it. No thin link to shape either.
    args.thin = False
    for key in ("rtts", "rates"):
        value = getattr(args, key)
        if value is not None and len(value) != 1:
            parser.error(f"with --server, --{key} takes one value describing the link")
    if args.identity is None or args.known_hosts is None:
        parser.error("--server needs --identity and --known-hosts (host keys stay checked)")
    if args.queue is not None:
        parser.error("--queue shapes the emulator; with --server there is none")
    for path in (args.identity, args.known_hosts):
        if not path.is_file():
            parser.error(f"no such file: {path}")


def select_clients(args: argparse.Namespace) -> list[Client]:
    available = {
        "sftp-default": Client("sftp-default", "sftp"),
        "sftp-tuned": Client("sftp-tuned", "sftp", SFTP_TUNED_ARGS),
        "asyncssh": Client("asyncssh", "asyncssh"),
        # --json after -q: the stats object still prints, and lands in the JSON.
        "sshpipe": Client("sshpipe", "sshpipe", ("--json",)),
    }
    for name, extra in args.variant:
        available[name] = Client(name, "sshpipe", (*extra, "--json"))
    return [available[name] for name in dict.fromkeys(args.clients)]


def link_label(rtt: float, rate: float) -> str:
    return f"{rtt:g} ms RTT, {rate:g} Mbit/s"


def make_settings(args: argparse.Namespace) -> list[Setting]:
    if args.server is not None:
        rtt = args.rtts[0] if args.rtts else None
        rate = args.rates[0] if args.rates else None
        described = rtt is not None and rate is not None
        default = link_label(rtt, rate) if described else "{}:{}".format(*args.server)
        sizes = args.sizes_at.get(rtt, args.sizes)
        return [Setting(args.link_label or default, rtt, rate, sizes)]
    settings = [
        Setting(link_label(rtt, rate), rtt, rate, args.sizes_at.get(rtt, args.sizes))
        for rate in args.rates
        for rtt in args.rtts
    ]
    if args.thin:
        label = link_label(THIN_RTT_MS, THIN_RATE_MBIT)
        settings.append(Setting(label, THIN_RTT_MS, THIN_RATE_MBIT, (THIN_SIZE,), role="thin"))
    return settings


def as_link(setting: Setting) -> Link:
    return Link(label=setting.label, rtt_ms=setting.rtt_ms, rate_mbit=setting.rate_mbit)


# --------------------------------------------------------------------------- measuring


def make_where(
    args: argparse.Namespace, server: SSHServerInfo, files: ServerFiles,
    sources: dict[int, Source], scratch: Path,
) -> Where:  # fmt: skip
    def timeout(size: int) -> float:
        return float(args.timeout_base + size / (args.timeout_rate * 1e6))

    return Where(server=server, files=files, sources=sources, local=scratch / "local",
                 logs=scratch / "logs", timeout=timeout)  # fmt: skip


def check_host_keys_enforced(where: Where, clients: list[Client], scratch: Path) -> None:
    """Every client must refuse the server when its key is not in known_hosts.

    Guards the benchmark's own plumbing: a wrong option that turned checking
    off would go unnoticed, since the right key is always offered.
    """
    empty = scratch / "known_hosts-empty"
    empty.write_text("")
    stranger = client_view(
        where.server, scratch, "empty", host=where.server.host, port=where.server.port,
        known_hosts=empty,
    )  # fmt: skip
    source = where.sources[SETUP_SIZE]
    output = where.local / "hostkey-check.bin"
    paths = Paths(source=source.remote, get_output=output, put_output=output, logs=where.logs)
    accepted = []
    for client in clients:
        argv = build_argv(client, "get", stranger, paths)
        log = where.logs / f"hostkey-check-{client.name}.log"
        measured = run_measured(argv, log, HOST_KEY_CHECK_TIMEOUT)
        if measured.exit_code == 0 or output.exists():
            accepted.append(client.name)
        output.unlink(missing_ok=True)
    if accepted:
        raise BenchError(f"host key checking is OFF for {accepted}: they accepted an unknown key")
    print(f"host keys: {len(clients)} client(s) refused an unknown key (good)\n")


# --------------------------------------------------------------------------- main


def benchmark_emulated(
    args: argparse.Namespace, matrix: Matrix, records: list[LinkRecord], scratch: Path
) -> None:
    with openssh_server(scratch / "server", max_sessions=args.max_sessions) as srv:
        files = LocalServerFiles(srv.root)
        sources = make_sources(matrix, files, scratch)
        checked = False
        for setting in matrix.settings:
            link = as_link(setting)
            record = LinkRecord(
                label=link.label, rtt_ms=link.rtt_ms, rate_mbit=link.rate_mbit,
                queue_bytes=args.queue,
            )  # fmt: skip
            records.append(record)
            logs = scratch / "logs"
            with emulated_view(link, srv, args.queue, scratch, logs, record) as view:
                where = make_where(args, view, files, sources, scratch)
                if not checked:
                    check_host_keys_enforced(where, matrix.clients, scratch)
                    checked = True
                run_setting(matrix, setting, where)
            print(format_links([record]) + "\n", flush=True)


def benchmark_server(
    args: argparse.Namespace, matrix: Matrix, records: list[LinkRecord], scratch: Path
) -> None:
    host, port = args.server
    user = args.user or os.environ.get("USER") or "root"
    key, kh = args.identity.resolve(), args.known_hosts.resolve()
    base = SSHServerInfo(
        host=host, port=port, user=user, client_key=key, known_hosts=kh,
        root=Path(args.remote_dir), ssh_config=Path(os.devnull), log_file=Path(os.devnull),
    )  # fmt: skip
    view = client_view(base, scratch, "server", host=host, port=port, known_hosts=kh)
    setting = matrix.settings[0]
    records.append(LinkRecord(label=setting.label, rtt_ms=setting.rtt_ms,
                              rate_mbit=setting.rate_mbit))  # fmt: skip
    files = RemoteServerFiles(view, args.remote_dir, scratch / "logs")
    try:
        sources = make_sources(matrix, files, scratch)
        where = make_where(args, view, files, sources, scratch)
        check_host_keys_enforced(where, matrix.clients, scratch)
        print(f"== {setting.label}", flush=True)
        run_setting(matrix, setting, where)
    finally:
        files.cleanup()


def describe_where(args: argparse.Namespace) -> str:
    if args.server is not None:
        return f"existing server {args.server[0]}:{args.server[1]}, no emulator"
    queue = f"queue {args.queue} B" if args.queue else "queue one BDP (at least 1 MiB)"
    return (
        "user-space link emulator (`python -m sshpipe.testing.linkemu`, its own process) "
        "in front of "
        f"one OpenSSH sshd with MaxSessions {args.max_sessions}; {queue}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_args(args, parser)
    clients = select_clients(args)
    if shutil.which("sftp") is None and any(c.kind == "sftp" for c in clients):
        parser.error("OpenSSH sftp not found on PATH")
    if (
        args.server is None
        and not (REPO_ROOT / "sshpipe" / "testing" / "linkemu" / "__main__.py").exists()
    ):
        parser.error("sshpipe/testing/linkemu is missing: the emulator is needed without --server")
    matrix = Matrix(
        clients=clients,
        directions=list(dict.fromkeys(args.directions)),
        settings=make_settings(args),
        reps=args.reps,
    )
    records: list[LinkRecord] = []
    errors: list[str] = []
    machine = machine_info()
    header = format_header(machine, matrix, describe_where(args))
    print(header + "\n", flush=True)
    try:
        with scratch_dir(args.workdir) as scratch:
            (scratch / "local").mkdir()
            (scratch / "logs").mkdir()
            if args.server is None:
                benchmark_emulated(args, matrix, records, scratch)
            else:
                benchmark_server(args, matrix, records, scratch)
    except BenchError as exc:
        errors.append(str(exc))
        print(f"\nbenchmark set-up FAILED: {exc}", file=sys.stderr)
    finally:
        # Partial results are still worth keeping after a crash or ^C.
        rows, setups = summarize(matrix)
        links = format_links(records)
        markdown = f"## SFTP over an emulated WAN: whole command\n\n{header}\n\n"
        markdown += format_tables(rows, setups, matrix)
        if links:
            markdown += f"\n\n### Emulator\n\n```\n{links}\n```"
        extra = {
            "mode": "emulator" if args.server is None else "server",
            "max_sessions": args.max_sessions if args.server is None else None,
            "queue_bytes": args.queue,
            "server": None if args.server is None else "{}:{}".format(*args.server),
            "quick": args.quick,
            "timeout_base_s": args.timeout_base,
            "timeout_rate_mb_per_s": args.timeout_rate,
            "links": [rec.__dict__ for rec in records],
            "errors": errors,
        }
        write_results(args.out, "wan", machine, matrix, rows, setups, markdown, extra)
    print("\n" + markdown)
    print(f"\nresults: {args.out / 'results.md'}, {args.out / 'results.json'}")
    return report_failures(matrix, records, errors)


def report_failures(matrix: Matrix, records: list[LinkRecord], errors: list[str]) -> int:
    failed = [s for s in matrix.samples if not s.ok]
    link_errors = [rec for rec in records if rec.error]
    if not (failed or link_errors or errors):
        return 0
    if failed:
        print(f"\n{len(failed)} run(s) FAILED:", file=sys.stderr)
    for s in failed:
        print(
            f"  {s.setting} rep {s.rep + 1} {s.client} {s.direction} "
            f"{size_label(s.size_bytes)}: {s.error}",
            file=sys.stderr,
        )
    for rec in link_errors:
        print(f"  {rec.label}: emulator: {rec.error}", file=sys.stderr)
    for error in errors:
        print(f"  set-up: {error}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
