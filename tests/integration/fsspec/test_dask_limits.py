"""A Dask cluster of worker processes reads through ``sshpipe://`` from a strict sshd (issue 40).

sshd with ``MaxStartups 2`` (a third connection not yet logged in is dropped)
and ``MaxSessions 2`` (a third channel on one connection refused): every worker
process logs in at once and runs four tasks at a time. Both workloads must give
what the same computation on the local files gives. benchmarks/strict_servers.py
runs the issue's full size (8 workers of 4 threads, CSV too, sshfs beside).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sshpipe.testing.sshd import SSHServerInfo, openssh_server
from tests.support.files import random_file
from tests.support.fsspecfs import register, storage_options

pytestmark = pytest.mark.openssh

PARQUET_FILES = 8
BAG_FILES = 16
SIZE = 256 * 1024
COMPUTE_LIMIT = 60.0  # seconds a computation may take before the test fails (a hung cluster)


@pytest.fixture
def strict_sshd(sshd_executable: Path, tmp_path: Path) -> Iterator[SSHServerInfo]:
    with openssh_server(tmp_path / "sshd", max_startups="2", max_sessions=2) as info:
        yield info


@pytest.mark.slow  # a cluster of two worker processes: 13-16 s on two quiet cores, 30 loaded
def test_a_cluster_reads_parquet_and_downloads_files_under_max_startups_and_max_sessions(
    strict_sshd: SSHServerInfo, tmp_path: Path
) -> None:
    dd = pytest.importorskip("dask.dataframe")
    db = pytest.importorskip("dask.bag")
    distributed = pytest.importorskip("distributed")
    import fsspec

    register()
    root = strict_sshd.root
    (root / "parquet").mkdir()
    rng = np.random.default_rng(40)
    frames = [pd.DataFrame({"a": rng.normal(size=5_000)}) for _ in range(PARQUET_FILES)]
    for i, frame in enumerate(frames):
        frame.to_parquet(root / "parquet" / f"part{i}.parquet")
    sources = {f"f{n}.bin": random_file(root / f"f{n}.bin", SIZE) for n in range(BAG_FILES)}
    (tmp_path / "got").mkdir()
    options: dict[str, Any] = storage_options(strict_sshd)
    fs = fsspec.filesystem("sshpipe", **options)
    del options["host"]
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=4, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        # The downloads first: each worker's first four tasks start at once, before
        # it has a connection, and ask for four channels where sshd opens two.
        pairs = [(str(root / name), str(tmp_path / "got" / name)) for name in sources]
        downloads = db.from_sequence(pairs, npartitions=len(pairs)).starmap(fs.get)
        client.compute(downloads).result(timeout=COMPUTE_LIMIT)
        frame = dd.read_parquet(
            f"sshpipe://{strict_sshd.host}{root}/parquet/", columns=["a"], storage_options=options
        )
        total = client.compute(frame["a"].sum()).result(timeout=COMPUTE_LIMIT)
    fs.close()
    refused = strict_sshd.log_file.read_text().count("no more sessions")  # past MaxSessions
    assert total == pytest.approx(sum(float(f["a"].sum()) for f in frames))
    assert all((tmp_path / "got" / name).read_bytes() == data for name, data in sources.items())
    assert refused > 0  # else the test proves nothing: sshd never said no
