#!/usr/bin/env python3
"""SFTP throughput against round-trip time: sshpipe vs OpenSSH sftp vs asyncssh over a slow link.

Starts one throwaway OpenSSH sshd (stock ``MaxSessions 10``) and, for every
(RTT, rate) setting, one user-space link emulator process
(``python -m sshpipe.linkemu``) in front of it. Every client connects to the
emulator's port. For each setting, client and direction it times a 1-byte
transfer (the set-up cost: process start, connect, authentication, open,
close) and a full transfer, rotating the client order every repetition, and
reports the rate net of set-up: size / (median wall - median set-up wall).
Every output is checked against its source's sha256.

With ``--server HOST:PORT`` it skips sshd and the emulator and measures one
existing server over whatever link lies between (e.g. kernel netem, see
docker-compose.yml).

Run from the repo root:  python benchmarks/bench_wan.py            (full matrix)
                         python benchmarks/bench_wan.py --quick    (smoke run)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    last_json_object,
)
from _wan_report import (
    SETUP_SIZE,
    WanRun,
    WanSample,
    format_header,
    format_links,
    format_table,
    report_sample,
    summarize,
    write_results,
)
from bench_loopback import (
    GET_NAME,
    MIB,
    PUT_NAME,
    REPO_ROOT,
    Client,
    Paths,
    _tail,
    build_argv,
    machine_info,
    parse_size,
    positive_int,
    remove_output,
    rotated,
    run_measured,
    scratch_dir,
    verify_file,
)

from sshpipe.testing.sshd import SSHServerInfo, openssh_server

# Run as a file, this directory is on sys.path (for bench_loopback, _wan_link and
# _wan_report); sshpipe itself must be installed (scripts/test.sh: pip install -e .).
BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
DEFAULT_JSON = RESULTS_DIR / "wan-latest.json"
QUICK_JSON = RESULTS_DIR / "wan-quick.json"
ALL_CLIENTS = ("sftp-default", "sftp-tuned", "asyncssh", "sshpipe")
ALL_DIRECTIONS = ("get", "put")
# Stock sshd's MaxSessions: the benchmark is about what a default server allows.
STOCK_MAX_SESSIONS = 10
DEFAULTS: dict[str, Any] = {
    "rtts": (20.0, 100.0, 300.0),
    "rates": (1000.0, 400.0),
    "size": 256 * MIB,
    "baseline_size": 64 * MIB,
    "reps": 3,
}
QUICK: dict[str, Any] = {
    "rtts": (20.0, 100.0),
    "rates": (1000.0,),
    "size": 64 * MIB,
    "baseline_size": 16 * MIB,
    "reps": 1,
}
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rtts", type=float_list, help="RTTs in ms (default 20,100,300)")
    parser.add_argument("--rates", type=float_list, help="link rates in Mbit/s (default 1000,400)")
    parser.add_argument(
        "--queue", type=parse_size, help="emulator queue in bytes (default: the emulator's own)"
    )
    parser.add_argument("--size", type=parse_size, help="sshpipe's file size (default 256M)")
    parser.add_argument(
        "--baseline-size",
        type=parse_size,
        help="file size for sftp-default, sftp-tuned and asyncssh (default 64M)",
    )
    parser.add_argument("--reps", type=positive_int, help="repetitions (default 3)")
    parser.add_argument(
        "--clients",
        type=name_list,
        default=list(ALL_CLIENTS),
        help=f"comma-separated subset of {','.join(ALL_CLIENTS)}",
    )
    parser.add_argument(
        "--directions", type=name_list, default=list(ALL_DIRECTIONS), help="get,put or one of them"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: rtts 20,100, rate 1000, sizes 64M/16M, 1 rep, results in "
        f"{QUICK_JSON.name} (explicit options still win)",
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
    parser.add_argument("--workdir", type=Path, help="parent of the scratch dir (default: temp)")
    parser.add_argument(
        "--json",
        type=Path,
        help=f"raw results (default {DEFAULT_JSON}); the table goes next to it as .txt",
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
    for key in ("size", "baseline_size", "reps"):
        if getattr(args, key) is None:
            setattr(args, key, preset[key])
    if args.json is None:
        args.json = QUICK_JSON if args.quick else DEFAULT_JSON
    unknown = [c for c in args.clients if c not in ALL_CLIENTS]
    if unknown or not args.clients:
        parser.error(f"--clients: choose from {','.join(ALL_CLIENTS)}")
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
    # "% of link" and the plot), they do not shape it.
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
        # --json after bench_loopback's -q: the stats object still prints.
        "sshpipe": Client("sshpipe", "sshpipe", ("--json",)),
    }
    return [available[name] for name in dict.fromkeys(args.clients)]


def make_links(args: argparse.Namespace) -> list[Link]:
    if args.server is not None:
        rtt = args.rtts[0] if args.rtts else None
        rate = args.rates[0] if args.rates else None
        described = rtt is not None and rate is not None
        default = f"{rtt:g} ms {rate:g} Mbit/s" if described else "{}:{}".format(*args.server)
        label = args.link_label or default
        return [Link(label=label, rtt_ms=rtt, rate_mbit=rate)]
    return [
        Link(label=f"{rtt:g} ms {rate:g} Mbit/s", rtt_ms=rtt, rate_mbit=rate)
        for rate in args.rates
        for rtt in args.rtts
    ]


# --------------------------------------------------------------------------- server-side files


def make_sources(run: WanRun, files: ServerFiles, scratch: Path) -> dict[int, Source]:
    sizes = sorted({SETUP_SIZE, *(run.size_for(c) for c in run.clients)})
    sources: dict[int, Source] = {}
    for size in sizes:
        print(f"writing {size} random bytes for the source ...", flush=True)
        sources[size] = files.create_source(size, f"source-{size}.bin", scratch)
    os.sync()
    return sources


# --------------------------------------------------------------------------- measuring


@dataclass
class Context:
    run: WanRun
    server: SSHServerInfo  # as the clients see it (the emulator's port)
    files: ServerFiles
    sources: dict[int, Source]
    local: Path
    logs: Path


def timeout_for(args: argparse.Namespace, size: int) -> float:
    return float(args.timeout_base + size / (args.timeout_rate * 1e6))


def run_sample(
    ctx: Context, link: Link, client: Client, direction: str, kind: str, rep: int, position: int
) -> WanSample:
    size = SETUP_SIZE if kind == "setup" else ctx.run.size_for(client)
    source = ctx.sources[size]
    get_output = ctx.local / GET_NAME
    put_output = ctx.files.path(PUT_NAME)
    paths = Paths(
        source=source.remote if direction == "get" else source.local,
        get_output=get_output,
        put_output=put_output,
        logs=ctx.logs,
    )
    remove_output(get_output)
    argv = build_argv(client, direction, ctx.server, paths)
    timeout = timeout_for(ctx.run.args, size)
    sample = WanSample(
        rep=rep, position=position, client=client.name, direction=direction, argv=argv,
        link=link.label, kind=kind, size_bytes=size, timeout_s=timeout,
    )  # fmt: skip
    slug = re.sub(r"[^\w.-]+", "_", link.label)
    log_path = ctx.logs / f"{slug}-{client.name}-{direction}-{kind}-rep{rep}.log"
    measured = run_measured(argv, log_path, timeout)
    sample.wall_s = measured.wall_s
    sample.cpu_s = measured.cpu_s
    sample.maxrss_kib = measured.maxrss_kib
    sample.exit_code = measured.exit_code
    if client.kind == "sshpipe":
        sample.sshpipe_stats = last_json_object(_read(log_path))
    sample.output_tail = "\n".join(
        line for line in _tail(log_path).splitlines() if not line.startswith("{")
    )
    if measured.timed_out:
        sample.error = f"killed after the {timeout:g} s timeout"
    elif measured.exit_code != 0:
        sample.error = f"exit code {measured.exit_code}"
    elif direction == "get":
        sample.error = verify_file(get_output, size, source.sha256)
    else:
        sample.error = ctx.files.verify(put_output, size, source.sha256)
    sample.ok = sample.error is None
    sample.mb_per_s = size / 1e6 / measured.wall_s if sample.ok else 0.0
    remove_output(get_output)
    if direction == "put":
        ctx.files.remove(put_output)
    return sample


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def run_link(ctx: Context, link: Link) -> None:
    run = ctx.run
    for rep in range(run.args.reps):
        for position, client in enumerate(rotated(run.clients, rep)):
            for direction in run.directions:
                # Set-up probe right before the transfer it is subtracted from.
                for kind in ("setup", "transfer"):
                    sample = run_sample(ctx, link, client, direction, kind, rep, position)
                    run.samples.append(sample)
                    report_sample(sample, run.args.reps)


def check_host_keys_enforced(ctx: Context, scratch: Path) -> None:
    """Every client must refuse the server when its key is not in known_hosts.

    Guards the benchmark's own plumbing: a wrong option that turned checking
    off would go unnoticed, since the right key is always offered.
    """
    empty = scratch / "known_hosts-empty"
    empty.write_text("")
    stranger = client_view(
        ctx.server, scratch, "empty", host=ctx.server.host, port=ctx.server.port,
        known_hosts=empty,
    )  # fmt: skip
    source = ctx.sources[SETUP_SIZE]
    output = ctx.local / "hostkey-check.bin"
    paths = Paths(source=source.remote, get_output=output, put_output=output, logs=ctx.logs)
    accepted = []
    for client in ctx.run.clients:
        argv = build_argv(client, "get", stranger, paths)
        log = ctx.logs / f"hostkey-check-{client.name}.log"
        measured = run_measured(argv, log, HOST_KEY_CHECK_TIMEOUT)
        if measured.exit_code == 0 or output.exists():
            accepted.append(client.name)
        output.unlink(missing_ok=True)
    if accepted:
        raise BenchError(f"host key checking is OFF for {accepted}: they accepted an unknown key")
    print(f"host keys: {len(ctx.run.clients)} client(s) refused an unknown key (good)\n")


# --------------------------------------------------------------------------- main


def benchmark_emulated(run: WanRun, scratch: Path, local: Path, logs: Path) -> None:
    args = run.args
    with openssh_server(scratch / "server", max_sessions=args.max_sessions) as srv:
        files = LocalServerFiles(srv.root)
        sources = make_sources(run, files, scratch)
        checked = False
        for link in run.links:
            record = LinkRecord(
                label=link.label, rtt_ms=link.rtt_ms, rate_mbit=link.rate_mbit,
                queue_bytes=args.queue,
            )  # fmt: skip
            run.links_done.append(record)
            with emulated_view(link, srv, args.queue, scratch, logs, record) as view:
                ctx = Context(run=run, server=view, files=files, sources=sources,
                              local=local, logs=logs)  # fmt: skip
                if not checked:
                    check_host_keys_enforced(ctx, scratch)
                    checked = True
                run_link(ctx, link)
            print(format_links([record]) + "\n", flush=True)


def benchmark_server(run: WanRun, scratch: Path, local: Path, logs: Path) -> None:
    args = run.args
    host, port = args.server
    user = args.user or os.environ.get("USER") or "root"
    key, kh = args.identity.resolve(), args.known_hosts.resolve()
    base = SSHServerInfo(
        host=host, port=port, user=user, client_key=key, known_hosts=kh,
        root=Path(args.remote_dir), ssh_config=Path(os.devnull), log_file=Path(os.devnull),
    )  # fmt: skip
    view = client_view(base, scratch, "server", host=host, port=port, known_hosts=kh)
    link = run.links[0]
    run.links_done.append(LinkRecord(label=link.label, rtt_ms=link.rtt_ms,
                                     rate_mbit=link.rate_mbit))  # fmt: skip
    files = RemoteServerFiles(view, args.remote_dir, logs)
    try:
        sources = make_sources(run, files, scratch)
        ctx = Context(run=run, server=view, files=files, sources=sources, local=local, logs=logs)
        check_host_keys_enforced(ctx, scratch)
        print(f"== {link.label}", flush=True)
        run_link(ctx, link)
    finally:
        files.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_args(args, parser)
    clients = select_clients(args)
    if shutil.which("sftp") is None and any(c.kind == "sftp" for c in clients):
        parser.error("OpenSSH sftp not found on PATH")
    if args.server is None and not (REPO_ROOT / "sshpipe" / "linkemu" / "__main__.py").exists():
        parser.error("sshpipe/linkemu is missing: the emulator is needed without --server")
    run = WanRun(
        args=args,
        clients=clients,
        directions=list(dict.fromkeys(args.directions)),
        links=make_links(args),
        mode="emulator" if args.server is None else "server",
    )
    machine = machine_info()
    print(format_header(machine, run) + "\n", flush=True)
    try:
        with scratch_dir(args.workdir) as scratch:
            local, logs = scratch / "local", scratch / "logs"
            local.mkdir()
            logs.mkdir()
            if run.mode == "emulator":
                benchmark_emulated(run, scratch, local, logs)
            else:
                benchmark_server(run, scratch, local, logs)
    except BenchError as exc:
        run.setup_errors.append(str(exc))
        print(f"\nbenchmark set-up FAILED: {exc}", file=sys.stderr)
    finally:
        # Partial results are still worth keeping after a crash or ^C.
        rows = summarize(run)
        text = "\n\n".join(
            part
            for part in (
                format_header(machine, run),
                format_table(rows),
                format_links(run.links_done),
            )
            if part
        )
        write_results(args.json, machine, run, rows, text)
    print("\n" + text)
    print(f"\nraw samples: {args.json}\ntable: {args.json.with_suffix('.txt')}")
    failed = [s for s in run.samples if not s.ok]
    link_errors = [rec for rec in run.links_done if rec.error]
    if failed or link_errors or run.setup_errors:
        print(f"\n{len(failed)} run(s) FAILED:" if failed else "", file=sys.stderr)
        for s in failed:
            print(
                f"  {s.link} rep {s.rep + 1} {s.client} {s.direction} {s.kind}: {s.error}",
                file=sys.stderr,
            )
        for rec in link_errors:
            print(f"  {rec.label}: emulator: {rec.error}", file=sys.stderr)
        for error in run.setup_errors:
            print(f"  set-up: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
