"""One suite, every server: OpenSSH's sshd, asyncssh's, ProFTPD's mod_sftp, Green End's.

Each case runs against each server, mostly through ``python -m sshpipe`` as a
user would, and compares what arrived byte for byte (trees entry by entry). A
case that fails on a server is marked ``xfail(strict=True)`` there alone, with
its cause (sshpipe's, unless the reason says the server's): once the cause is
gone it XPASSes, which fails, and the mark goes.

The asyncssh server serves link text as stored (``faithful_links``): asyncssh
2.24's chrooted READLINK cannot serve a relative link, a server bug the tree
tests work around the same way. Green End's server starts in its served root,
so a stray relative path lands in a temporary directory, not in ``$HOME``.

The big files (12 MiB, 32 MiB) and the tree are written once per session.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sshpipe.testing.embedded import embedded_server
from sshpipe.testing.hostile import faithful_links
from sshpipe.testing.linkemu import LinkSpec
from tests.support.cli import assert_one_line_error, run_cli_async
from tests.support.files import leftover_temps, random_file
from tests.support.handles import peak_open_files
from tests.support.peers import ALL_SERVER_PARAMS, EmulatedLink, Peer, from_embedded
from tests.support.trees import compare_trees, summarize

MiB = 1024 * 1024
EDGE_SIZES = [0, 1, 32767, 32768, 32769, MiB + 1]
BIG = 12 * MiB
# Killed mid-way: its first run is held to one 16 KiB request at a time, so it is
# still running when the partial file passes 2 MiB, even on a fast loopback.
HUGE = 32 * MiB
FLAT_FILES = 300  # past Green End's 128-slot handle table
# What sshpipe keeps open on one channel at most (tree/channels.py: 128, or half
# what the server states), and the size of Green End's handle table.
HANDLES_PER_CHANNEL = 128
# The levels --verify may report (``TransferStats.verified``).
# (software, SYMLINK order, block probed: no limits@openssh.com) as --json shows them.
PROFILE = {
    "openssh": ("OpenSSH_", "target-link", False),
    "asyncssh": ("AsyncSSH_", "link-target", False),
    "proftpd": ("mod_sftp", "target-link", True),
    "greenend": ("OpenSSH_", "link-target", True),
}
# The best check each server allows: sha256sum by exec (sshd: OpenSSH, Green End),
# ProFTPD's own check-file (no exec there), the size (the embedded server runs neither).
BEST_CHECK = {
    "openssh": "hash-remote",
    "greenend": "hash-remote",
    "proftpd": "hash-remote:sha256",
    "asyncssh": "size",
}
# Upload journals go to a throwaway state directory (CLI subprocesses inherit it).
pytestmark = pytest.mark.usefixtures("state_home")


# Why cases fail where they do (one xfail each, on that server only).
READLINK_RESOLVED = (
    "server, not sshpipe: ProFTPD's READLINK answers the link resolved to an absolute "
    "path ('/d/t.txt' for 't.txt'), not its text, and sshpipe copies link text as sent"
)


def each_server(**xfails: str) -> pytest.MarkDecorator:
    """Run the case against every server; those named fail (strictly) for the reason given."""
    params = []
    for param in ALL_SERVER_PARAMS:
        (name,) = param.values
        marks = list(param.marks)
        if (why := xfails.pop(str(name), None)) is not None:
            marks.append(pytest.mark.xfail(strict=True, reason=why))
        params.append(pytest.param(name, marks=marks, id=str(name)))
    assert not xfails, f"no such server: {sorted(xfails)}"
    return pytest.mark.parametrize("server", params, indirect=True)


@pytest.fixture
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Peer]:
    """The server this case runs against, with a fresh directory of its own."""
    if request.param == "asyncssh":
        factory = faithful_links()
        async with embedded_server(tmp_path / "embedded", sftp_factory=factory) as embedded:
            yield from_embedded(embedded)
        return
    peer: Peer = request.getfixturevalue(f"{request.param}_peer")
    yield peer


@pytest.fixture
def here(tmp_path: Path) -> Path:
    """The local side of a case."""
    local = tmp_path / "local"
    local.mkdir()
    return local


@pytest.fixture(scope="session")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big.bin"
    random_file(path, BIG)
    return path


@pytest.fixture(scope="session")
def huge(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("huge") / "huge.bin"
    random_file(path, HUGE)
    return path


@pytest.fixture(scope="session")
def tree(tmp_path_factory: pytest.TempPathFactory, big: Path) -> Path:
    """~20 entries: a relative symlink, unicode names, an empty file and directory, 12 MiB."""
    root = tmp_path_factory.mktemp("tree") / "src"
    for rel in ("docs/数据", "empty dir", "nested/deeper"):
        (root / rel).mkdir(parents=True)
    random_file(root / "docs/résumé.txt", 1234)
    random_file(root / "docs/数据/table.csv", 32769)
    random_file(root / "nested/deeper/leaf.bin", 70_000)
    (root / "empty.txt").write_bytes(b"")
    shutil.copyfile(big, root / "nested/big.bin")
    for i in range(8):
        random_file(root / f"f{i}.dat", 100 * i + 1)
    (root / "docs/link to résumé").symlink_to("résumé.txt")
    (root / "nested/up link").symlink_to("../docs/数据/table.csv")
    return root


async def sshpipe_ok(*args: str) -> subprocess.CompletedProcess[str]:
    """A command that must succeed, with nothing on stderr."""
    done = await run_cli_async(*args)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done


def assert_no_temps(server: Peer) -> None:
    """No upload left a temporary file (``.NAME.sshpipe-XXXXXX.partial``) on the server."""
    assert leftover_temps(server.root) == []


def assert_same_tree(expected: Path, actual: Path, **options: bool) -> None:
    diffs = compare_trees(expected, actual, **options)
    assert diffs == [], summarize(diffs)


@contextlib.contextmanager
def unwritable(directory: Path) -> Iterator[None]:
    """Nobody may create anything in ``directory``, root included, for the ``with`` block.

    An ordinary user gets mode 0555; root ignores modes, so it gets the
    immutable attribute (chattr +i), and the case skips where that is not
    available (tmpfs, no CAP_LINUX_IMMUTABLE).
    """
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    done = chattr and subprocess.run([chattr, "+i", str(directory)], capture_output=True)
    if not done or done.returncode != 0:
        pytest.skip("root ignores modes and chattr +i is not available here")
    try:
        yield
    finally:
        subprocess.run([str(chattr), "-i", str(directory)], check=True)


# -- single files ------------------------------------------------------------------


@each_server()
async def test_edge_sizes_round_trip(server: Peer, here: Path, big: Path) -> None:
    """Block edges (32 KiB is what a server without limits@openssh.com gets), then 12 MiB.

    The small ones through the API on one connection, both ways (a command
    each would cost a second each); the big one through the command line.
    """
    sources = {size: random_file(server.root / f"src-{size}.bin", size) for size in EDGE_SIZES}
    async with server.client() as client:
        for size, data in sources.items():
            await client.get(server.remote(f"src-{size}.bin"), str(here / f"got-{size}.bin"))
            assert (here / f"got-{size}.bin").read_bytes() == data, size
            await client.put(str(here / f"got-{size}.bin"), server.remote(f"up-{size}.bin"))
            assert (server.root / f"up-{size}.bin").read_bytes() == data, size
    assert_no_temps(server)
    await sshpipe_ok("put", "-q", *server.cli_options(), str(big), server.spec("big.bin"))
    assert (server.root / "big.bin").read_bytes() == big.read_bytes()
    assert_no_temps(server)
    await sshpipe_ok(
        "get", "-q", *server.cli_options(), server.spec("big.bin"), str(here / "big.bin")
    )
    assert (here / "big.bin").read_bytes() == big.read_bytes()


@each_server()
async def test_an_existing_file_is_replaced(server: Peer, here: Path) -> None:
    old = b"old contents, longer than the new ones " * 100
    (server.root / "dest.bin").write_bytes(old)
    (here / "dest.bin").write_bytes(old)
    new = random_file(here / "new.bin", 5000)
    await sshpipe_ok(
        "put", "-q", *server.cli_options(), str(here / "new.bin"), server.spec("dest.bin")
    )
    assert (server.root / "dest.bin").read_bytes() == new
    assert_no_temps(server)
    random_file(server.root / "newer.bin", 3000)
    await sshpipe_ok(
        "get", "-q", *server.cli_options(), server.spec("newer.bin"), str(here / "dest.bin")
    )
    assert (here / "dest.bin").read_bytes() == (server.root / "newer.bin").read_bytes()
    assert leftover_temps(here) == []


@each_server()
async def test_a_directory_as_the_target_receives_the_file(server: Peer, here: Path) -> None:
    data = random_file(here / "one.bin", 40_000)
    (server.root / "inbox").mkdir()
    await sshpipe_ok(
        "put", "-q", *server.cli_options(), str(here / "one.bin"), server.spec("inbox")
    )
    assert (server.root / "inbox/one.bin").read_bytes() == data
    assert_no_temps(server)
    (here / "outbox").mkdir()
    await sshpipe_ok(
        "get", "-q", *server.cli_options(), server.spec("inbox/one.bin"), str(here / "outbox")
    )
    assert (here / "outbox/one.bin").read_bytes() == data


@each_server()
async def test_p_keeps_mode_and_mtime(server: Peer, here: Path) -> None:
    source = here / "kept.sh"
    random_file(source, 2000)
    source.chmod(0o751)
    os.utime(source, (1_000_000_000, 1_000_000_007))
    await sshpipe_ok("put", "-q", "-p", *server.cli_options(), str(source), server.spec("kept.sh"))
    up = (server.root / "kept.sh").stat()
    assert (oct(up.st_mode & 0o7777), int(up.st_mtime)) == (oct(0o751), 1_000_000_007)
    assert_no_temps(server)
    remote = server.root / "theirs.sh"
    random_file(remote, 3000)
    remote.chmod(0o640)
    os.utime(remote, (1_100_000_000, 1_100_000_009))
    await sshpipe_ok(
        "get", "-q", "-p", *server.cli_options(), server.spec("theirs.sh"), str(here / "theirs.sh")
    )
    down = (here / "theirs.sh").stat()
    assert (oct(down.st_mode & 0o7777), int(down.st_mtime)) == (oct(0o640), 1_100_000_009)


@each_server()
async def test_p_over_files_alike_in_everything_but_bytes_replaces_them(
    server: Peer, here: Path
) -> None:
    """Each rename is proven by what the destination shows after it; here the old files
    show what the new ones will (size, mode, times: a -p re-upload of a tree's edited
    files), so each temporary file's mtime is marked first and put back after."""
    times = (1_000_000_000, 1_000_000_007)
    for name in ("a.bin", "b.bin"):
        for path in (here / "tree" / name, server.root / "up" / "tree" / name):
            path.parent.mkdir(parents=True, exist_ok=True)
            random_file(path, 5000)
            path.chmod(0o640)
            os.utime(path, times)
    await sshpipe_ok(
        "put", "-q", "-r", "-p", *server.cli_options(), str(here / "tree"), server.spec("up")
    )
    for name in ("a.bin", "b.bin"):
        up = server.root / "up" / "tree" / name
        assert up.read_bytes() == (here / "tree" / name).read_bytes(), name
        assert (oct(up.stat().st_mode & 0o7777), int(up.stat().st_mtime)) == (oct(0o640), times[1])
    assert_no_temps(server)


@each_server()
async def test_verify_reports_the_check_it_made(server: Peer, here: Path) -> None:
    data = random_file(here / "checked.bin", 300_000)
    put = await sshpipe_ok(
        "put",
        "--verify",
        "--json",
        *server.cli_options(),
        str(here / "checked.bin"),
        server.spec("checked.bin"),
    )
    got = await sshpipe_ok(
        "get",
        "--verify",
        "--json",
        *server.cli_options(),
        server.spec("checked.bin"),
        str(here / "back.bin"),
    )
    levels = (json.loads(put.stdout)["verified"], json.loads(got.stdout)["verified"])
    print(f"{server.name}: --verify checked put by {levels[0]}, get by {levels[1]}")
    # What sshpipe took the server to be, and learned of it by trying (--json "server").
    software, order, probed = PROFILE[server.name]
    for done, block in ((put, "write_block"), (got, "read_block")):
        shown = json.loads(done.stdout)["server"]
        assert shown["software"].startswith(software), shown
        assert shown["symlink_order"] == order, shown
        # Without limits@openssh.com the block is found by trying: 255 KiB taken whole.
        assert shown["learned"].get(block) == (261120 if probed else None), shown
    assert levels == (BEST_CHECK[server.name],) * 2, levels
    assert (server.root / "checked.bin").read_bytes() == data
    assert (here / "back.bin").read_bytes() == data
    assert_no_temps(server)


@each_server()
async def test_get_expands_a_remote_glob(server: Peer, here: Path) -> None:
    (server.root / "logs").mkdir()
    wanted = {
        name: random_file(server.root / "logs" / name, 100 + len(name))
        for name in ("a.gz", "b.gz", "ünï.gz")
    }
    random_file(server.root / "logs/c.txt", 10)
    await sshpipe_ok("get", "-q", *server.cli_options(), server.spec("logs/*.gz"), str(here))
    assert {p.name: p.read_bytes() for p in here.iterdir()} == wanted


# -- trees -------------------------------------------------------------------------


@each_server()
async def test_put_r_copies_the_tree_entry_by_entry(server: Peer, tree: Path) -> None:
    # Where a server resolves a relative path (its working directory, the
    # served root's top for all but sshd) nothing may appear either.
    around = sorted(os.listdir(server.root.parent))
    await sshpipe_ok("put", "-r", "-q", *server.cli_options(), str(tree), server.spec("up"))
    assert_same_tree(tree, server.root / "up")
    assert os.listdir(server.root) == ["up"]
    assert sorted(os.listdir(server.root.parent)) == around
    assert_no_temps(server)


@each_server(proftpd=READLINK_RESOLVED)
async def test_get_r_copies_the_tree_entry_by_entry(server: Peer, tree: Path, here: Path) -> None:
    shutil.copytree(tree, server.root / "there", symlinks=True)
    await sshpipe_ok(
        "get", "-r", "-q", *server.cli_options(), server.spec("there"), str(here / "down")
    )
    assert_same_tree(tree, here / "down")
    assert leftover_temps(here) == []


@each_server()
async def test_put_r_of_300_files_holds_at_most_128_handles_on_a_channel(
    server: Peer, tmp_path: Path, emulated_link: EmulatedLink
) -> None:
    """More files than Green End's 128-slot handle table, all on one channel.

    One channel (as a server allowing one session would force) and a 50 ms
    link put every OPEN out before the first reply, so a client that does not
    hold its per-channel cap overruns it in every run; on loopback that
    depends on timing. Green End then writes past its table (its channel
    dies, or it goes on with memory overwritten), so the handles the server
    process holds are counted too.
    """
    flat = tmp_path / "flat"
    flat.mkdir()
    for i in range(FLAT_FILES):
        random_file(flat / f"n{i:03}.txt", 1 + i * 7)
    one = ["--connections", "1", "--channels-per-connection", "1"]
    async with emulated_link(server, LinkSpec(rtt=0.05)) as (_, far):
        with peak_open_files(server.root) as handles:
            done = await run_cli_async(
                "put", "-r", "-q", *one, *far.cli_options(), str(flat), far.spec("flat")
            )
    print(f"{server.name}: at most {handles.peak} files open on the server's channel")
    assert (done.returncode, done.stderr) == (0, "")
    assert_same_tree(flat, server.root / "flat")
    assert_no_temps(server)
    if handles.peak == 0 and handles.unreadable:
        pytest.skip(f"{server.name}'s descriptors are hidden from this user; root sees them")
    assert 0 < handles.peak <= HANDLES_PER_CHANNEL


# -- resume after SIGKILL ----------------------------------------------------------


async def _killed_once_partial(args: list[str], partial: Path) -> None:
    """Start a ``--resume`` copy held to one small request at a time; SIGKILL it mid-way."""
    throttle = ["-B", "16K", "-R", "1", "--channels", "1", "--connections", "1"]
    env = {k: v for k, v in os.environ.items() if k != "SSHPIPE_DEBUG"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "sshpipe",
        args[0],
        "--resume",
        "-q",
        *throttle,
        *args[1:],
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    for _ in range(3000):
        if partial.exists() and partial.stat().st_size > 2 * MiB:
            break
        if proc.returncode is not None:
            break
        await asyncio.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGKILL)
    _, err = await proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"ended before it was killed: {err.decode()}"
    assert partial.exists()


@each_server()
@pytest.mark.parametrize("direction", ["get", "put"])
async def test_resume_after_sigkill_ends_identical(
    server: Peer, here: Path, huge: Path, direction: str
) -> None:
    if direction == "get":
        shutil.copyfile(huge, server.root / "huge.bin")
        args = ["get", *server.cli_options(), server.spec("huge.bin"), str(here / "huge.bin")]
        partial, final = here / ".huge.bin.sshpipe.partial", here / "huge.bin"
    else:
        args = ["put", *server.cli_options(), str(huge), server.spec("huge.bin")]
        partial, final = server.root / ".huge.bin.sshpipe.partial", server.root / "huge.bin"
    await _killed_once_partial(args, partial)
    assert not final.exists()
    done = await sshpipe_ok(args[0], "--resume", "--json", *args[1:])
    stats = json.loads(done.stdout)
    assert 0 < stats["resumed_bytes"] < HUGE, stats["resumed_bytes"]
    assert final.read_bytes() == huge.read_bytes()
    assert not partial.exists()
    assert_no_temps(server)


# -- errors ------------------------------------------------------------------------


@each_server()
async def test_a_missing_remote_file_exits_4(server: Peer, here: Path) -> None:
    done = await run_cli_async(
        "get", *server.cli_options(), server.spec("nope.bin"), str(here / "out")
    )
    assert_one_line_error(done, 4, "nope.bin")
    assert list(here.iterdir()) == []


@each_server()
async def test_a_remote_directory_that_refuses_writes_exits_4(server: Peer, here: Path) -> None:
    (server.root / "locked").mkdir()
    random_file(here / "in.bin", 1000)
    with unwritable(server.root / "locked"):
        done = await run_cli_async(
            "put", *server.cli_options(), str(here / "in.bin"), server.spec("locked/in.bin")
        )
    assert_one_line_error(done, 4, "locked")
    assert list((server.root / "locked").iterdir()) == []


@each_server()
async def test_a_local_directory_that_refuses_writes_exits_3(server: Peer, here: Path) -> None:
    random_file(server.root / "src.bin", 1000)
    (here / "locked").mkdir()
    with unwritable(here / "locked"):
        done = await run_cli_async(
            "get", *server.cli_options(), server.spec("src.bin"), str(here / "locked/out.bin")
        )
    assert_one_line_error(done, 3, "locked")
    assert list((here / "locked").iterdir()) == []


@each_server()
async def test_a_put_over_a_remote_directory_says_it_is_one_and_exits_4(
    server: Peer, here: Path
) -> None:
    random_file(here / "a.bin", 1000)
    (server.root / "d" / "a.bin").mkdir(parents=True)
    done = await run_cli_async("put", *server.cli_options(), str(here / "a.bin"), server.spec("d"))
    assert_one_line_error(done, 4, "d/a.bin", "is a directory")
    assert (server.root / "d" / "a.bin").is_dir()
    assert_no_temps(server)
