#!/usr/bin/env python3
"""Compression auto against forced settings, whole command, over emulated links.

One throwaway OpenSSH sshd; per link one user-space emulator in front of it.
Clients: sshpipe with its defaults (``Compression auto``), sshpipe ``-o
Compression=no``, sshpipe ``-C``, OpenSSH ``sftp`` and ``sftp -C``, the order
rotated every repetition.
The four targets of ``Compression auto``:

- 20 Mbit/s, 40 ms, CSV-like text (zlib-6 ratio ~4.5): auto >= 2.5x
  Compression=no and within 10 % of -C, get and put;
- the same link, random data: auto within 10 % of Compression=no;
- 1 Gbit/s, 20 ms, text: auto within 10 % of the faster forced setting;
- a mixed tree (half text, half incompressible: ``.gz`` and random) at
  20 Mbit/s: auto faster than both forced settings.

Sizes (the full run: ~10 min on 2 quiet cores): 12 MiB text and 6 MiB random
at 20 Mbit/s (5 s and 2.5 s uncompressed; one setting, so one set-up round),
48 MiB text at 1 Gbit/s, a tree of 2 x 6 MiB text + 2 x 6 MiB incompressible
at 20 Mbit/s, every sshpipe client with ``--in-flight 24M`` there so its files
are big ones (past a sixth of the budget: the single-file engine, each file
decided alone; the default 64 MiB budget makes that 10.7 MiB). Every output
is checked against its source's sha256.

Run from the repo root:  python benchmarks/bench_compress.py [--reps 3] [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _bench_common import (
    MIB,
    Client,
    Paths,
    machine_info,
    positive_int,
    run_measured,
    scratch_dir,
    sftp_argv,
    size_label,
    sshpipe_argv,
)
from _wan_link import Link, LinkRecord, LocalServerFiles, Source, emulated_view, last_json_object
from _wan_report import format_links
from _whole import SETUP_SIZE, Matrix, Setting, Where, run_setting, summarize
from _whole_report import format_header, format_tables, write_results

from sshpipe.testing.sshd import SSHServerInfo, openssh_server

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = BENCH_DIR / "results" / "compress"
AUTO, OFF, FORCED = "sshpipe", "sshpipe:no", "sshpipe:-C"
CLIENTS = (
    Client(AUTO, "sshpipe", ("--json",)),  # the default: Compression auto
    Client(OFF, "sshpipe", ("--json", "-o", "Compression=no")),
    Client(FORCED, "sshpipe", ("--json", "-C")),
    Client("sftp-default", "sftp"),
    Client("sftp:-C", "sftp", ("-C",)),
)
THIN = (40.0, 20.0)  # ms, Mbit/s
FAT = (20.0, 1000.0)
TEXT = "CSV-like log lines (zlib-6 ratio ~4.5)"
TREE_FILE = 6 * MIB
# The tree's sshpipe clients: a budget that makes its 6 MiB files big ones.
TREE_IN_FLIGHT = ("--in-flight", "24M")


def text_bytes(size: int, seed: int) -> bytes:
    """Log lines as a web server's CSV: timestamps, hosts, paths, codes, sizes."""
    rng = random.Random(seed)
    paths = ["/api/v1/items", "/api/v1/users", "/static/app.js", "/health", "/api/v2/orders"]
    levels = ["INFO"] * 8 + ["WARN", "ERROR"]
    lines: list[str] = []
    total = at = 0
    while total < size:
        at += rng.randint(1, 900)
        line = (
            f"2026-12-02T{at // 3_600_000 % 24:02d}:{at // 60_000 % 60:02d}:"
            f"{at // 1000 % 60:02d}.{at % 1000:03d}Z,{rng.choice(levels)},"
            f"web{rng.randint(1, 12):02d},GET {rng.choice(paths)}/{rng.randint(1, 99999)},"
            f"{rng.choice((200, 200, 200, 200, 304, 404, 500))},{rng.randint(100, 9999)},"
            f"{rng.random():.3f}\n"
        )
        lines.append(line)
        total += len(line)
    return "".join(lines).encode()[:size]


def write_source(path: Path, data: bytes) -> Source:
    path.write_bytes(data)
    return Source(size=len(data), sha256=hashlib.sha256(data).hexdigest(), local=path, remote=path)


def random_bytes(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


# --------------------------------------------------------------------------- the tree


def make_tree(root: Path) -> dict[str, str]:
    """Half text, half incompressible (a .gz by its name, a random .bin by its sample)."""
    files = {
        "logs/a.csv": text_bytes(TREE_FILE, 11),
        "logs/b.log": text_bytes(TREE_FILE, 12),
        "media/c.gz": random_bytes(TREE_FILE, 13),
        "media/d.bin": random_bytes(TREE_FILE, 14),
    }
    digests: dict[str, str] = {}
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
        digests[name] = hashlib.sha256(data).hexdigest()
    return digests


def check_tree(root: Path, digests: dict[str, str]) -> str | None:
    for name, digest in digests.items():
        path = root / name
        if not path.is_file():
            return f"{path} missing"
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            return f"{path}: sha256 mismatch"
    return None


def tree_argv(client: Client, direction: str, srv: SSHServerInfo, paths: Paths) -> list[str]:
    if client.kind == "sftp":
        return sftp_argv(client, direction, srv, paths, recursive=True)
    recursive = Client(client.name, client.kind, ("-r", *TREE_IN_FLIGHT, *client.extra_args))
    return sshpipe_argv(recursive, direction, srv, paths)


def run_tree(
    view: SSHServerInfo,
    root: Path,
    scratch: Path,
    reps: int,
    clients: Sequence[Client] = CLIENTS,
    directions: Sequence[str] = ("get", "put"),
) -> list[dict[str, Any]]:
    source = root / "tree"
    source.mkdir()
    digests = make_tree(source)
    local_src = scratch / "tree-local"
    local_src.mkdir()
    make_tree(local_src)
    logs = scratch / "logs"
    samples: list[dict[str, Any]] = []
    for rep in range(reps):
        turn = rep % len(clients)
        order = [*clients[turn:], *clients[:turn]]
        for client in order:
            for direction in directions:
                out = scratch / "tree-out" if direction == "get" else root / "tree-out"
                paths = Paths(
                    source=source if direction == "get" else local_src,
                    get_output=out,
                    put_output=out,
                    logs=logs,
                )
                argv = tree_argv(client, direction, view, paths)
                log = logs / f"tree-{client.name.replace(':', '_')}-{direction}-{rep}.log"
                measured = run_measured(argv, log, 300.0)
                error = (
                    f"exit code {measured.exit_code}"
                    if measured.exit_code
                    else check_tree(out / "tree" if (out / "tree").is_dir() else out, digests)
                )
                stats = last_json_object(log.read_text(errors="replace"))
                used = None
                if stats is not None:
                    used = sum(1 for r in stats.get("compression", []) if r.get("used"))
                samples.append(
                    {
                        "client": client.name, "direction": direction, "rep": rep,
                        "wall_s": measured.wall_s, "cpu_s": measured.cpu_s, "error": error,
                        "compressed_files": used,
                    }
                )  # fmt: skip
                status = error or f"{measured.wall_s:6.2f} s"
                print(f"[tree rep {rep + 1}] {client.name:<12} {direction}: {status}", flush=True)
                _remove(out)
    return samples


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def tree_table(samples: list[dict[str, Any]]) -> str:
    size = 4 * TREE_FILE
    lines = [
        f"### mixed tree at {THIN[1]:g} Mbit/s, {THIN[0]:g} ms: 2 x {size_label(TREE_FILE)} "
        f"text + 2 x {size_label(TREE_FILE)} incompressible ({size_label(size)})",
        "",
        "| dir | client | whole s | MB/s | auto vs it | files compressed | ok/runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for direction in ("get", "put"):
        medians: dict[str, float] = {}
        for client in CLIENTS:
            walls = [
                s["wall_s"] for s in samples
                if s["client"] == client.name and s["direction"] == direction and not s["error"]
            ]  # fmt: skip
            if walls:
                medians[client.name] = statistics.median(walls)
        for client in CLIENTS:
            mine = [
                s for s in samples if s["client"] == client.name and s["direction"] == direction
            ]
            if not mine:
                continue  # not run (--clients, --dirs)
            ok = [s for s in mine if not s["error"]]
            whole = medians.get(client.name)
            auto = medians.get(AUTO)
            vs = f"{whole / auto:.2f}x" if whole and auto and client.name != AUTO else "–"
            used = {s["compressed_files"] for s in ok if s["compressed_files"] is not None}
            lines.append(
                f"| {direction} | {client.name} | {whole:.2f} | {size / 1e6 / whole:.1f} | {vs} | "
                f"{'/'.join(str(u) for u in sorted(used)) or '–'} | {len(ok)}/{len(mine)} |"
                if whole
                else f"| {direction} | {client.name} | – | – | – | – | 0/{len(mine)} |"
            )
    return "\n".join(lines)


# --------------------------------------------------------------------------- the targets


def targets_table(rows: list[Any], matrix: Matrix) -> str:
    """auto against the forced settings, per setting and direction (the brief's targets)."""
    lines = [
        "### Compression auto against the forced settings (whole-command MB/s, medians)",
        "",
        "| link | data | size | dir | auto | no | -C | sftp | sftp -C | auto/no | auto/-C "
        "| compressed? |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for setting in matrix.settings:
        for size in setting.sizes:
            for direction in matrix.directions:
                got = {
                    r.client: r.whole_mb_per_s for r in rows
                    if r.setting == setting.label and r.size_bytes == size
                    and r.direction == direction
                }  # fmt: skip
                used = _auto_used(matrix, setting.label, size, direction)

                def cell(name: str, got: dict[str, float | None] = got) -> str:
                    value = got.get(name)
                    return f"{value:.1f}" if value else "–"

                def ratio(name: str, got: dict[str, float | None] = got) -> str:
                    auto, other = got.get(AUTO), got.get(name)
                    return f"{auto / other:.2f}" if auto and other else "–"

                data = "random" if f"{size_label(size)} random" in setting.data else "text"
                lines.append(
                    f"| {setting.label} | {data} | {size_label(size)} | {direction} | "
                    f"{cell(AUTO)} | {cell(OFF)} | {cell(FORCED)} | "
                    f"{cell('sftp-default')} | {cell('sftp:-C')} | "
                    f"{ratio(OFF)} | {ratio(FORCED)} | {used} |"
                )
    return "\n".join(lines)


def _auto_used(matrix: Matrix, label: str, size: int, direction: str) -> str:
    seen = []
    for s in matrix.samples:
        if (s.client, s.setting, s.size_bytes, s.direction) == (AUTO, label, size, direction):
            report = (s.sshpipe_stats or {}).get("compression") or {}
            if report:
                seen.append("yes" if report.get("used") else "no")
    return "/".join(sorted(set(seen))) or "–"


# --------------------------------------------------------------------------- main


def _names(allowed: set[str]) -> Any:
    """An argparse type: a comma-separated subset of ``allowed``."""

    def parse(text: str) -> set[str]:
        names = {name.strip() for name in text.split(",") if name.strip()}
        unknown = names - allowed
        if unknown or not names:
            raise argparse.ArgumentTypeError(
                f"choose from {', '.join(sorted(allowed))} (got {text!r})"
            )
        return names

    return parse


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=positive_int, default=3, help="repetitions (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 rep, small sizes (smoke run)")
    parser.add_argument("--no-tree", dest="tree", action="store_false", help="skip the tree")
    parser.add_argument(
        "--links", type=_names({"thin", "fat", "tree"}), default={"thin", "fat", "tree"},
        help="parts to run, comma-separated: thin (20 Mbit/s), fat (1 Gbit/s), tree",
    )  # fmt: skip
    parser.add_argument(
        "--data",
        type=_names({"text", "random"}),
        default={"text", "random"},
        help="the thin link's sources to run: text, random",
    )
    parser.add_argument(
        "--dirs", type=_names({"get", "put"}), default={"get", "put"}, help="get, put or both"
    )
    parser.add_argument(
        "--clients", type=_names({c.name for c in CLIENTS}), default=None,
        help=f"clients to run (default all: {','.join(c.name for c in CLIENTS)})",
    )  # fmt: skip
    parser.add_argument("--workdir", type=Path, help="parent of the scratch dir")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    reps = 1 if args.quick else args.reps
    scale = 4 if args.quick else 1
    thin = f"{THIN[0]:g} ms RTT, {THIN[1]:g} Mbit/s"
    fat = f"{FAT[0]:g} ms RTT, {FAT[1]:g} Mbit/s"
    # Sources are per size: the thin link's random file is the smaller one.
    random_size, thin_text = 6 * MIB // scale, 12 * MIB // scale
    thin_sizes = tuple(
        size for size, kind in ((random_size, "random"), (thin_text, "text")) if kind in args.data
    )
    settings = []
    if "thin" in args.links and thin_sizes:
        settings.append(Setting(
            thin, *THIN, thin_sizes,
            data=f"{size_label(random_size)} random, {size_label(thin_text)} {TEXT}",
        ))  # fmt: skip
    if "fat" in args.links:
        settings.append(Setting(f"{fat}, text", *FAT, (48 * MIB // scale,), data=TEXT))
    clients = [c for c in CLIENTS if args.clients is None or c.name in args.clients]
    directions = [d for d in ("get", "put") if d in args.dirs]
    matrix = Matrix(clients=clients, directions=directions, settings=settings, reps=reps)
    machine = machine_info()
    header = format_header(
        machine, matrix, "user-space link emulator in front of one OpenSSH sshd (MaxSessions 10)"
    )
    print(header + "\n", flush=True)
    records: list[LinkRecord] = []
    tree_samples: list[dict[str, Any]] = []
    started = time.monotonic()
    with scratch_dir(args.workdir) as scratch:
        (scratch / "local").mkdir()
        (scratch / "logs").mkdir()
        with openssh_server(scratch / "server") as srv:
            files = LocalServerFiles(srv.root)
            for index, setting in enumerate(settings):
                sources = {SETUP_SIZE: write_source(srv.root / f"setup-{index}.bin", b"x")}
                for size in setting.sizes:
                    is_text = setting.data == TEXT or size != random_size
                    maker = text_bytes if is_text else random_bytes
                    path = srv.root / f"source-{index}-{size}"
                    sources[size] = write_source(path, maker(size, index))
                link = Link(label=setting.label, rtt_ms=setting.rtt_ms, rate_mbit=setting.rate_mbit)
                record = LinkRecord(label=link.label, rtt_ms=link.rtt_ms, rate_mbit=link.rate_mbit)
                records.append(record)
                with emulated_view(link, srv, None, scratch, scratch / "logs", record) as view:
                    where = Where(
                        server=view, files=files, sources=sources, local=scratch / "local",
                        logs=scratch / "logs", timeout=lambda size: 60 + size / 0.5e6,
                    )  # fmt: skip
                    run_setting(matrix, setting, where)
                for source in sources.values():
                    source.local.unlink(missing_ok=True)
            if args.tree and "tree" in args.links:
                link = Link(label=f"{thin}, mixed tree", rtt_ms=THIN[0], rate_mbit=THIN[1])
                record = LinkRecord(label=link.label, rtt_ms=link.rtt_ms, rate_mbit=link.rate_mbit)
                records.append(record)
                with emulated_view(link, srv, None, scratch, scratch / "logs", record) as view:
                    tree_samples = run_tree(view, srv.root, scratch, reps, clients, directions)
    rows, setups = summarize(matrix)
    markdown = f"## Compression auto: whole command\n\n{header}\n\n"
    markdown += targets_table(rows, matrix) + "\n\n"
    if tree_samples:
        markdown += tree_table(tree_samples) + "\n\n"
    markdown += format_tables(rows, setups, matrix)
    markdown += f"\n\n### Emulator\n\n```\n{format_links(records)}\n```"
    markdown += f"\n\nwhole run: {(time.monotonic() - started) / 60:.1f} min\n"
    extra = {"tree_samples": tree_samples, "links": [r.__dict__ for r in records]}
    write_results(args.out, "compress", machine, matrix, rows, setups, markdown, extra)
    print("\n" + markdown)
    failed = [s for s in matrix.samples if not s.ok] + [s for s in tree_samples if s["error"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
