"""pandas, pyarrow and Dask reading and writing through ``sshpipe://``, against sshd.

Each result is compared with the same computation on the local copy of the
data (the server's root is a local directory): what came over the wire must
give the same frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from sshpipe.fsspec import SSHPipeFileSystem
from sshpipe.testing.sshd import SSHServerInfo
from tests.support.fsspecfs import opened, register, sshpipe_fs, storage_options

__all__ = ["opened", "sshpipe_fs"]  # fixtures


@pytest.fixture
def here(openssh: SSHServerInfo, tmp_path: Path) -> Path:
    root = openssh.root / f"fsspec-{tmp_path.name}"
    root.mkdir()
    return root


def _frame(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "key": rng.integers(0, 20, rows),
            "value": rng.normal(size=rows),
            "label": rng.choice(["a", "b", "c"], rows),
        }
    )


def test_pandas_read_csv_and_to_parquet(
    sshpipe_fs: SSHPipeFileSystem, openssh: SSHServerInfo, here: Path
) -> None:
    register()
    frame = _frame(50_000, 1)
    frame.to_csv(here / "data.csv", index=False)
    options = {k: v for k, v in storage_options(openssh).items() if k != "host"}
    url = f"sshpipe://{openssh.host}{here}/data.csv"
    got = pd.read_csv(url, storage_options=options)
    pd.testing.assert_frame_equal(got, pd.read_csv(here / "data.csv"))

    got.to_parquet(f"sshpipe://{openssh.host}{here}/out.parquet", storage_options=options)
    pd.testing.assert_frame_equal(pd.read_parquet(here / "out.parquet"), got)


def test_pyarrow_reads_only_the_columns_asked(
    sshpipe_fs: SSHPipeFileSystem, here: Path, opened: list[Any]
) -> None:
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({f"c{i}": rng.normal(size=200_000) for i in range(10)})
    frame.to_parquet(here / "wide.parquet", row_group_size=50_000)
    table = pq.read_table(str(here / "wide.parquet"), columns=["c3", "c7"], filesystem=sshpipe_fs)
    assert table.column_names == ["c3", "c7"]
    pd.testing.assert_frame_equal(table.to_pandas(), frame[["c3", "c7"]])
    # Two columns of ten, and the footer: well under half the file crossed the link.
    moved = sum(f.stats.bytes_received for f in opened)
    assert 0 < moved < (here / "wide.parquet").stat().st_size * 0.4


def test_dask_on_two_worker_processes_reads_a_glob(openssh: SSHServerInfo, here: Path) -> None:
    dd = pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")
    register()
    (here / "data").mkdir()
    for i in range(4):
        _frame(5_000, 10 + i).to_csv(here / "data" / f"part{i}.csv", index=False)
    expected = (
        pd.concat(pd.read_csv(p) for p in sorted((here / "data").glob("*.csv")))
        .groupby("key")["value"]
        .sum()
    )
    options = {k: v for k, v in storage_options(openssh).items() if k != "host"}
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        frame = dd.read_csv(f"sshpipe://{openssh.host}{here}/data/*.csv", storage_options=options)
        got = frame.groupby("key")["value"].sum().compute()
    pd.testing.assert_series_equal(got.sort_index(), expected.sort_index())
