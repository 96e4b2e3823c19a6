"""The progress display on a terminal: rich's live bar, or the plain ``\\r`` line without rich.

Fed by the library's ``progress=`` callback (at most 10 reports a second,
one a second while nothing moves, and a final one), so the rate and the ETA
shown are the library's: averaged over a few seconds, resumed bytes left out,
a reconnect seen as a dip rather than a jump. rich is the ``cli`` extra's and
is imported here only when a display is drawn (stderr a terminal, not ``-q``
nor ``--json``); without it the one-line display of ``output`` is drawn.

Names come from the server: each is escaped (``core.text.printable``) and put
in a ``Text``, never read as rich markup. The live display draws only when a
report comes (no refresh thread: nothing is left drawing once the transfer
stops), and ``TERMINAL.end()`` stops it on every way out: the end, an error,
a Ctrl-C. Stopping shows the cursor again and ends the last frame's line.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..core.stats import Progress
from ..core.text import printable
from .output import TERMINAL, human_bytes, human_duration, progress_printer, show_progress

__all__ = ["progress_display"]

# The file name's share of the line: the rest is the bar and the numbers.
NAME_WIDTH = 32
BAR_WIDTH = 24
# A name narrower than this says nothing: on a narrow terminal it is left out.
NAME_AT_LEAST = 8


@contextmanager
def progress_display(
    args: argparse.Namespace, *, tree: bool
) -> Iterator[Callable[[Progress], None] | None]:
    """The ``progress=`` callback to hand the library (None: nothing to draw), stopped on exit."""
    if not show_progress(args):
        yield None
        return
    try:
        show: Callable[[Progress], None] = _RichDisplay(tree=tree)
    except ImportError:  # no cli extra: the plain line
        show = progress_printer(tree=tree)
    try:
        yield show
    finally:
        TERMINAL.end()


class _RichDisplay:
    """One transfer's live display: the current name, a bar, percent, bytes, rate, ETA."""

    def __init__(self, *, tree: bool) -> None:
        from rich.console import Console
        from rich.live import Live

        self._tree = tree
        # stderr as it is now: the live display swaps sys.stderr for a proxy
        # that prints log lines above the bar (redirect_stderr).
        console = Console(
            file=sys.stderr, highlight=False, markup=False, emoji=False, soft_wrap=True
        )
        self._console = console
        self._live: Any = Live(
            console=console,
            auto_refresh=False,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=True,
        )
        self._started = self._stopped = False
        self._name = ""  # the last file named: the final report names none

    def __call__(self, progress: Progress) -> None:
        if self._stopped:  # an error's line is out: a late report draws nothing more
            return
        frame = self._frame(progress)
        if not self._started:
            self._started = True
            self._live.update(frame)
            self._live.start(refresh=True)
            TERMINAL.attach(self._stop)
            return
        self._live.update(frame, refresh=True)

    def _stop(self) -> None:
        self._stopped = True
        self._live.stop()

    def _frame(self, progress: Progress) -> Any:
        """One line: ``name ━━━━╺━━━  42%  3/7 files  1.3/3.0 MiB  12.5 MB/s  ETA 0:03``."""
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        if progress.current:
            self._name = printable(progress.current[-1])
        known = progress.scan_done
        more = "" if known else "+"  # the totals grow while a tree is scanned
        done, total = progress.bytes_done, progress.bytes_total
        if progress.finished and known and total == 0:
            fraction = 1.0  # an empty file, or a tree of empty files, is all done
        else:
            fraction = min(1.0, done / total) if total else 0.0
        numbers = f"{math.floor(100 * fraction):3d}%  "
        if self._tree:
            numbers += f"{progress.files_done}/{progress.files_total}{more} files  "
        if known or self._tree:
            numbers += f"{human_bytes(done)}/{human_bytes(total)}{more}"
        else:  # a file whose size is not known yet
            numbers += human_bytes(done)
        numbers += f"  {_rate(progress.rate)}  {_when(progress)}"
        # Fixed widths, the name's from what is left: the bar does not move
        # from one frame to the next, and the numbers are never cut.
        room = self._console.width - len(numbers) - BAR_WIDTH - 2
        name_width = min(NAME_WIDTH, room) if room >= NAME_AT_LEAST else 0
        grid = Table.grid(padding=(0, 1))
        cells: list[Any] = []
        if name_width:
            grid.add_column(width=name_width, no_wrap=True, overflow="ellipsis")
            # Text, not markup: a name like "[bold]x" is shown as it is.
            cells.append(Text(_tail(self._name, name_width), no_wrap=True))
        grid.add_column(width=BAR_WIDTH)
        grid.add_column(no_wrap=True)
        cells += [
            ProgressBar(total=1.0, completed=fraction, width=BAR_WIDTH),
            Text(numbers, no_wrap=True),
        ]
        grid.add_row(*cells)
        return grid


def _tail(name: str, width: int) -> str:
    """The end of a long name, where a path's file name is: ``…logs/app.log``."""
    return name if len(name) <= width else "\u2026" + name[-(width - 1) :]


def _rate(rate: float) -> str:
    if not math.isfinite(rate) or rate <= 0:
        return "    - MB/s"
    return f"{rate / 1e6:5.1f} MB/s"


def _when(progress: Progress) -> str:
    """``ETA 0:42`` while it runs, ``in 0:42`` (the time taken) once it ended."""
    if progress.finished:
        return f"in {human_duration(progress.elapsed)}"
    eta = progress.eta
    if eta is None or not math.isfinite(eta) or eta < 0:
        return "ETA -:--"  # the totals still grow, or nothing moves
    return f"ETA {human_duration(eta)}"
