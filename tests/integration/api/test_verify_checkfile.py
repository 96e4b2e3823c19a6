"""--verify against a server that runs no command but has check-file (``testing.checkfile``).

It stands in for ProFTPD (check-file "1": by name, the whole file's SHA-256)
and paramiko (a list of algorithms: on a handle, by 64 KiB blocks): the CLI
reports the server's own hash with its algorithm, for single files and trees
both ways, and a server that lies fails the copy with the integrity exit code
before it takes its name.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import sshpipe
import sshpipe.transfer.verify
from sshpipe.core.checkfile import LISTED_BLOCK, SHA256, HashSpec
from sshpipe.testing.checkfile import CheckFileOptions, check_file_server
from tests.support.cli import assert_one_line_error, run_cli_async
from tests.support.files import leftover_temps
from tests.support.peers import Peer, from_embedded
from tests.support.trees import compare_trees, make_small_tree

pytestmark = pytest.mark.asyncssh_server

BIG = 12 * 1024 * 1024  # a tree's big file: through the single-file engine
ONLY_MD5 = CheckFileOptions(advertised=b"md5", algorithms=("md5",))  # paramiko's way
WITH_SHA256 = CheckFileOptions(advertised=b"md5,sha1,sha256")  # paramiko's way, SHA-256 listed
PROFTPD = CheckFileOptions(advertised=b"1")  # ProFTPD's way: by name, the whole file

Start = Callable[[CheckFileOptions], contextlib.AbstractAsyncContextManager[Peer]]


@pytest.fixture
def server(tmp_path: Path) -> Start:
    @contextlib.asynccontextmanager
    async def start(options: CheckFileOptions) -> AsyncIterator[Peer]:
        options.asked.clear()
        async with check_file_server(tmp_path / "server", options) as running:
            yield from_embedded(running)

    return start


def _tree(root: Path) -> None:
    """Small files (one empty, one past a read block), and a big one; no links.

    asyncssh's chrooted server keeps link targets as the client sent them.
    """
    make_small_tree(root, links=False)
    rng = random.Random(5)
    for i in range(20):
        (root / "sub" / f"f{i}.bin").write_bytes(rng.randbytes(rng.choice([1, 255, 4000, 70_000])))
    (root / "big.bin").write_bytes(os.urandom(BIG))


@pytest.mark.parametrize(
    ("options", "level"),
    [
        (ONLY_MD5, "hash-remote:md5"),
        (WITH_SHA256, "hash-remote:sha256"),
        (PROFTPD, "hash-remote:sha256"),
    ],
    ids=["only-md5", "sha256-listed", "proftpd"],
)
async def test_the_cli_reports_the_servers_own_hash_for_files_and_trees_both_ways(
    server: Start, tmp_path: Path, options: CheckFileOptions, level: str
) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    async with server(options) as peer:
        (peer.root / "a.bin").write_bytes(data)
        _tree(peer.root / "t")
        flags = ["--verify", *peer.cli_options()]
        got = await run_cli_async("get", *flags, peer.spec("a.bin"), str(tmp_path / "a.bin"))
        put = await run_cli_async("put", *flags, str(tmp_path / "a.bin"), peer.spec("b.bin"))
        got_tree = await run_cli_async(
            "get", "-r", "--json", *flags, peer.spec("t"), str(tmp_path / "t")
        )
        put_tree = await run_cli_async(
            "put", "-r", "--json", *flags, str(tmp_path / "t"), peer.spec("u")
        )
        for run in (got, put, got_tree, put_tree):
            assert run.returncode == 0, run.stderr
        assert f"verified: {level}" in got.stdout and f"verified: {level}" in put.stdout
        assert json.loads(got_tree.stdout)["verified"] == level
        assert json.loads(put_tree.stdout)["verified"] == level
        assert (peer.root / "b.bin").read_bytes() == data
        assert compare_trees(peer.root / "t", tmp_path / "t") == []
        assert compare_trees(peer.root / "t", peer.root / "u") == []
        requests = {request for request, *_ in options.asked}
        assert requests == {"check-file-name" if options is PROFTPD else "check-file"}
        assert leftover_temps(tmp_path, peer.root) == []


async def test_a_server_that_lies_fails_the_cli_with_the_integrity_exit_code(
    server: Start, tmp_path: Path
) -> None:
    lying = CheckFileOptions(advertised=b"md5", algorithms=("md5",), lies=True)
    (tmp_path / "up.bin").write_bytes(os.urandom(500_000))
    async with server(lying) as peer:
        (peer.root / "a.bin").write_bytes(os.urandom(500_000))
        (peer.root / "old.bin").write_bytes(b"the old file")
        flags = ["--verify", *peer.cli_options()]
        got = await run_cli_async("get", *flags, peer.spec("a.bin"), str(tmp_path / "a.bin"))
        put = await run_cli_async("put", *flags, str(tmp_path / "up.bin"), peer.spec("old.bin"))
        assert_one_line_error(got, 10, "md5", "check-file")
        assert_one_line_error(put, 10, "md5", "check-file")
        assert not (tmp_path / "a.bin").exists()  # and no .partial
        assert (peer.root / "old.bin").read_bytes() == b"the old file"
        assert leftover_temps(tmp_path, peer.root) == []


async def test_a_tree_from_a_lying_server_fails_every_file_and_writes_none(
    server: Start, tmp_path: Path
) -> None:
    lying = CheckFileOptions(advertised=b"1", lies=True)
    async with server(lying) as peer:
        (peer.root / "t" / "d").mkdir(parents=True)
        for i in range(12):
            (peer.root / "t" / ("d" if i % 2 else "") / f"f{i}.bin").write_bytes(
                os.urandom(900 + i)
            )
        async with peer.client(sshpipe.TransferConfig(verify="hash")) as sp:
            with pytest.raises(sshpipe.IncompleteTransfer) as caught:
                await sp.get(peer.remote("t"), str(tmp_path / "t"), recursive=True)
    stats = caught.value.stats
    assert (stats.files_done, stats.files_failed) == (0, 12)
    assert all(f.exit_code == 10 and "sha256" in f.error for f in stats.failures)
    assert not any(path.is_file() for path in (tmp_path / "t").rglob("*"))
    assert leftover_temps(tmp_path) == []


async def test_after_the_first_refused_exec_the_copy_is_hashed_once(
    server: Start, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first copy hashes for sha256sum too (the server might run it); it refuses the
    exec, and the next copy on the connection takes only the check-file's md5."""
    made: list[tuple[HashSpec, ...]] = []
    real = sshpipe.transfer.verify.OrderedHash.__init__

    def recording(self: Any, specs: Any = (SHA256,)) -> None:
        made.append(tuple(specs))
        real(self, specs)

    monkeypatch.setattr(sshpipe.transfer.verify.OrderedHash, "__init__", recording)
    async with server(ONLY_MD5) as peer:
        (peer.root / "a.bin").write_bytes(os.urandom(200_000))
        async with peer.client(sshpipe.TransferConfig(verify="hash")) as sp:
            first = await sp.get(peer.remote("a.bin"), str(tmp_path / "1"))
            second = await sp.get(peer.remote("a.bin"), str(tmp_path / "2"))
    md5_blocks = HashSpec("md5", LISTED_BLOCK)
    assert (first.verified, second.verified) == ("hash-remote:md5", "hash-remote:md5")
    assert made == [(SHA256, md5_blocks), (md5_blocks,)]
