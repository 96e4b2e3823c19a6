"""The parquet read-ahead of ``sshpipe://`` files (fsspec/_parquet.py), against sshd.

``pq.read_table`` of 2 columns of a many-row-group file asks the server a few
times instead of once per column chunk, and gives the local read's table;
files that are not parquet, or only end like one, read as with the read-ahead
off; the bytes read ahead stay under the cap.
"""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fsspec.asyn import sync

from sshpipe.core.parquetplan import Chunk
from sshpipe.fsspec import SSHPipeFileSystem
from sshpipe.fsspec._file import SSHPipeFile
from sshpipe.fsspec._parquet import Layouts
from sshpipe.testing.sshd import SSHServerInfo
from tests.support.fresh import run_fresh
from tests.support.fsspecfs import opened, sshpipe_fs, storage_options

__all__ = ["opened", "sshpipe_fs"]  # fixtures

ROW_GROUPS = 8
COLUMNS = [f"c{i}" for i in range(10)]


@pytest.fixture
def here(openssh: SSHServerInfo, tmp_path: Path) -> Path:
    root = openssh.root / f"parquet-{tmp_path.name}"
    root.mkdir()
    return root


@pytest.fixture
def files(monkeypatch: pytest.MonkeyPatch) -> list[SSHPipeFile]:
    """Every file the filesystem opens (pyarrow's too), to read its counters after."""
    made: list[SSHPipeFile] = []
    original = SSHPipeFile.__init__

    def recording(self: SSHPipeFile, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(SSHPipeFile, "__init__", recording)
    return made


@pytest.fixture
def no_prefetch(sshpipe_fs: SSHPipeFileSystem) -> Iterator[SSHPipeFileSystem]:
    """The session's filesystem with the read-ahead off (its own setting put back after)."""
    sshpipe_fs.parquet_prefetch = 0
    try:
        yield sshpipe_fs
    finally:
        del sshpipe_fs.parquet_prefetch  # the class's default again


def _wide(path: Path, rows_per_group: int, columns: list[str] = COLUMNS) -> pd.DataFrame:
    rng = np.random.default_rng(17)
    frame = pd.DataFrame({c: rng.normal(size=rows_per_group * ROW_GROUPS) for c in columns})
    frame.to_parquet(path, row_group_size=rows_per_group, compression=None)
    assert pq.ParquetFile(path).metadata.num_row_groups == ROW_GROUPS
    return frame


@pytest.mark.parametrize("pre_buffer", [True, False])
def test_read_table_of_two_columns_asks_a_few_times_not_per_chunk(
    sshpipe_fs: SSHPipeFileSystem, here: Path, files: list[SSHPipeFile], pre_buffer: bool
) -> None:
    path = here / "wide.parquet"
    frame = _wide(path, 20_000)
    table = pq.read_table(
        str(path), columns=["c3", "c7"], filesystem=sshpipe_fs, pre_buffer=pre_buffer
    )
    assert table.equals(pq.read_table(path, columns=["c3", "c7"]))
    pd.testing.assert_frame_equal(table.to_pandas(), frame[["c3", "c7"]])
    # pyarrow reads the footer through one open, the chunks through another
    # (which finds the footer's chunks remembered by the filesystem).
    fetches, batches, served, asked = _totals(files)
    # The footer, the first chunk of each column from the server; one batch for
    # each column's other 7 chunks, which serve the other 14 reads.
    assert fetches <= 3, fetches
    assert batches == 2
    assert served == 2 * (ROW_GROUPS - 1)
    chunk = 20_000 * 8
    assert asked < 2 * ROW_GROUPS * chunk * 1.1  # the two columns, nothing more
    assert files[-1].prefetch_stats is not None
    assert files[-1].prefetch_stats.columns == [3, 7]


def _totals(files: list[SSHPipeFile]) -> tuple[int, int, int, int]:
    """Server reads, batches, reads served from them, bytes asked: all opens together."""
    stats = [f.prefetch_stats for f in files if f.prefetch_stats is not None]
    return (
        sum(f.fetches for f in files),
        sum(s.batches for s in stats),
        sum(s.served for s in stats),
        sum(s.asked for s in stats),
    )


def test_without_the_prefetch_each_chunk_is_a_round_trip(
    no_prefetch: SSHPipeFileSystem, here: Path, files: list[SSHPipeFile]
) -> None:
    """The count above is the prefetch's doing: off, every chunk goes to the server."""
    path = here / "wide.parquet"
    _wide(path, 20_000)
    table = pq.read_table(str(path), columns=["c3", "c7"], filesystem=no_prefetch)
    assert table.equals(pq.read_table(path, columns=["c3", "c7"]))
    assert all(f.prefetch_stats is None for f in files)
    assert _totals(files)[1:] == (0, 0, 0)
    assert _totals(files)[0] >= 1 + 2 * ROW_GROUPS


def _reads(fs: SSHPipeFileSystem, path: Path) -> tuple[list[bytes], int, Any]:
    """A parquet reader's pattern on any file: its tail, then jumps about."""
    size = path.stat().st_size
    with fs.open(str(path), "rb") as f:
        assert isinstance(f, SSHPipeFile)
        got = []
        for offset, n in [(size - 64 * 1024, 64 * 1024), (4, 5000), (size // 2, 70_000)]:
            f.seek(max(0, offset))
            got.append(f.read(n))
        got.append(f.read(10))  # on from there
        return got, f.fetches, f.prefetch_stats


def _expected(path: Path) -> list[bytes]:
    data = path.read_bytes()
    size = len(data)
    mid = size // 2
    return [data[size - 64 * 1024 :], data[4:5004], data[mid : mid + 70_000],
            data[mid + 70_000 : mid + 70_010]]  # fmt: skip


def _as_before(fs: SSHPipeFileSystem, path: Path) -> None:
    """The reads give the file's bytes in as many server reads as with the read-ahead off."""
    got, fetches, stats = _reads(fs, path)
    assert got == _expected(path)
    assert stats is None
    fs.parquet_prefetch = 0
    try:
        assert _reads(fs, path)[:2] == (got, fetches)
    finally:
        del fs.parquet_prefetch


def test_a_file_that_is_not_parquet_reads_as_before(
    sshpipe_fs: SSHPipeFileSystem, here: Path
) -> None:
    path = here / "data.bin"
    path.write_bytes(os.urandom(1024 * 1024))
    _as_before(sshpipe_fs, path)


@pytest.mark.parametrize(
    "tail",
    [
        (200).to_bytes(4, "little") + b"PAR1",  # metadata that is not thrift
        (10**9).to_bytes(4, "little") + b"PAR1",  # longer than the file
        (0).to_bytes(4, "little") + b"PAR1",
    ],
)
def test_a_corrupt_file_ending_in_par1_reads_as_before(
    sshpipe_fs: SSHPipeFileSystem, here: Path, tail: bytes
) -> None:
    path = here / "bad.parquet"
    path.write_bytes(b"PAR1" + os.urandom(512 * 1024) + tail)
    _as_before(sshpipe_fs, path)
    with pytest.raises((pa.ArrowInvalid, OSError)) as local:
        pq.read_table(path)
    with pytest.raises(type(local.value)) as remote:
        pq.read_table(str(path), filesystem=sshpipe_fs)
    assert str(remote.value) == str(local.value)


def test_the_bytes_read_ahead_stay_under_the_cap(sshpipe_fs: SSHPipeFileSystem, here: Path) -> None:
    """Chunks of 1.6 MB, a cap of 4 MiB: two chunks ahead at most, topped up as read."""
    path = here / "big.parquet"
    frame = _wide(path, 200_000, ["a", "b", "c"])
    cap = 4 * 1024 * 1024
    with sshpipe_fs.open(str(path), "rb", parquet_prefetch=cap) as f:
        table = pq.read_table(f, columns=["a", "c"])
    stats = f.prefetch_stats
    pd.testing.assert_frame_equal(table.to_pandas(), frame[["a", "c"]])
    assert stats is not None
    assert 0 < stats.peak <= cap
    # pyarrow reads row groups in an order of its threads': some reads find
    # their chunk not asked for yet and go to the server; some are served.
    assert stats.served > 0
    assert stats.batches >= 2


def test_a_chunk_bigger_than_the_cap_is_never_read_ahead(
    sshpipe_fs: SSHPipeFileSystem, here: Path
) -> None:
    path = here / "big.parquet"
    frame = _wide(path, 200_000, ["a", "b"])
    with sshpipe_fs.open(str(path), "rb", parquet_prefetch=1024 * 1024) as f:
        table = pq.read_table(f, columns=["b"])
    pd.testing.assert_frame_equal(table.to_pandas(), frame[["b"]])
    stats = f.prefetch_stats
    assert stats is not None and stats.batches == 0 and stats.peak == 0


def test_a_wrong_guess_costs_bytes_not_the_result(
    sshpipe_fs: SSHPipeFileSystem, here: Path
) -> None:
    """One row group of one column, then two others: the first guess was wasted."""
    path = here / "wide.parquet"
    _wide(path, 20_000)
    local = pq.ParquetFile(path)
    with sshpipe_fs.open(str(path), "rb") as f:
        remote = pq.ParquetFile(f)
        assert remote.read_row_group(2, columns=["c1"]).equals(
            local.read_row_group(2, columns=["c1"])
        )
        assert remote.read(columns=["c4", "c5"]).equals(local.read(columns=["c4", "c5"]))
    stats = f.prefetch_stats
    assert stats is not None and stats.columns == [1, 4, 5]


@pytest.mark.parametrize(("tail", "imported"), [(b"PAR0", False), (b"PAR1", True)])
def test_pyarrow_is_imported_for_a_parquet_tail_only(
    openssh: SSHServerInfo, here: Path, tail: bytes, imported: bool
) -> None:
    """A fresh interpreter reads a file's tail: pyarrow loads only if it ends in PAR1."""
    path = here / "tail.bin"
    path.write_bytes(os.urandom(100_000) + (50).to_bytes(4, "little") + tail)
    options = storage_options(openssh)
    result = run_fresh(f"""
        import json, sys
        from sshpipe.fsspec import SSHPipeFileSystem
        fs = SSHPipeFileSystem(**{options!r})
        with fs.open({str(path)!r}, "rb") as f:
            f.seek(-64 * 1024, 2)
            data = f.read()
        fs.close()
        print(json.dumps({{"n": len(data), "pyarrow": "pyarrow" in sys.modules}}))
    """)
    assert result == {"n": 64 * 1024, "pyarrow": imported}


def test_a_reader_left_open_is_closed_with_the_filesystem(
    openssh: SSHServerInfo, here: Path, opened: list[Any]
) -> None:
    """pyarrow leaves its files to the garbage collector, which runs after the
    filesystem's finalizer at exit: the client closes them first, not waiting for
    channels nobody would give back."""
    (here / "f").write_bytes(b"x" * 1000)
    fs = SSHPipeFileSystem(**storage_options(openssh), skip_instance_cache=True)
    f = fs.open(str(here / "f"), "rb")
    assert f.read(10) == b"x" * 10
    (remote,) = opened
    assert not remote.closed
    fs.close()
    assert remote.closed
    f.close()  # the fsspec file after it: nothing left to do, no error


def test_the_filesystem_remembers_a_few_footers_by_path_and_size() -> None:
    layouts = Layouts(limit=2)
    one, two = [Chunk(4, 10, 0, 0)], [Chunk(4, 20, 0, 0)]
    layouts.put("/a", 100, one)
    layouts.put("/b", 100, two)
    assert layouts.get("/a", 100) == one  # now the most recent
    assert layouts.get("/a", 101) is None  # another size: another file
    layouts.put("/c", 100, one)
    assert layouts.get("/b", 100) is None  # the oldest went
    assert layouts.get("/a", 100) == one


def test_read_table_opens_one_connection_and_one_channel(
    openssh: SSHServerInfo, here: Path
) -> None:
    """pyarrow's stats and its second open, beside the first file it leaves open,
    share the first file's channel (a light lease), as does the early log-in's.

    pyarrow leaves its files to the garbage collector, which closes one when a
    collection comes, on whichever thread allocated last: on fsspec's loop
    thread as a task, racing pyarrow's next open (1 run in 12 here had the
    first file closed before the second open, the others shared its channel),
    and where a light user lands then depends on the race. The cyclic collector
    is off while the table is read: each file lives as its references say, the
    same in every run.
    """
    path = here / "wide.parquet"
    _wide(path, 5_000)
    fs = SSHPipeFileSystem(**storage_options(openssh), skip_instance_cache=True)
    try:
        collecting = gc.isenabled()
        gc.disable()
        try:
            table = pq.read_table(str(path), columns=["c3", "c7"], filesystem=fs)
        finally:
            if collecting:
                gc.enable()
        assert table.equals(pq.read_table(path, columns=["c3", "c7"]))

        async def state() -> str:
            return repr(fs.client)

        shown = str(sync(fs.loop, state))
        found = re.search(r"connections=(\d+) idle_channels=(\d+) busy_channels=(\d+)", shown)
        assert found is not None, shown
        assert found[1] == "1" and int(found[2]) + int(found[3]) == 1, shown
    finally:
        fs.close()
