"""``sshpipe://`` beyond fsspec's abstract suites, against sshd: what moves, errors, pickling.

Every byte read is compared with what the server's disk holds (the server's
root is a local directory); what moved is read from the remote file's own
counters (``RemoteFileStats``), not inferred from timings.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import posixpath
import socket
import time
from pathlib import Path
from typing import Any

import fsspec
import fsspec.asyn
import pytest

import sshpipe
from sshpipe.fsspec import SSHPipeFileSystem
from sshpipe.fsspec._isfile import PARKED_FOR
from sshpipe.fsspec._options import strip_protocol, url_options
from sshpipe.testing.sshd import SSHServerInfo
from tests.support.fsspecfs import opened, register, sshpipe_fs, storage_options

__all__ = ["opened", "sshpipe_fs"]  # fixtures

MiB = 1024 * 1024


@pytest.fixture
def here(openssh: SSHServerInfo, tmp_path: Path) -> Path:
    root = openssh.root / f"fsspec-{tmp_path.name}"
    root.mkdir()
    return root


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("sshpipe://me@host:2222/a/b/", "/a/b"),
        ("sshpipe://host/", "/"),
        ("/a/b", "/a/b"),
        ("/", "/"),
        ("rel/x/", "rel/x"),
    ],
)
def test_strip_protocol(path: str, expected: str) -> None:
    assert strip_protocol(path) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sshpipe://me@host:2222/a", {"username": "me", "host": "host", "port": 2222}),
        ("sshpipe://host/a", {"host": "host"}),
        ("sshpipe://[::1]:22/a", {"host": "::1", "port": 22}),
        ("/a/b", {}),
    ],
)
def test_url_options(url: str, expected: dict[str, Any]) -> None:
    assert url_options(url) == expected


def test_unknown_storage_option_refused() -> None:
    with pytest.raises(sshpipe.UsageError, match="identity_file"):
        SSHPipeFileSystem("h", identity_file="k", skip_instance_cache=True)


def test_max_connections_per_host_is_a_storage_option() -> None:
    # Dask's workers take only storage options: TransferConfig's field, kept
    # beside a config given with it.
    config = sshpipe.TransferConfig(requests=64)
    fs = SSHPipeFileSystem(
        "h",
        max_connections_per_host=2,
        config=config,
        connect_early=False,
        skip_instance_cache=True,
    )
    made = fs._new_client().config
    assert (made.max_connections_per_host, made.requests) == (2, 64)


def test_entry_point_is_declared() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).parents[3] / "pyproject.toml").read_text())
    target = project["project"]["entry-points"]["fsspec.specs"]["sshpipe"]
    module, _, name = target.partition(":")
    assert getattr(__import__(module, fromlist=[name]), name) is SSHPipeFileSystem


def test_ranged_cat_file_moves_only_its_range(
    sshpipe_fs: SSHPipeFileSystem, here: Path, opened: list[Any]
) -> None:
    data = os.urandom(8 * MiB)
    (here / "big").write_bytes(data)
    path = str(here / "big")
    assert sshpipe_fs.cat_file(path, 3 * MiB + 5, 3 * MiB + 5 + 1000) == data[3 * MiB + 5 :][:1000]
    assert sshpipe_fs.cat_file(path, -777) == data[-777:]
    assert [f.stats.bytes_received for f in opened] == [1000, 777]
    # cat_ranges: one OPEN per file, every range of it in one batch.
    opened.clear()
    ranges = [(0, 10), (5 * MiB, 5 * MiB + 4096), (8 * MiB - 3, None)]
    got = sshpipe_fs.cat_ranges([path] * 3, [r[0] for r in ranges], [r[1] for r in ranges])
    assert got == [data[s:e] for s, e in ranges]
    assert len(opened) == 1
    assert opened[0].stats.bytes_received == 10 + 4096 + 3


def test_sequential_small_reads_come_from_read_ahead(
    sshpipe_fs: SSHPipeFileSystem, here: Path
) -> None:
    data = os.urandom(2 * MiB)
    (here / "f").write_bytes(data)
    with sshpipe_fs.open(str(here / "f"), "rb") as f:
        pieces = [f.read(1000) for _ in range(2 * MiB // 1000 + 1)]
    assert b"".join(pieces) == data
    stats = f.stats
    assert stats is not None
    # 2,098 reads, a few dozen READs: each byte fetched once, ahead of the reads.
    assert stats.bytes_received == len(data)
    assert stats.requests < 2 * MiB // 1000 // 10


def test_open_write_and_read_back(sshpipe_fs: SSHPipeFileSystem, here: Path) -> None:
    data = os.urandom(3 * MiB + 17)
    with sshpipe_fs.open(str(here / "w"), "wb", block_size=MiB) as f:
        for i in range(0, len(data), 100_000):
            f.write(data[i : i + 100_000])
    assert (here / "w").read_bytes() == data
    with sshpipe_fs.open(str(here / "w"), "ab") as f:
        f.write(b"tail")
    assert (here / "w").read_bytes() == data + b"tail"
    with sshpipe_fs.open(str(here / "w"), "rb") as f:
        f.seek(3 * MiB)
        assert f.read() == data[3 * MiB :] + b"tail"


def test_errors_are_the_builtin_ones(sshpipe_fs: SSHPipeFileSystem, here: Path) -> None:
    (here / "d").mkdir()
    (here / "f").write_bytes(b"x")
    with pytest.raises(FileNotFoundError):
        sshpipe_fs.info(str(here / "missing"))
    with pytest.raises(FileNotFoundError):
        sshpipe_fs.ls(str(here / "missing"))
    with pytest.raises(FileNotFoundError):
        sshpipe_fs.open(str(here / "missing"), "rb")
    with pytest.raises(IsADirectoryError):
        sshpipe_fs.open(str(here / "d"), "rb")
    with pytest.raises(FileExistsError):
        sshpipe_fs.mkdir(str(here / "d"))
    with pytest.raises(FileExistsError):
        sshpipe_fs.open(str(here / "f"), "xb")
    # A file lists as itself (fsspec's rule), not as an error.
    assert sshpipe_fs.ls(str(here / "f"), detail=False) == [str(here / "f")]


# fsspec's mv "suite" (fsspec/tests/abstract/mv.py) is two tests of the local
# filesystem alone; these are its two cases on sshpipe://.
def test_move_into_missing_directory_raises(sshpipe_fs: SSHPipeFileSystem, here: Path) -> None:
    (here / "source_file.txt").write_text("content")
    with pytest.raises(FileNotFoundError):
        sshpipe_fs.mv(str(here / "source_file.txt"), str(here / "nowhere" / "dest.txt"))
    assert (here / "source_file.txt").read_text() == "content"


@pytest.mark.parametrize("recursive", [True, False])
def test_move_into_read_only_directory_raises(
    sshpipe_fs: SSHPipeFileSystem, here: Path, recursive: bool
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories; the ordinary-user run covers it")
    (here / "source_file.txt").write_text("content")
    protected = here / "protected_directory"
    protected.mkdir()
    protected.chmod(0o555)
    try:
        with pytest.raises(PermissionError):
            sshpipe_fs.mv(
                str(here / "source_file.txt"),
                str(protected / "destination_file.txt"),
                recursive=recursive,
            )
        assert not (protected / "destination_file.txt").exists()
    finally:
        protected.chmod(0o755)


def test_mv_renames_on_the_server(sshpipe_fs: SSHPipeFileSystem, here: Path) -> None:
    (here / "tree" / "sub").mkdir(parents=True)
    (here / "tree" / "sub" / "f").write_bytes(b"abc")
    (here / "into").mkdir()
    sshpipe_fs.mv(str(here / "tree"), str(here / "into"))
    assert (here / "into" / "tree" / "sub" / "f").read_bytes() == b"abc"
    assert not (here / "tree").exists()


def test_reading_does_not_change_ukey(sshpipe_fs: SSHPipeFileSystem, here: Path) -> None:
    path = here / "f"
    path.write_bytes(os.urandom(100_000))
    mtime = path.stat().st_mtime
    os.utime(path, (mtime - 7 * 86400, mtime))  # an old atime: a read updates it (relatime)
    before = sshpipe_fs.ukey(str(path))
    assert sshpipe_fs.cat_file(str(path)) == path.read_bytes()
    with sshpipe_fs.open(str(path)) as f:
        f.read()
    if path.stat().st_atime == mtime - 7 * 86400:
        pytest.skip("this file system does not update atime (noatime)")
    assert sshpipe_fs.ukey(str(path)) == before
    path.write_bytes(b"changed")
    assert sshpipe_fs.ukey(str(path)) != before


def test_checksum_is_the_content_hash(sshpipe_fs: SSHPipeFileSystem, here: Path) -> None:
    import hashlib

    (here / "f").write_bytes(b"some bytes")
    expected = int(hashlib.sha256(b"some bytes").hexdigest(), 16)
    assert sshpipe_fs.checksum(str(here / "f")) == expected


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unpickling_does_not_connect_first_use_does(openssh: SSHServerInfo) -> None:
    register()
    # Nothing listens on that port: a connect at unpickling would fail there.
    options = {**storage_options(openssh), "port": _dead_port(), "skip_instance_cache": True}
    fs = fsspec.filesystem("sshpipe", **options)
    SSHPipeFileSystem.clear_instance_cache()
    again = pickle.loads(pickle.dumps(fs))
    assert again is not fs and len(again._clients) == 0
    with pytest.raises(sshpipe.ConnectError):
        again.ls("/")
    # The same with a server there: the first call connects and answers.
    live = fsspec.filesystem("sshpipe", **storage_options(openssh), skip_instance_cache=True)
    SSHPipeFileSystem.clear_instance_cache()
    copy = pickle.loads(pickle.dumps(live))
    assert len(copy._clients) == 0
    assert copy.ls(str(openssh.root), detail=False) == live.ls(str(openssh.root), detail=False)
    for one in (fs, again, live, copy):
        one.close()


def test_each_event_loop_has_its_own_connections(
    openssh: SSHServerInfo, here: Path, sshpipe_fs: SSHPipeFileSystem
) -> None:
    (here / "f").write_bytes(b"hello")

    async def main() -> bytes:
        fs = SSHPipeFileSystem(**storage_options(openssh), asynchronous=True)
        try:
            return bytes(await fs._cat_file(str(here / "f")))
        finally:
            await fs._close()

    assert asyncio.run(main()) == b"hello"
    assert asyncio.run(main()) == b"hello"  # a second loop: a client of its own
    assert sshpipe_fs.cat_file(str(here / "f")) == b"hello"  # fsspec's loop, untouched


def test_url_with_storage_options(openssh: SSHServerInfo, here: Path) -> None:
    register()
    (here / "f.txt").write_text("by url")
    rest = {k: v for k, v in storage_options(openssh).items() if k not in ("host", "port")}
    where = posixpath.join(str(here), "f.txt")
    url = f"sshpipe://{openssh.user}@{openssh.host}:{openssh.port}{where}"
    with fsspec.open(url, "rt", **rest) as f:
        assert f.read() == "by url"


def _client_state(fs: SSHPipeFileSystem) -> str:
    """The repr of the client on fsspec's loop, made there if it is not yet."""

    async def state() -> str:
        return repr(fs.client)

    return str(fsspec.asyn.sync(fs.loop, state))


def test_a_new_filesystem_logs_in_at_once_and_its_first_call_shares_it(
    openssh: SSHServerInfo, here: Path
) -> None:
    (here / "f").write_bytes(b"x")
    fs = fsspec.filesystem("sshpipe", **storage_options(openssh), skip_instance_cache=True)
    try:
        # Called at once, while the early log-in runs: it waits for that one.
        assert fs.ls(str(here), detail=False) == [str(here / "f")]
        assert "connections=1 idle_channels=1 busy_channels=0" in _client_state(fs)
    finally:
        fs.close()
    untouched = fsspec.filesystem("sshpipe", **storage_options(openssh), skip_instance_cache=True)
    try:  # no call made: it logs in and opens its channel by itself
        deadline = time.monotonic() + 10
        while "connections=1 idle_channels=1" not in _client_state(untouched):
            assert time.monotonic() < deadline, _client_state(untouched)
            time.sleep(0.02)
    finally:
        untouched.close()
    lazy = fsspec.filesystem(
        "sshpipe", **storage_options(openssh), connect_early=False, skip_instance_cache=True
    )
    try:
        time.sleep(0.2)  # what an early log-in would have begun by now
        assert len(lazy._clients) == 0  # nothing made, nothing connecting
        assert lazy.cat_file(str(here / "f")) == b"x"
        assert "connections=1" in _client_state(lazy)
    finally:
        lazy.close()


def test_an_early_log_in_that_fails_is_tried_again_by_the_first_call(
    openssh: SSHServerInfo,
) -> None:
    options = {**storage_options(openssh), "port": _dead_port(), "skip_instance_cache": True}
    fs = fsspec.filesystem("sshpipe", **options)
    try:
        with pytest.raises(sshpipe.ConnectError):
            fs.ls("/")
        with pytest.raises(sshpipe.ConnectError):
            fs.ls("/")  # a new attempt, failing the same way
    finally:
        fs.close()


def test_an_isfile_then_open_of_a_known_file_opens_it_once(
    sshpipe_fs: SSHPipeFileSystem, here: Path, opened: list[Any]
) -> None:
    """pyarrow's idiom: the isfile's OPEN (sent with its STAT) serves the open."""
    path = str(here / "f")
    (here / "f").write_bytes(b"abc" * 1000)
    assert sshpipe_fs.info(path)["type"] == "file"  # seen as a regular file
    assert sshpipe_fs.isfile(path)
    with sshpipe_fs.open(path, "rb") as f:
        assert f.read() == b"abc" * 1000
    assert len(opened) == 1  # the isfile's, taken by the open
    # Not seen before: an isfile is a STAT, and opens nothing.
    (here / "g").write_bytes(b"g")
    assert sshpipe_fs.isfile(str(here / "g")) and len(opened) == 1
    assert not sshpipe_fs.isfile(str(here / "missing")) and not sshpipe_fs.isfile(str(here))


def test_an_isfile_open_not_taken_next_is_closed(
    sshpipe_fs: SSHPipeFileSystem, here: Path, opened: list[Any]
) -> None:
    path = str(here / "f")
    (here / "f").write_bytes(b"first")
    sshpipe_fs.ls(str(here))  # the listing shows it a regular file
    assert sshpipe_fs.isfile(path)
    (here / "f").write_bytes(b"second")  # changed between the two calls
    assert sshpipe_fs.info(path)["size"] == 6  # another use of the client between
    with sshpipe_fs.open(path, "rb") as f:
        assert f.read() == b"second"  # opened anew, not the isfile's handle
    assert len(opened) == 2
    assert sshpipe_fs.isfile(path)
    time.sleep(PARKED_FOR + 0.2)  # too late for its open
    with sshpipe_fs.open(path, "rb") as f:
        assert f.read() == b"second"
    assert len(opened) == 4
    deadline = time.monotonic() + 5  # the isfile's opens are closed (in the background)
    while not all(file.closed for file in opened):
        assert time.monotonic() < deadline, opened
        time.sleep(0.02)
    os.remove(here / "f")
    assert not sshpipe_fs.isfile(path)  # seen before, now gone: False, not an error
