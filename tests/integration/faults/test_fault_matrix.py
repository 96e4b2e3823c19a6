"""The fault matrix: a real sshd killed, restarted, re-keyed, kept down or cut off mid-copy.

Each fault meets a get and a put, of one file and of a tree, through the
command line, against an sshd of the test's own (``restartable_openssh_server``:
killed means the listener and every session SIGKILLed, as a crash or an OOM
kill leaves it) behind the link emulator (40 Mbit/s, so the fault lands
mid-copy; a partition is the link delivering nothing either way). Every case
holds the command to the same four things:

- the exit code documented for what happened (0 when the fault heals within
  ``--retries``);
- at most one line saying what went wrong (besides the ledger's one line of
  temporary files left), never a traceback, never exit 70;
- a claimed success is the source, byte for byte, entry for entry;
- nothing left: once the command succeeded, or after the next run to the same
  place, no temporary file on either side.

Also: the server's disk full (a 1 MiB tmpfs, as root), and two writers of one
destination at once. A copy SIGKILLed at seeded points, and a put whose
reconnect meets a server gone or re-keyed, are ``test_ledger.py``'s; the
local disk full, ``test_disk_full.py``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from sshpipe.testing.linkemu import LinkEmulator, LinkSpec
from sshpipe.testing.sshd import RestartableSSHD, restartable_openssh_server
from tests.support.cli import Run, run_sshpipe
from tests.support.files import leftover_temps, mounted_tmpfs, random_file
from tests.support.peers import Peer, from_openssh
from tests.support.trees import compare_trees

pytestmark = [pytest.mark.openssh, pytest.mark.usefixtures("state_home")]

MiB = 1024 * 1024
FILE_SIZE = 6 * MiB  # ~1.3 s at 40 Mbit/s: the fault lands after its first MiB
LINK = LinkSpec(rtt=0.004, rate=40e6)
STALL = 2.0  # --stall-timeout of every case: a partition is found within it
# A fault lands once this much has crossed the link in the direction of the data.
FAULT_AT = MiB
DIRECTIONS = ["get", "put"]
SHAPES = [pytest.param(False, id="file"), pytest.param(True, id="tree")]


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[RestartableSSHD]:
    with restartable_openssh_server(tmp_path / "sshd") as server:
        yield server


@dataclass
class Case:
    """One copy of the matrix: its source, destination, and the command for it."""

    direction: str
    tree: bool
    here: Path  # the local side's directory
    there: Path  # the server's directory (sshd is not chrooted)
    source: Path
    target: Path
    argv: list[str]

    @property
    def data_flows(self) -> str:
        return "down" if self.direction == "get" else "up"

    @property
    def copy(self) -> Path:
        """Where the source is copied to: a tree run again after one that failed lands
        inside the directory that one made (scp's rule), else the target itself."""
        inside = self.target / self.source.name
        return inside if self.tree and inside.is_dir() else self.target

    def assert_copied(self) -> None:
        if self.tree:
            assert compare_trees(self.source, self.copy) == []
        else:
            assert self.copy.read_bytes() == self.source.read_bytes()

    def assert_nothing_left(self) -> None:
        assert leftover_temps(self.here) == [] and leftover_temps(self.there) == []


def _case(sshd: RestartableSSHD, far: Peer, direction: str, tree: bool) -> Case:
    here = sshd.info.root.parent / "here"
    there = sshd.info.root / "there"
    here.mkdir()
    there.mkdir()
    src_side, dst_side = (there, here) if direction == "get" else (here, there)
    source = src_side / "src"
    if tree:
        for i in range(30):  # small files through the pipeline, one big through the engine
            path = source / f"d{i % 3}" / f"f{i:02}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            random_file(path, 16 * 1024)
        random_file(source / "big.bin", FILE_SIZE)
    else:
        random_file(source, FILE_SIZE)
    target = dst_side / "dst"
    remote, local = (source, target) if direction == "get" else (target, source)
    words = [far.spec(str(remote.relative_to(sshd.info.root))), str(local)]
    if direction == "put":
        words.reverse()
    options = [*far.cli_options(), "-q", "--stall-timeout", str(STALL)]
    argv = [direction, *(["-r"] if tree else []), *options, *words]
    return Case(direction, tree, here, there, source, target, argv)


@asynccontextmanager
async def _behind_link(
    sshd: RestartableSSHD, workdir: Path
) -> AsyncIterator[tuple[LinkEmulator, Peer]]:
    peer = from_openssh(sshd.info, sshd.info.root)
    async with LinkEmulator(sshd.info.host, sshd.info.port, LINK) as emu:
        yield emu, peer.behind(emu.port, workdir)


async def _carried(emu: LinkEmulator, direction: str, nbytes: int) -> None:
    async with asyncio.timeout(30):
        while (emu.stats.bytes_down if direction == "down" else emu.stats.bytes_up) < nbytes:  # noqa: ASYNC110
            await asyncio.sleep(0.01)  # the emulator has no event for "so many bytes carried"


async def _run_with_fault(
    case: Case, emu: LinkEmulator, fault: Callable[[], object], *extra: str
) -> Run:
    """The case's command, with ``fault`` done once the data has begun to flow."""
    command = asyncio.ensure_future(run_sshpipe(*case.argv[:1], *extra, *case.argv[1:], limit=90))
    try:
        await _carried(emu, case.data_flows, FAULT_AT)
    except BaseException:
        command.cancel()
        raise
    done = fault()
    if asyncio.iscoroutine(done):
        await done
    return await command


def _why(run: Run) -> list[str]:
    """The lines saying what went wrong (the ledger's line of temporary files left aside)."""
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    assert run.returncode != 70, run.stderr
    lines = [line for line in run.stderr.strip().splitlines() if line]
    assert all(line.startswith("sshpipe: ") for line in lines), run.stderr
    return [line for line in lines if "temporary file(s)" not in line]


# -- sshd killed ----------------------------------------------------------------------


@pytest.mark.parametrize("tree", SHAPES)
@pytest.mark.parametrize("direction", DIRECTIONS)
async def test_sshd_killed_and_back_two_seconds_later_the_copy_goes_on(
    sshd: RestartableSSHD, tmp_path: Path, direction: str, tree: bool
) -> None:
    async with _behind_link(sshd, tmp_path) as (emu, far):
        case = _case(sshd, far, direction, tree)

        async def crash_and_restart() -> None:
            sshd.kill()
            await asyncio.sleep(2)
            sshd.start()

        run = await _run_with_fault(case, emu, crash_and_restart)
    assert run.returncode == 0, run.stderr
    assert _why(run) == []
    case.assert_copied()
    case.assert_nothing_left()


@pytest.mark.parametrize("tree", SHAPES)
@pytest.mark.parametrize("direction", DIRECTIONS)
async def test_sshd_back_with_another_host_key_is_refused_in_one_line(
    sshd: RestartableSSHD, tmp_path: Path, direction: str, tree: bool
) -> None:
    async with _behind_link(sshd, tmp_path) as (emu, far):
        case = _case(sshd, far, direction, tree)

        def reinstalled() -> None:
            sshd.kill()
            sshd.start(new_host_key=True)

        run = await _run_with_fault(case, emu, reinstalled)
        assert run.returncode == 7, run.stderr
        (why,) = _why(run)
        assert "host key" in why and "SHA256:" in why, why
        assert not case.copy.exists() or case.tree  # a tree keeps the files it finished
        # The user checks the new key and trusts it: the next run finishes and sweeps.
        far.known_hosts.write_text(sshd.host_key_line(emu.port))
        again = await run_sshpipe(*case.argv, limit=60)
    assert again.returncode == 0, again.stderr
    case.assert_copied()
    case.assert_nothing_left()


@pytest.mark.parametrize("tree", SHAPES)
@pytest.mark.parametrize("direction", DIRECTIONS)
async def test_sshd_kept_down_past_the_retries_ends_in_one_line_and_the_next_run_sweeps(
    sshd: RestartableSSHD, tmp_path: Path, direction: str, tree: bool
) -> None:
    async with _behind_link(sshd, tmp_path) as (emu, far):
        case = _case(sshd, far, direction, tree)
        run = await _run_with_fault(case, emu, sshd.kill, "--retries", "2")
        assert run.returncode == 5, run.stderr
        assert len(_why(run)) == 1, run.stderr
        sshd.start()
        again = await run_sshpipe(*case.argv, limit=60)
    assert again.returncode == 0, again.stderr
    case.assert_copied()
    case.assert_nothing_left()


# -- a partition ------------------------------------------------------------------------


@pytest.mark.parametrize("tree", SHAPES)
@pytest.mark.parametrize("direction", DIRECTIONS)
async def test_a_partition_longer_than_the_stall_timeout_heals_and_the_copy_goes_on(
    sshd: RestartableSSHD, tmp_path: Path, direction: str, tree: bool
) -> None:
    async with _behind_link(sshd, tmp_path) as (emu, far):
        case = _case(sshd, far, direction, tree)
        run = await _run_with_fault(case, emu, lambda: emu.stall(2 * STALL))
    assert run.returncode == 0, run.stderr
    assert _why(run) == []
    case.assert_copied()
    case.assert_nothing_left()


@pytest.mark.parametrize("direction", DIRECTIONS)
async def test_a_partition_for_good_ends_within_the_retries_and_the_next_run_sweeps(
    sshd: RestartableSSHD, tmp_path: Path, direction: str
) -> None:
    async with _behind_link(sshd, tmp_path) as (emu, far):
        case = _case(sshd, far, direction, tree=False)
        budget = ["--retries", "1", "-o", "ConnectTimeout=2"]
        run = await _run_with_fault(case, emu, lambda: emu.stall(3600), *budget)
        port = emu.port
    assert run.returncode == 5, run.stderr
    assert len(_why(run)) == 1, run.stderr
    # A stall timeout, a connect timeout, the backoff: it ends, it does not hang.
    assert run.after_ready < 20, run.stderr
    assert not case.target.exists()
    # The link comes back (the same address: the ledger's record is per server).
    async with LinkEmulator(sshd.info.host, sshd.info.port, LINK, listen_port=port):
        again = await run_sshpipe(*case.argv, limit=60)
    assert again.returncode == 0, again.stderr
    case.assert_copied()
    case.assert_nothing_left()


# -- the server's disk full, two writers ----------------------------------------------------


@pytest.fixture
def server_disk_full(needs_root: None, sshd: RestartableSSHD) -> Iterator[Path]:
    """A 1 MiB tmpfs inside the server's root (mounting needs root)."""
    with mounted_tmpfs(sshd.info.root / "small-disk", 1 << 20) as mount:
        yield mount


@pytest.mark.parametrize("tree", SHAPES)
async def test_a_put_onto_a_full_server_disk_fails_and_leaves_no_partial_file(
    sshd: RestartableSSHD, server_disk_full: Path, tmp_path: Path, tree: bool
) -> None:
    peer = from_openssh(sshd.info, sshd.info.root)
    source = tmp_path / "src"
    if tree:
        source.mkdir()
        for i in range(12):  # 3 MiB in 256 KiB files: some fit, the rest fail
            random_file(source / f"f{i:02}.bin", 256 * 1024)
    else:
        random_file(source, 3 * MiB)
    target = server_disk_full / "dst"
    argv = ["put", *(["-r"] if tree else []), *peer.cli_options(), str(source)]
    run = await run_sshpipe(*argv, peer.spec(str(target.relative_to(sshd.info.root))), limit=60)
    assert run.returncode == 4, run.stderr
    why = _why(run)
    assert why and (len(why) == 1 or tree), run.stderr
    assert leftover_temps(server_disk_full) == []
    if tree:  # what took its name is whole
        for copied in target.iterdir():
            assert copied.read_bytes() == (source / copied.name).read_bytes()
    else:
        assert not target.exists()


@pytest.mark.parametrize("direction", DIRECTIONS)
async def test_two_writers_of_one_destination_leave_one_whole_copy(
    sshd: RestartableSSHD, tmp_path: Path, direction: str
) -> None:
    async with _behind_link(sshd, tmp_path) as (_, far):
        here, there = tmp_path / "here", sshd.info.root / "there"
        here.mkdir()
        there.mkdir()
        sources = [(here if direction == "put" else there) / f"src{i}" for i in range(2)]
        contents = {random_file(source, FILE_SIZE) for source in sources}
        target = (there if direction == "put" else here) / "dst"

        def argv(source: Path) -> list[str]:
            if direction == "put":
                remote = far.spec(str(target.relative_to(sshd.info.root)))
                return ["put", *far.cli_options(), str(source), remote]
            remote = far.spec(str(source.relative_to(sshd.info.root)))
            return ["get", *far.cli_options(), remote, str(target)]

        runs = await asyncio.gather(*(run_sshpipe(*argv(source), limit=60) for source in sources))
    for run in runs:
        assert run.returncode == 0, run.stderr
        assert _why(run) == []
    assert target.read_bytes() in contents
    assert leftover_temps(here) == [] and leftover_temps(there) == []
