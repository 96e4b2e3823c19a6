"""What the command line prints: results, the progress line, errors, log lines.

Everything that reaches the terminal is escaped first (``core.text.printable``):
names and messages come from the server.
"""

from __future__ import annotations

import math
import os
import stat
import sys

from ..core.errors import IncompleteTransfer
from ..core.text import printable

# Not typing's: a usage error's line (``say``) loads no typing, argparse, json or stats.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from ..core.errors import SSHPipeError
    from ..core.stats import Progress, TransferStats, TreeStats

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "TERMINAL",
    "end_progress",
    "failed",
    "human_bytes",
    "human_duration",
    "progress_printer",
    "report",
    "report_failures",
    "report_tree",
    "say",
    "show_progress",
]

EXIT_INTERRUPTED = 130
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug of ours, still reported in one line
# Failures of a tree printed one by one; the rest are counted.
FAILURES_SHOWN = 100


class _Terminal:
    """What progress is on the terminal: a plain ``\\r`` line not ended yet, a live display.

    ``end`` finishes either, so what follows starts a line of its own: the
    transfer's end, an error's line, a Ctrl-C. Twice is fine.
    """

    def __init__(self) -> None:
        self.open = False  # a ``\\r`` line is drawn and not ended
        self._stop: Callable[[], None] | None = None

    def attach(self, stop: Callable[[], None]) -> None:
        """A live display is drawn; ``stop`` ends it (cursor shown, line ended)."""
        self._stop = stop

    def end(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()
        self.break_line()

    def break_line(self) -> None:
        """End a plain line (a log line follows); a live display prints above itself."""
        if self.open:
            self.open = False
            print(file=sys.stderr)


TERMINAL = _Terminal()


def say(message: str) -> None:
    """One line on stderr, escaped: it may quote what a server sent."""
    TERMINAL.end()  # after the progress display, not on it
    print(f"sshpipe: {printable(message)}", file=sys.stderr)


def failed(exc: SSHPipeError) -> int:
    """Say why the command failed, in one line; its exit code."""
    # A tree's failures were listed one a line already (report_failures).
    say(exc.summary if isinstance(exc, IncompleteTransfer) else str(exc))
    return exc.exit_code


def report(
    args: argparse.Namespace,
    source: str,
    target: str,
    stats: TransferStats,
    *,
    server: dict[str, object] | None = None,
) -> None:
    # A get into our own stdout (/dev/stdout, a pipe or the terminal): the
    # result goes beside the bytes, on stderr, not into them.
    out = sys.stderr if _is_stdout(target) else sys.stdout
    if args.json:
        import json  # only --json's result needs it

        shown = {"source": source, "target": target, **stats.as_dict(), "server": server or {}}
        print(json.dumps(shown), file=out)
    elif not args.quiet:
        print(
            f"{printable(source)} -> {printable(target)}: {human_bytes(stats.bytes)} "
            f"in {stats.seconds:.2f} s "
            f"({stats.throughput / 1e6:.1f} MB/s), {stats.requests} requests, "
            f"peak {stats.peak_requests_in_flight} in flight; {stats.channels} channel(s) on "
            f"{stats.connections} connection(s)"
            + (f" of {stats.workers} worker processes" if stats.workers > 1 else "")
            + f", RTT {stats.rtt_min * 1000:.1f} ms"
            + (f"; verified: {stats.verified}" if stats.verified != "none" else "")
            + ("; the source changed size while it was read" if stats.size_changed else "")
            # Auto is the default: the line names it only where it compressed
            # (why a file stayed plain: -v, and --json's "compression").
            + (
                f"; {stats.compression.summary()}"
                if stats.compression is not None and stats.compression.used
                else ""
            ),
            file=out,
        )


def _is_stdout(target: str) -> bool:
    """Whether ``target`` is the pipe or device this process's stdout writes to."""
    try:
        ours, theirs = os.fstat(sys.stdout.fileno()), os.stat(target)
    except (OSError, ValueError, AttributeError):  # no stdout, or no such file
        return False
    special = stat.S_ISFIFO(theirs.st_mode) or stat.S_ISCHR(theirs.st_mode)
    return special and (ours.st_dev, ours.st_ino) == (theirs.st_dev, theirs.st_ino)


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def show_progress(args: argparse.Namespace) -> bool:
    return not (args.quiet or args.json) and sys.stderr.isatty()


def progress_printer(*, tree: bool = True) -> Callable[[Progress], None]:
    """The ``\\r`` line redrawn at each report: a tree's files and bytes, or one file's bytes."""

    def show(progress: Progress) -> None:
        total = "" if progress.scan_done else "+"
        done = f"{human_bytes(progress.bytes_done)}/{human_bytes(progress.bytes_total)}{total}"
        if tree:
            done = f"{progress.files_done}/{progress.files_total}{total} files, {done}"
        elif not progress.scan_done:  # its size is not known yet
            done = human_bytes(progress.bytes_done)
        elif progress.bytes_total:
            done += f" ({100 * progress.bytes_done // progress.bytes_total}%)"
        eta = progress.eta
        left = ""
        if eta is not None and math.isfinite(eta) and eta > 0 and not progress.finished:
            left = f", {human_duration(eta)} left"
        TERMINAL.open = True
        print(
            f"\r{done}, {progress.rate / 1e6:.1f} MB/s{left}   ",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return show


def human_duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def end_progress(args: argparse.Namespace) -> None:
    """End the progress line, if one was drawn: what follows starts a line of its own."""
    TERMINAL.end()


def report_tree(
    args: argparse.Namespace,
    sources: list[str],
    target: str,
    stats: TreeStats,
    *,
    server: dict[str, object] | None = None,
) -> None:
    if args.json:
        import json  # only --json's result needs it

        shown = {"source": sources, "target": target, **stats.as_dict(), "server": server or {}}
        print(json.dumps(shown))
    elif not args.quiet:
        failed = f", {len(stats.failures)} failed" if stats.failures else ""
        skipped = f", {stats.skipped} skipped" if stats.skipped else ""
        if stats.resumed_files:
            skipped += f", {stats.resumed_files} already copied by an earlier run"
        if stats.verified != "none":
            skipped += f", verified: {stats.verified}"
        used = [report for _, report in stats.compression if report.used]
        if used:
            packed = sum(report.compressed_bytes for report in used)
            skipped += (
                f", {len(used)} of {len(stats.compression)} big files compressed"
                f" ({human_bytes(packed)})"
            )
        print(
            f"{printable(' '.join(sources))} -> {printable(target)}: {stats.files_done} files "
            f"({human_bytes(stats.bytes)}), {stats.directories} directories, "
            f"{stats.symlinks} symlinks{skipped}{failed} in {stats.seconds:.2f} s "
            f"({stats.files_per_second:.0f} files/s, {stats.throughput / 1e6:.1f} MB/s)"
        )


def report_failures(
    args: argparse.Namespace, exc: IncompleteTransfer, *, server: dict[str, object] | None = None
) -> None:
    """A tree that did not copy everything: its failures, one line each, then its stats."""
    end_progress(args)
    for failure in exc.failures[:FAILURES_SHOWN]:
        say(f"failed: {failure.error}")
    unlisted = len(exc.failures) - FAILURES_SHOWN + exc.stats.failures_unlisted
    if unlisted > 0:
        say(f"failed: {unlisted} more (--json lists the first 1,000)")
    report_tree(args, args.sources, args.target, exc.stats, server=server)
