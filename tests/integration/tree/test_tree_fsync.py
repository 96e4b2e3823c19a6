"""A tree download's fsyncs run in worker threads: on the event loop each would stall
every other file in flight (the small-file pipeline, the big files' reads).

The CLI does its local I/O on the loop thread (``local_io_in_thread=False``);
even then a sync must not. Recorded through ``os.fsync`` itself, against the
in-process asyncssh server, so the test sees every caller.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import sshpipe
from sshpipe.testing.embedded import embedded_server
from tests.support.peers import from_embedded
from tests.support.trees import compare_trees

MiB = 1024 * 1024


@pytest.mark.parametrize("in_thread", [False, True])
async def test_a_tree_download_never_fsyncs_on_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_thread: bool
) -> None:
    workdir = tmp_path / "embedded"
    source = workdir / "root" / "tree"
    for sub in ("a", "a/b", "c"):
        (source / sub).mkdir(parents=True)
        for i in range(5):
            (source / sub / f"f{i}.txt").write_bytes(os.urandom(1000 + i))
    # Past the pipeline's share of this budget: the striped engine copies it.
    (source / "a" / "big.bin").write_bytes(os.urandom(4 * MiB))
    config = sshpipe.TransferConfig(
        max_bytes_in_flight=8 * MiB,
        min_bytes_in_flight=MiB,
        local_io_in_thread=in_thread,
        fsync=True,
    )
    loop_thread = threading.get_ident()
    real_fsync = os.fsync
    threads: list[int] = []

    def fsync(fd: int) -> None:
        threads.append(threading.get_ident())
        real_fsync(fd)

    async with embedded_server(workdir) as server:
        peer = from_embedded(server)
        async with peer.client(config) as sp:
            monkeypatch.setattr(os, "fsync", fsync)
            stats = await sp.get(peer.remote("tree"), str(tmp_path / "out"), recursive=True)
            monkeypatch.undo()
    assert compare_trees(source, tmp_path / "out") == []
    assert stats.files_done == 16
    # The big file, its directory, and each directory once at the end (small files
    # are synced by the batch, with syncfs where there is one).
    assert len(threads) >= 1 + 1 + 4
    assert loop_thread not in threads, f"{threads.count(loop_thread)} fsyncs on the loop"
