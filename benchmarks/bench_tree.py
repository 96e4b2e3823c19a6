#!/usr/bin/env python3
"""Directory trees over a slow link: sshpipe get/put -r vs sftp -r, scp -r, scp -O -r, asyncssh.

Starts one throwaway OpenSSH sshd (stock ``MaxSessions 10``), writes the trees
once into its root (deterministic content from ``--seed``) and, for every RTT,
runs one user-space link emulator (``python -m sshpipe.testing.linkemu``) in front of
it. Every client copies every tree in both directions, each transfer its own
process, the client order rotated every repetition. sshpipe moves each tree
whole; the other clients pay several round trips per file, so they move the
first N files of the same shape (``--baseline-files``). Before a client's first
tree in a repetition it copies an empty directory (the set-up: process start,
connect, authentication, one listing), and rates are reported net of it.
Every copy is compared with its source tree (paths, sizes, sha256), then deleted.

Run from the repo root:  python benchmarks/bench_tree.py            (about 25 min)
                         python benchmarks/bench_tree.py --quick    (smoke run)
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _bench_common import (
    MIB,
    REPO_ROOT,
    Client,
    Paths,
    _tail,
    asyncssh_argv,
    machine_info,
    parse_size,
    positive_int,
    rotated,
    run_measured,
    scp_argv,
    scratch_dir,
    sftp_argv,
)
from _tree_files import (
    Tree,
    TreeSpec,
    compare_tree,
    layout,
    parse_tree_spec,
    remove_tree,
    write_tree,
)
from _tree_report import (
    PROBE,
    Progress,
    TreeRun,
    TreeSample,
    format_header,
    format_tables,
    report_sample,
    summarize,
    write_results,
)
from _wan_link import (
    BenchError,
    Link,
    LinkRecord,
    client_view,
    emulated_view,
    last_json_object,
)
from _wan_report import format_links
from bench_wan import STOCK_MAX_SESSIONS, float_list, name_list

from sshpipe.testing.sshd import SSHServerInfo, openssh_server

# Run as a file, this directory is on sys.path (for the other benchmark modules);
# sshpipe itself must be installed (scripts/test.sh: pip install -e .).
BENCH_DIR = Path(__file__).resolve().parent
KIB = 1 << 10
RESULTS_DIR = BENCH_DIR / "results"
DEFAULT_JSON = RESULTS_DIR / "tree-latest.json"
QUICK_JSON = RESULTS_DIR / "tree-quick.json"
CLIENTS = {
    "sftp-r": Client("sftp-r", "sftp"),
    "scp-r": Client("scp-r", "scp"),  # SFTP protocol, OpenSSH 9.x's default
    "scp-O-r": Client("scp-O-r", "scp", ("-O",)),  # the legacy scp/rcp protocol
    "asyncssh": Client("asyncssh", "asyncssh"),
    "sshpipe": Client("sshpipe", "sshpipe"),
    # What durability (on by default) and --verify cost, side by side with the default.
    "sshpipe-no-fsync": Client("sshpipe-no-fsync", "sshpipe", ("--no-fsync",)),
    "sshpipe-verify": Client("sshpipe-verify", "sshpipe", ("--verify",)),
}
ALL_DIRECTIONS = ("get", "put")
DEFAULTS: dict[str, Any] = {
    "rtt": (20.0, 100.0),
    "reps": 3,
    "trees": (
        TreeSpec("small", files=1000, file_size=16 * KIB, dirs=10),
        TreeSpec("tiny", files=10_000, file_size=KIB, dirs=100),
        TreeSpec(
            "mixed", files=1000, file_size=16 * KIB, dirs=10, large_files=4, large_size=64 * MIB
        ),
    ),
}
QUICK: dict[str, Any] = {
    "rtt": (20.0,),
    "reps": 1,
    "baseline_files": (30,),
    "trees": (
        TreeSpec("small", files=100, file_size=16 * KIB, dirs=10),
        TreeSpec("tiny", files=1000, file_size=KIB, dirs=100),
        TreeSpec(
            "mixed", files=100, file_size=16 * KIB, dirs=10, large_files=4, large_size=8 * MIB
        ),
    ),
}
# sftp -r get pays ~4 round trips per file (measured at 20 and 100 ms): this many
# files over RTT ms plus its set-up take it 8-10 s, the others 5-10 s, and the
# default run stays near 25 minutes.
BASELINE_FILES_X_RTT = 1800.0
MIN_BASELINE_FILES = 10
HOST_KEY_CHECK_TIMEOUT = 60.0
# For the progress estimate only, measured at 20 and 100 ms: round trips per file
# of each baseline (get and put averaged), and of a connection (connect,
# authenticate, list a directory, exit).
PER_FILE_RTTS = {"sftp-r": 3.5, "scp-r": 3.8, "scp-O-r": 2.0, "asyncssh": 3.0}
SETUP_RTTS = 20
# sshpipe's whole trees (10,000 files: 0.5-0.8 ms per file at 20 ms, 1.9-2.7 at 100 ms).
SSHPIPE_PER_FILE_S = 0.0003
SSHPIPE_PER_FILE_RTTS = 0.02
OPENSSH_WINDOW = 2 * MIB


# --------------------------------------------------------------------------- CLI


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 100,20: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers: {text!r}")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rtt", type=float_list, help="RTTs in ms (default 20,100)")
    parser.add_argument("--rate", type=float, default=1000.0, help="Mbit/s (default 1000)")
    parser.add_argument(
        "--queue", type=parse_size, help="emulator queue in bytes (default: the emulator's own)"
    )
    parser.add_argument(
        "--trees", type=name_list, help="which trees, comma-separated (default small,tiny,mixed)"
    )
    parser.add_argument(
        "--tree",
        type=parse_tree_spec,
        action="append",
        default=[],
        metavar="NAME=FILESxSIZE:DIRS[+LARGExSIZE]",
        help="change a tree's shape or add one, e.g. mixed=1000x16K:10+4x256M; may repeat",
    )
    parser.add_argument(
        "--baseline-files",
        type=int_list,
        metavar="N[,N...]",
        help="small files the non-sshpipe clients move per tree: one value, or one per RTT "
        f"(default {BASELINE_FILES_X_RTT:g} / RTT-ms, at least {MIN_BASELINE_FILES}: "
        "8-10 s of sftp -r)",
    )
    parser.add_argument("--reps", type=positive_int, help="repetitions (default 3)")
    parser.add_argument(
        "--clients",
        type=name_list,
        default=[name for name in CLIENTS if not name.startswith("sshpipe-")],
        help=f"comma-separated subset of {','.join(CLIENTS)} (default: all but the "
        "sshpipe-* variants)",
    )
    parser.add_argument(
        "--directions", type=name_list, default=list(ALL_DIRECTIONS), help="get,put or one of them"
    )
    parser.add_argument("--seed", type=int, default=1, help="content seed (default 1)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 20 ms, trees of 100/1000/100+4x8M files, baselines 30 files, 1 rep, "
        f"results in {QUICK_JSON.name} (explicit options still win)",
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
        "--timeout-rate", type=float, default=1.0, metavar="MB/S", help="plus bytes / this (1)"
    )
    parser.add_argument(
        "--timeout-files", type=float, default=1.0, metavar="FILES/S", help="plus files / this (1)"
    )
    parser.add_argument("--workdir", type=Path, help="parent of the scratch dir (default: temp)")
    parser.add_argument(
        "--json",
        type=Path,
        help=f"raw results (default {DEFAULT_JSON}); the table goes next to it as .txt",
    )
    return parser


def resolve_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[TreeSpec]:
    """Fill in the preset's defaults; return the selected trees."""
    preset = QUICK if args.quick else DEFAULTS
    for key in ("rtt", "reps", "baseline_files"):
        if getattr(args, key) is None:
            setattr(args, key, preset.get(key))
    if args.json is None:
        args.json = QUICK_JSON if args.quick else DEFAULT_JSON
    specs = {spec.name: spec for spec in preset["trees"]}
    added = [spec.name for spec in args.tree if spec.name not in specs]
    specs.update({spec.name: spec for spec in args.tree})
    names = args.trees or [*(s.name for s in preset["trees"]), *added]
    unknown = [name for name in names if name not in specs]
    if unknown or PROBE in names:
        parser.error(f"--trees: unknown {unknown or [PROBE]}; known: {','.join(specs)}")
    if any(c not in CLIENTS for c in args.clients) or not args.clients:
        parser.error(f"--clients: choose from {','.join(CLIENTS)}")
    if any(d not in ALL_DIRECTIONS for d in args.directions) or not args.directions:
        parser.error("--directions: get, put or get,put")
    if args.baseline_files is not None and len(args.baseline_files) not in (1, len(args.rtt)):
        parser.error("--baseline-files: one value, or one per --rtt")
    if min(args.timeout_base, args.timeout_rate, args.timeout_files, args.rate) <= 0:
        parser.error("--rate and the --timeout-* options must be positive")
    return [specs[name] for name in dict.fromkeys(names)]


def baseline_counts(args: argparse.Namespace, links: list[Link]) -> dict[str, int]:
    counts = {}
    for i, link in enumerate(links):
        assert link.rtt_ms is not None
        if args.baseline_files is None:
            counts[link.label] = max(MIN_BASELINE_FILES, round(BASELINE_FILES_X_RTT / link.rtt_ms))
        else:
            counts[link.label] = args.baseline_files[min(i, len(args.baseline_files) - 1)]
    return counts


# --------------------------------------------------------------------------- trees


def prepare_trees(run: TreeRun, root: Path) -> None:
    """Write every tree some client moves (whole or a subset), and the set-up tree."""
    # Empty: the set-up run pays start, connect and one listing, but no per-file
    # round trip, which belongs to what is measured.
    probe = TreeSpec(PROBE, files=0, file_size=0, dirs=1)
    manifest = write_tree(root / PROBE, probe, [], run.args.seed)
    run.trees[(PROBE, 0)] = Tree(label=PROBE, spec=probe, path=root / PROBE, manifest=manifest)
    wanted: dict[tuple[str, int], TreeSpec] = {}
    for spec in run.specs:
        for link in run.links:
            for client in run.clients:
                wanted[(spec.name, run.count_for(spec, link, client))] = spec
    for (name, count), spec in wanted.items():
        label = name if count == spec.files else f"{name}-first{count}"
        entries = layout(spec, count)
        size = sum(e.size for e in entries)
        print(f"writing tree {label}: {len(entries)} files, {size / 1e6:.1f} MB ...", flush=True)
        manifest = write_tree(root / label, spec, entries, run.args.seed)
        run.trees[(name, count)] = Tree(
            label=label, spec=spec, path=root / label, manifest=manifest
        )


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Job:
    link: Link
    rep: int
    position: int
    client: Client
    direction: str
    tree: Tree
    kind: str  # "setup" or "transfer"

    @property
    def estimate_s(self) -> float:
        return estimate(self.link, self.client, self.tree)


def plan_jobs(run: TreeRun) -> list[Job]:
    """Every run in order: per RTT, rep by rep."""
    return [job for link in run.links for rep in range(run.args.reps)
            for job in _plan_rep(run, link, rep)]  # fmt: skip


def _plan_rep(run: TreeRun, link: Link, rep: int) -> list[Job]:
    """Each tree through every client (rotated), a client's set-up probe right
    before its first tree of the rep."""
    probe = run.probe
    jobs: list[Job] = []
    probed: set[tuple[str, str]] = set()
    for spec in run.specs:
        for position, client in enumerate(rotated(run.clients, rep)):
            for direction in run.directions:
                if (client.name, direction) not in probed:
                    probed.add((client.name, direction))
                    jobs.append(Job(link, rep, position, client, direction, probe, "setup"))
                tree = run.tree_for(spec, link, client)
                jobs.append(Job(link, rep, position, client, direction, tree, "transfer"))
    return jobs


def estimate(link: Link, client: Client, tree: Tree) -> float:
    """Seconds a run should take, for the progress line (a model, not a measurement)."""
    assert link.rtt_ms is not None and link.rate_mb_per_s is not None
    rtt, rate = link.rtt_ms / 1000, link.rate_mb_per_s * 1e6
    seconds = 0.3 + SETUP_RTTS * rtt + (0.4 if client.kind in ("asyncssh", "sshpipe") else 0)
    if client.kind == "sshpipe":
        seconds += tree.bytes / rate + tree.files * (
            SSHPIPE_PER_FILE_S + SSHPIPE_PER_FILE_RTTS * rtt
        )
    else:
        window_rate = min(rate, OPENSSH_WINDOW / rtt)
        seconds += tree.files * PER_FILE_RTTS.get(client.name, 4.0) * rtt
        seconds += tree.bytes / window_rate
    return seconds + tree.bytes / 5e8 + tree.files * 2e-4  # verify, delete


# --------------------------------------------------------------------------- measuring


@dataclass
class Context:
    run: TreeRun
    server: SSHServerInfo  # as the clients see it (the emulator's port)
    local: Path  # get's destinations go here
    remote: Path  # put's, in the server's root
    logs: Path


def tree_argv(
    client: Client, direction: str, srv: SSHServerInfo, src: Path, dst: Path, logs: Path
) -> list[str]:
    """Copy the tree ``src`` to the new name ``dst`` (remote side: a path on ``srv``)."""
    paths = Paths(source=src, get_output=dst, put_output=dst, logs=logs)
    if client.kind == "sftp":
        return sftp_argv(client, direction, srv, paths, recursive=True)
    if client.kind == "asyncssh":
        return asyncssh_argv(direction, srv, paths, recursive=True)
    if client.kind == "scp":
        return scp_argv(client, direction, srv, src, dst, recursive=True)
    # The ssh_config names the port, user, key and known_hosts, as for sftp and scp.
    remote = f"{srv.host}:"
    operands = (
        [remote + str(src), str(dst)] if direction == "get" else [str(src), remote + str(dst)]
    )
    return [
        sys.executable, "-m", "sshpipe", direction, "-r", "-q", "--json",
        "-F", str(srv.ssh_config), *client.extra_args, *operands,
    ]  # fmt: skip


def timeout_for(args: argparse.Namespace, tree: Tree) -> float:
    return float(
        args.timeout_base + tree.bytes / (args.timeout_rate * 1e6) + tree.files / args.timeout_files
    )


def run_job(ctx: Context, job: Job) -> TreeSample:
    """Copy ``job.tree``, time it, check the copy, and delete it."""
    tree, client, direction = job.tree, job.client, job.direction
    dst = (ctx.local if direction == "get" else ctx.remote) / f"{tree.label}-{client.name}"
    remove_tree(dst)
    argv = tree_argv(client, direction, ctx.server, tree.path, dst, ctx.logs)
    sample = TreeSample(
        rep=job.rep, position=job.position, client=client.name, direction=direction, argv=argv,
        link=job.link.label, tree=tree.spec.name, moved=tree.label, kind=job.kind,
        files=tree.files, size_bytes=tree.bytes, timeout_s=timeout_for(ctx.run.args, tree),
    )  # fmt: skip
    name = f"{job.link.rtt_ms:g}ms-{tree.label}-{client.name}-{direction}-rep{job.rep}.log"
    measured = run_measured(argv, ctx.logs / name, sample.timeout_s)
    sample.wall_s, sample.cpu_s = measured.wall_s, measured.cpu_s
    sample.maxrss_kib, sample.exit_code = measured.maxrss_kib, measured.exit_code
    # sshpipe's --json object is kept whole (from the whole log), not as output.
    tail = _tail(ctx.logs / name)
    sample.output_tail = "\n".join(ln for ln in tail.splitlines() if not ln.startswith("{"))
    if client.kind == "sshpipe":
        sample.sshpipe_stats = last_json_object((ctx.logs / name).read_text(errors="replace"))
    if measured.timed_out:
        sample.error = f"killed after the {sample.timeout_s:g} s timeout"
    elif measured.exit_code != 0:
        sample.error = f"exit code {measured.exit_code}"
    else:
        sample.error = compare_tree(tree.manifest, dst)
    sample.ok = sample.error is None
    if sample.ok:
        sample.mb_per_s = tree.bytes / 1e6 / measured.wall_s
        sample.files_per_s = tree.files / measured.wall_s
        if client.kind == "sshpipe":
            sample.warning = check_sshpipe_stats(sample.sshpipe_stats, tree)
    remove_tree(dst)
    return sample


def check_sshpipe_stats(stats: dict[str, Any] | None, tree: Tree) -> str | None:
    """sshpipe's own account of a verified copy must agree with the tree."""
    if stats is None:
        return "no JSON object in sshpipe's --json output"
    expected = {
        "files": tree.files,
        "files_done": tree.files,
        "files_failed": 0,
        "bytes": tree.bytes,
    }
    wrong = [
        f"{k}={stats.get(k)!r} (expected {v})" for k, v in expected.items() if stats.get(k) != v
    ]
    return f"sshpipe --json says {', '.join(wrong)}" if wrong else None


def check_host_keys_enforced(ctx: Context, scratch: Path) -> None:
    """Every client must refuse the server when its key is not in known_hosts.

    Guards the benchmark's own plumbing, as in bench_wan.py: a wrong option that
    turned checking off would go unnoticed, since the right key is always offered.
    """
    empty = scratch / "known_hosts-empty"
    empty.write_text("")
    stranger = client_view(
        ctx.server, scratch, "empty", host=ctx.server.host, port=ctx.server.port, known_hosts=empty
    )
    probe = ctx.run.probe
    output = ctx.local / "hostkey-check"
    accepted = []
    for client in ctx.run.clients:
        argv = tree_argv(client, "get", stranger, probe.path, output, ctx.logs)
        measured = run_measured(
            argv, ctx.logs / f"hostkey-check-{client.name}.log", HOST_KEY_CHECK_TIMEOUT
        )
        if measured.exit_code == 0 or output.exists():
            accepted.append(client.name)
        remove_tree(output)
    if accepted:
        raise BenchError(f"host key checking is OFF for {accepted}: they accepted an unknown key")
    print(f"host keys: {len(ctx.run.clients)} client(s) refused an unknown key (good)\n")


# --------------------------------------------------------------------------- main


def benchmark(run: TreeRun, scratch: Path) -> None:
    args = run.args
    local, logs = scratch / "local", scratch / "logs"
    local.mkdir()
    logs.mkdir()
    with openssh_server(scratch / "server", max_sessions=args.max_sessions) as srv:
        prepare_trees(run, srv.root / "trees")
        remote = srv.root / "put"
        remote.mkdir()
        jobs = plan_jobs(run)
        progress = Progress([job.estimate_s for job in jobs])
        print(
            f"\n{len(jobs)} runs, estimated ~{sum(j.estimate_s for j in jobs) / 60:.0f} min "
            "(a model; the progress lines rescale it as runs finish)\n",
            flush=True,
        )
        for link in run.links:
            record = LinkRecord(
                label=link.label,
                rtt_ms=link.rtt_ms,
                rate_mbit=link.rate_mbit,
                queue_bytes=args.queue,
            )
            run.links_done.append(record)
            with emulated_view(link, srv, args.queue, scratch, logs, record) as view:
                ctx = Context(run=run, server=view, local=local, remote=remote, logs=logs)
                if link is run.links[0]:
                    check_host_keys_enforced(ctx, scratch)
                for job in (j for j in jobs if j.link is link):
                    sample = run_job(ctx, job)
                    run.samples.append(sample)
                    report_sample(sample, args.reps, progress.step(job.estimate_s))
            print(format_links([record]) + "\n", flush=True)


def report_failures(run: TreeRun) -> bool:
    """Print every failure and warning to stderr; True when there was any."""
    failed = [s for s in run.samples if not s.ok]
    warned = [s for s in run.samples if s.warning]
    link_errors = [rec for rec in run.links_done if rec.error]
    if failed:
        print(f"\n{len(failed)} run(s) FAILED:", file=sys.stderr)
    for s in failed:
        print(
            f"  {s.link} rep {s.rep + 1} {s.client} {s.direction} {s.moved}: {s.error}",
            file=sys.stderr,
        )
    for s in warned:
        print(
            f"  WARNING {s.link} rep {s.rep + 1} {s.client} {s.direction} {s.moved}: {s.warning}",
            file=sys.stderr,
        )
    for rec in link_errors:
        print(f"  {rec.label}: emulator: {rec.error}", file=sys.stderr)
    for error in run.setup_errors:
        print(f"  set-up: {error}", file=sys.stderr)
    return bool(failed or warned or link_errors or run.setup_errors)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    specs = resolve_args(args, parser)
    clients = [CLIENTS[name] for name in dict.fromkeys(args.clients)]
    for tool in {c.kind for c in clients} & {"sftp", "scp"}:
        if shutil.which(tool) is None:
            parser.error(f"OpenSSH {tool} not found on PATH")
    if not (REPO_ROOT / "sshpipe" / "testing" / "linkemu" / "__main__.py").exists():
        parser.error("sshpipe/testing/linkemu is missing: the emulator is needed")
    links = [
        Link(label=f"{rtt:g} ms {args.rate:g} Mbit/s", rtt_ms=rtt, rate_mbit=args.rate)
        for rtt in args.rtt
    ]
    run = TreeRun(
        args=args,
        clients=clients,
        directions=list(dict.fromkeys(args.directions)),
        links=links,
        specs=specs,
        baseline_files=baseline_counts(args, links),
    )
    machine = machine_info()
    print(format_header(machine, run) + "\n", flush=True)
    try:
        with scratch_dir(args.workdir) as scratch:
            benchmark(run, scratch)
    except BenchError as exc:
        run.setup_errors.append(str(exc))
        print(f"\nbenchmark set-up FAILED: {exc}", file=sys.stderr)
    finally:
        # Partial results are still worth keeping after a crash or ^C.
        rows = summarize(run)
        parts = (
            format_header(machine, run),
            format_tables(run, rows),
            format_links(run.links_done),
        )
        text = "\n\n".join(part for part in parts if part)
        write_results(args.json, machine, run, rows, text)
    print("\n" + text)
    print(f"\nraw samples: {args.json}\ntable: {args.json.with_suffix('.txt')}")
    return 1 if report_failures(run) else 0


if __name__ == "__main__":
    sys.exit(main())
