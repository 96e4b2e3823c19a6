"""Many clients against strict servers: sshd with MaxSessions and MaxStartups set low (issue 40).

Each mode starts its own sshd on 127.0.0.1 with the limits it names, writes its
files into the server's root, runs the clients at once and checks every result
(sha256 of each download, sums of each frame against the same computed locally):

``gets``  50 concurrent API gets (``asyncio.gather`` of ``Client.get`` on one
          ``sshpipe.connect`` client) of 50 files of 1 MiB, against
          ``MaxSessions 1`` and then ``MaxSessions 2``.
``cli``   16 concurrent ``python -m sshpipe get`` processes (default retries) of
          16 files of 1 MiB, against ``MaxStartups 2:30:4``.
``dask``  a ``distributed.LocalCluster`` of 8 worker processes x 4 threads against
          ``MaxStartups 2`` + ``MaxSessions 2``: ``dd.read_csv`` sum (16 files of
          ~1 MiB), ``dd.read_parquet`` column sum (16 files), and
          ``db.from_sequence(paths).map(download)`` (32 files of 1 MiB, each through
          the filesystem's ``get``); ``--runs`` times each, a fresh cluster each
          time (cold connections, the burst a cluster makes). ``--client sshfs``
          runs the same through fsspec's asyncssh-based ``ssh://`` (run this script
          with a Python that has sshfs; it is in the ``bench`` extra).
``all``   gets, cli and dask.

The table: target, the server's limits, succeeded/total, the errors by type
(count, exception type and the first line of its message), wall time, what
sshd logged as refused (connections dropped past MaxStartups; sessions past
MaxSessions), and the machine (CPUs, load average at the start of the row).

Usage: python benchmarks/strict_servers.py {gets,cli,dask,all} [--runs 3]
       [--client sshpipe|sshfs] [--workdir ../bench-scratch] [--keep]
Exits 1 when anything failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _bench_common import REPO_ROOT, machine_info, sha256_file, write_random_file

import sshpipe
from sshpipe.testing.embedded import cli_options
from sshpipe.testing.sshd import SSHServerInfo, openssh_server

MIB = 1 << 20
API_GETS = 50
API_SESSIONS = (1, 2)
CLI_GETS = 16
CLI_STARTUPS = "2:30:4"
DASK_WORKERS = 8
DASK_THREADS = 4
DASK_SESSIONS = 2
DASK_STARTUPS = "2"
CSV_FILES = 16
CSV_ROWS = 28_000  # ~1 MiB of text per file
PARQUET_FILES = 16
PARQUET_ROWS = 100_000
BAG_FILES = 32
WORKLOADS = ("csv", "parquet", "bag")
DEFAULT_WORKDIR = REPO_ROOT.parent / "bench-scratch"
ERROR_LINE = 140  # characters of an error's first line kept in the table


@dataclass
class Row:
    target: str
    limits: str
    total: int
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    refused: str = ""
    machine: str = ""

    @property
    def succeeded(self) -> int:
        return self.total - sum(self.errors.values())


def _describe(exc: BaseException) -> str:
    """The error's type and the first line of its message, as the table shows it."""
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    return f"{type(exc).__name__}: {first[:ERROR_LINE]}"


def _load() -> str:
    return f"{len(os.sched_getaffinity(0))} CPU, load {os.getloadavg()[0]:.2f}"


def _refusals(text: str) -> str:
    """What sshd's log (``text``) says it turned away."""
    startups = text.count("past MaxStartups")
    sessions = text.count("no more sessions")  # session.c, past MaxSessions
    return f"{startups} start-ups, {sessions} sessions"


@contextlib.contextmanager
def _timed(row: Row) -> Iterator[None]:
    row.machine = _load()
    started = time.monotonic()
    try:
        yield
    finally:
        row.wall_s = time.monotonic() - started


def _client(srv: SSHServerInfo) -> sshpipe.Client:
    return sshpipe.connect(
        f"{srv.user}@{srv.host}",
        port=srv.port,
        identity_files=[str(srv.client_key)],
        known_hosts=[str(srv.known_hosts)],
        ssh_config=[],
    )


def _sources(root: Path, count: int, size: int) -> list[tuple[Path, str]]:
    """``count`` random files of ``size`` bytes under ``root``, with their sha256."""
    root.mkdir(parents=True, exist_ok=True)
    return [
        (root / f"f{i:02d}.bin", write_random_file(root / f"f{i:02d}.bin", size))
        for i in range(count)
    ]


# --------------------------------------------------------------------------- gets


async def _api_gets(srv: SSHServerInfo, sources: list[tuple[Path, str]], out: Path) -> Counter[str]:
    errors: Counter[str] = Counter()
    try:
        async with _client(srv) as client:
            results = await asyncio.gather(
                *(client.get(str(src), str(out / src.name)) for src, _ in sources),
                return_exceptions=True,
            )
    except Exception as exc:  # the client's connect or close: every get counts as lost
        errors[_describe(exc)] += len(sources)
        return errors
    for (src, digest), result in zip(sources, results, strict=True):
        if isinstance(result, BaseException):
            errors[_describe(result)] += 1
        elif sha256_file(out / src.name) != digest:
            errors["content differs"] += 1
    return errors


def run_gets(scratch: Path) -> list[Row]:
    rows = []
    for sessions in API_SESSIONS:
        with openssh_server(scratch / f"sshd-sessions{sessions}", max_sessions=sessions) as srv:
            sources = _sources(srv.root / "gets", API_GETS, MIB)
            out = scratch / f"gets-out{sessions}"
            out.mkdir()
            row = Row(f"{API_GETS} API gets, one client", f"MaxSessions {sessions}", API_GETS)
            with _timed(row):
                row.errors = asyncio.run(_api_gets(srv, sources, out))
            row.refused = _refusals(srv.log_file.read_text(errors="replace"))
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- cli


def run_cli(scratch: Path) -> list[Row]:
    with openssh_server(scratch / "sshd-cli", max_startups=CLI_STARTUPS) as srv:
        sources = _sources(srv.root / "cli", CLI_GETS, MIB)
        out = scratch / "cli-out"
        out.mkdir()
        options = [*cli_options(srv.port, srv.client_key, srv.known_hosts), "-o", "Compression=no"]
        row = Row(f"{CLI_GETS} CLI gets, processes", f"MaxStartups {CLI_STARTUPS}", CLI_GETS)
        with _timed(row):
            procs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "sshpipe",
                        "-q",
                        *options,
                        "get",
                        f"{srv.user}@{srv.host}:{src}",
                        str(out / src.name),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for src, _ in sources
            ]
            finished = [(proc, proc.communicate(timeout=300)[1]) for proc in procs]
        for (src, digest), (proc, stderr) in zip(sources, finished, strict=True):
            if proc.returncode != 0:
                lines = stderr.strip().splitlines()
                first = lines[0][:ERROR_LINE] if lines else "(nothing on stderr)"
                row.errors[f"exit {proc.returncode}: {first}"] += 1
            elif sha256_file(out / src.name) != digest:
                row.errors["content differs"] += 1
        row.refused = _refusals(srv.log_file.read_text(errors="replace"))
    return [row]


# --------------------------------------------------------------------------- dask


def _filesystem_options(client: str, srv: SSHServerInfo) -> tuple[str, dict[str, Any]]:
    """The URL scheme and the storage options that reach ``srv`` through ``client``."""
    if client == "sshpipe":
        return "sshpipe", {
            "port": srv.port,
            "username": srv.user,
            "identity_files": [str(srv.client_key)],
            "known_hosts": [str(srv.known_hosts)],
            "ssh_config": [],
        }
    return "ssh", {
        "port": srv.port,
        "username": srv.user,
        "client_keys": [str(srv.client_key)],
        "known_hosts": str(srv.known_hosts),
    }


def _dask_data(root: Path) -> dict[str, Any]:
    """The server's files for the three workloads, and what a correct run computes."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(40)
    (root / "csv").mkdir(parents=True)
    (root / "parquet").mkdir()
    csv_sum = 0.0
    for i in range(CSV_FILES):
        frame = pd.DataFrame(
            {
                "key": rng.integers(0, 1000, CSV_ROWS),
                "value": rng.normal(size=CSV_ROWS),
                "label": rng.choice(["alpha", "beta", "gamma"], CSV_ROWS),
            }
        )
        frame.to_csv(root / "csv" / f"part{i:02d}.csv", index=False)
        # The sum as the text round trip gives it, file by file as Dask adds it.
        csv_sum += float(pd.read_csv(root / "csv" / f"part{i:02d}.csv")["value"].sum())
    parquet_sum = 0.0
    for i in range(PARQUET_FILES):
        frame = pd.DataFrame({f"c{j}": rng.normal(size=PARQUET_ROWS) for j in range(4)})
        frame.to_parquet(root / "parquet" / f"part{i:02d}.parquet", row_group_size=25_000)
        parquet_sum += float(frame["c2"].sum())
    bag = _sources(root / "bag", BAG_FILES, MIB)
    return {"csv_sum": csv_sum, "parquet_sum": parquet_sum, "bag": bag}


def _download(pair: tuple[str, str], fs: Any) -> str:
    """One bag element: the remote file to a local path through ``fs``; its sha256."""
    import hashlib

    remote, local = pair
    fs.get(remote, local)
    with open(local, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _close_to(got: float, want: float) -> bool:
    return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-6)


def _workload(
    name: str,
    scheme: str,
    host: str,
    root: Path,
    options: dict[str, Any],
    data: dict[str, Any],
    out: Path,
) -> Callable[[], str | None]:
    """The workload as a call that computes on the cluster: None when right, else what is wrong."""
    import dask.bag as db
    import dask.dataframe as dd
    import fsspec

    if name == "csv":

        def csv() -> str | None:
            frame = dd.read_csv(f"{scheme}://{host}{root}/csv/*.csv", storage_options=options)
            got = float(frame["value"].sum().compute())
            return None if _close_to(got, data["csv_sum"]) else f"sum {got} != {data['csv_sum']}"

        return csv
    if name == "parquet":

        def parquet() -> str | None:
            frame = dd.read_parquet(
                f"{scheme}://{host}{root}/parquet/", columns=["c2"], storage_options=options
            )
            got = float(frame["c2"].sum().compute())
            want = data["parquet_sum"]
            return None if _close_to(got, want) else f"sum {got} != {want}"

        return parquet

    def bag() -> str | None:
        fs = fsspec.filesystem(scheme, host=host, **options)
        pairs = [(str(src), str(out / src.name)) for src, _ in data["bag"]]
        digests = db.from_sequence(pairs, npartitions=len(pairs)).map(_download, fs=fs).compute()
        wrong = sum(got != want for got, (_, want) in zip(digests, data["bag"], strict=True))
        return None if wrong == 0 else f"{wrong} of {len(pairs)} files differ"

    return bag


def run_dask(
    scratch: Path,
    client: str,
    runs: int,
    timeout: float,
    workers: int,
    threads: int,
    workloads: Sequence[str],
) -> list[Row]:
    import distributed

    with openssh_server(
        scratch / "sshd-dask", max_sessions=DASK_SESSIONS, max_startups=DASK_STARTUPS
    ) as srv:
        data = _dask_data(srv.root / "dask")
        scheme, options = _filesystem_options(client, srv)
        limits = f"MaxStartups {DASK_STARTUPS}, MaxSessions {DASK_SESSIONS}"
        rows = []
        for name in workloads:
            row = Row(f"Dask {name}, {client}, {workers}x{threads}", limits, runs)
            logged_before = srv.log_file.read_text(errors="replace")
            with _timed(row):
                for run in range(runs):
                    out = scratch / f"dask-{name}-{run}"
                    out.mkdir()
                    compute = _workload(
                        name, scheme, srv.host, srv.root / "dask", options, data, out
                    )
                    with (
                        distributed.LocalCluster(
                            n_workers=workers,
                            threads_per_worker=threads,
                            processes=True,
                            dashboard_address=None,
                            silence_logs=50,
                        ) as cluster,
                        distributed.Client(cluster),
                    ):
                        try:
                            wrong = _within(compute, timeout)
                        except Exception as exc:
                            row.errors[_describe(exc)] += 1
                        else:
                            if wrong is not None:
                                row.errors[f"wrong result: {wrong}"] += 1
                    ok = run + 1 - sum(row.errors.values())
                    print(f"  {row.target}: {ok} of {run + 1} runs right", flush=True)
            logged = srv.log_file.read_text(errors="replace")[len(logged_before) :]
            row.refused = _refusals(logged)
            rows.append(row)
    return rows


def _within(compute: Callable[[], str | None], timeout: float) -> str | None:
    """``compute()`` in a thread, given up after ``timeout`` seconds (a hung cluster)."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        return pool.submit(compute).result(timeout=timeout)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


# --------------------------------------------------------------------------- report


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| target | server limits | succeeded | errors by type | wall s | sshd refused | machine |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        errors = "; ".join(f"{n}x {text}" for text, n in row.errors.most_common()) or "–"
        errors = errors.replace("|", "\\|")
        lines.append(
            f"| {row.target} | {row.limits} | {row.succeeded}/{row.total} | {errors} "
            f"| {row.wall_s:.1f} | {row.refused} | {row.machine} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("gets", "cli", "dask", "all"))
    parser.add_argument("--runs", type=int, default=3, help="Dask runs of each workload")
    parser.add_argument("--client", choices=("sshpipe", "sshfs"), default="sshpipe")
    parser.add_argument("--workers", type=int, default=DASK_WORKERS, help="Dask worker processes")
    parser.add_argument("--threads", type=int, default=DASK_THREADS, help="threads per worker")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="Dask's, of those")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per Dask run")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=DEFAULT_WORKDIR,
        help=f"parent of the scratch dir, on the checkout's disk (default {DEFAULT_WORKDIR})",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (sshd.log)")
    args = parser.parse_args(argv)
    machine = machine_info()
    print("\n".join(f"{key}: {value}" for key, value in machine.items()), flush=True)
    args.workdir.mkdir(parents=True, exist_ok=True)
    scratch = Path(args.workdir) / f"strict-{os.getpid()}"
    scratch.mkdir()
    rows: list[Row] = []
    try:
        if args.mode in ("gets", "all"):
            rows += run_gets(scratch)
        if args.mode in ("cli", "all"):
            rows += run_cli(scratch)
        if args.mode in ("dask", "all"):
            workloads = [w for w in args.workloads.split(",") if w]
            if unknown := set(workloads) - set(WORKLOADS):
                parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")
            rows += run_dask(
                scratch, args.client, args.runs, args.timeout, args.workers, args.threads, workloads
            )
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    print(table(rows))
    return 0 if all(not row.errors for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
