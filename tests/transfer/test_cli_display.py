"""The live progress frame, rendered off a terminal: its numbers, its guards, its escaping."""

from __future__ import annotations

import io
import math

import pytest

from sshpipe import Progress
from sshpipe.cli import display
from sshpipe.cli.display import _RichDisplay


def _line(progress: Progress, *, width: int = 120, tree: bool = False) -> str:
    from rich.console import Console

    shown = _RichDisplay(tree=tree)
    shown._console = Console(file=io.StringIO(), width=width)
    out = Console(file=io.StringIO(), width=width, color_system=None, soft_wrap=True)
    out.print(shown._frame(progress))
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert text.count("\n") == 1, repr(text)  # one line, whatever the width
    return str(text.rstrip("\n"))


def _progress(**fields: object) -> Progress:
    base: dict[str, object] = {
        "files_done": 0,
        "files_total": 1,
        "bytes_done": 512 * 1024,
        "bytes_total": 2 * 1024 * 1024,
        "scan_done": True,
        "rate": 2.5e6,
        "eta": 0.6,
        "current": ("/srv/data/file.bin",),
    }
    return Progress(**{**base, **fields})  # type: ignore[arg-type]


def test_a_file_shows_percent_bytes_rate_and_eta() -> None:
    line = _line(_progress())
    assert line.startswith("/srv/data/file.bin ")
    assert "25%  512.0 KiB/2.0 MiB    2.5 MB/s  ETA 0:01" in line


@pytest.mark.parametrize("eta", [None, -3.0, math.inf, math.nan])
def test_an_eta_not_known_or_not_sane_is_shown_as_unknown(eta: float | None) -> None:
    assert _line(_progress(eta=eta)).endswith("ETA -:--")


@pytest.mark.parametrize("rate", [0.0, -1.0, math.inf, math.nan])
def test_a_rate_not_sane_is_a_dash(rate: float) -> None:
    assert "    - MB/s" in _line(_progress(rate=rate))


def test_the_end_shows_the_time_taken_and_an_empty_file_is_all_done() -> None:
    done = _progress(bytes_done=0, bytes_total=0, finished=True, elapsed=62.4, current=())
    line = _line(done)
    assert "100%" in line and line.endswith("in 1:02")


def test_a_size_not_known_yet_shows_the_bytes_alone() -> None:
    line = _line(_progress(scan_done=False, bytes_total=0, eta=None))
    assert "  0%  512.0 KiB    2.5 MB/s" in line


def test_a_tree_counts_files_and_marks_growing_totals() -> None:
    line = _line(_progress(files_done=3, files_total=7, scan_done=False), tree=True)
    assert "3/7+ files  512.0 KiB/2.0 MiB+" in line


def test_a_hostile_name_is_escaped_and_never_read_as_markup() -> None:
    line = _line(_progress(current=("[bold]x\x1b[31m\r.bin",)))
    assert line.startswith("[bold]x\\x1b[31m\\x0d.bin ")


def test_a_long_name_keeps_its_end_and_a_narrow_terminal_drops_it() -> None:
    name = "/very/long/directory/name/that/goes/on/and/on/report-2026.csv"
    line = _line(_progress(current=(name,)))
    assert line.startswith("\u2026") and "report-2026.csv " in line
    assert len(line.split(" ")[0]) == display.NAME_WIDTH
    narrow = _line(_progress(current=(name,)), width=70)
    assert "report" not in narrow and "25%" in narrow and "ETA 0:01" in narrow
