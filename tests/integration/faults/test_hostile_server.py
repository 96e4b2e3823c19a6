"""A malicious server, attack by attack (``sshpipe.testing.attacks``), through the command line.

Each test runs ``python -m sshpipe`` as a user would against a server that
attacks it, and checks the threat model: nothing outside the destination
changes (the victim directory, where planted links point, stays byte for
byte and mode for mode as it was), nothing the user did not ask for is
written, no control character reaches the terminal, memory stays bounded,
every hang ends, and the exit code is the documented one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sshpipe.testing.attacks import (
    ESCAPED_NAMES,
    MARKER,
    REAL_FILES,
    Disconnecting,
    Scenario,
    attack_server,
    endless_output,
    garbled_output,
    populate,
)
from sshpipe.testing.embedded import ProcessFactory, embedded_server
from sshpipe.testing.rawsftp import RawOptions, RawServer
from tests.support.cli import Run, run_sshpipe
from tests.support.files import leftover_temps
from tests.support.peers import Peer, from_embedded

# Every test here starts an in-process server of its own (asyncssh-based).
pytestmark = pytest.mark.asyncssh_server

# What the issue allows a process to reach on endless input, stopped.
MAX_RSS_MIB = 200
VICTIM_FILES = {"f": b"the victim's own file\n", "partial": b"partial\n", "journal": b"journal\n"}


def _state(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``root``: (mode, size, sha256 or link text), links not followed."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                what = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                what = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            else:
                what = ""
            found[os.path.relpath(path, root)] = (info.st_mode, info.st_size, what)
    found["."] = (os.lstat(root).st_mode, 0, "")
    return found


@dataclass
class Attack:
    """A hostile server, its victim, and the commands a test runs against it."""

    peer: Peer
    scenario: Scenario
    workdir: Path
    before: dict[str, tuple[int, int, str]]

    @property
    def victim(self) -> Path:
        return self.scenario.victim

    def spec(self, path: str) -> str:
        return f"{self.peer.user}@{self.peer.host}:{path}"

    async def run(self, *args: str, **options: Any) -> Run:
        """``python -m sshpipe VERB OPTIONS... ARGS``: the server's options go after the verb."""
        verb, *rest = args
        return await run_sshpipe(
            verb, *self.peer.cli_options(), *rest, workdir=self.workdir, **options
        )

    def assert_victim_untouched(self) -> None:
        assert _state(self.victim) == self.before, "something was written outside the destination"

    def assert_no_marker_anywhere(self) -> None:
        """No file the server planted was written under the test's directory (its root aside)."""
        for dirpath, _, filenames in os.walk(self.workdir):
            if dirpath.startswith(str(self.peer.root)):
                continue
            for name in filenames:
                path = Path(dirpath, name)
                if not path.is_symlink():
                    assert MARKER not in path.read_bytes(), f"planted file written: {path}"


@contextlib.asynccontextmanager
async def _attacking(
    tmp_path: Path,
    *,
    process_factory: ProcessFactory | None = None,
    server_factory: Callable[[], Any] | None = None,
) -> AsyncIterator[Attack]:
    victim = tmp_path / "victim"
    victim.mkdir()
    for name, data in VICTIM_FILES.items():
        (victim / name).write_bytes(data)
    scenario = Scenario(victim)
    async with embedded_server(
        tmp_path / "server",
        sftp_factory=attack_server(scenario),
        process_factory=process_factory,
        server_factory=server_factory,
    ) as server:
        populate(server.root)
        yield Attack(from_embedded(server), scenario, tmp_path, _state(victim))


@pytest.fixture
async def attack(tmp_path: Path) -> AsyncIterator[Attack]:
    async with _attacking(tmp_path) as hostile:
        yield hostile


def assert_terminal_safe(run: Run) -> None:
    """No control character on either stream, every stderr line sshpipe's own, no traceback."""
    for stream in (run.stdout, run.stderr):
        body = stream.replace("\n", "")  # line ends are ours; one inside a line would split it
        assert body.isprintable(), repr(stream[:2000])
    assert "Traceback" not in run.stderr
    assert all(line.startswith("sshpipe: ") for line in run.stderr.splitlines()), run.stderr


def entries(root: Path) -> list[str]:
    return sorted(_state(root)) if root.exists() else []


# -- 1-3: writes outside the destination ------------------------------------------------


async def test_a_glob_cannot_plant_a_link_and_write_through_it(attack: Attack) -> None:
    """``a`` (a link to the victim) then ``x/a`` (a directory named with a '/')."""
    out = attack.workdir / "out"
    out.mkdir()
    run = await attack.run("get", "-r", "-p", attack.spec("/gcol/*"), str(out))
    assert run.returncode == 8, run.stderr
    assert "unsafe name 'x/a'" in run.stderr
    assert_terminal_safe(run)
    # A glob's first match waits for a second (one or several sources?): the
    # unsafe name stops the glob before ``a`` is copied.
    assert os.listdir(out) == []
    attack.assert_victim_untouched()
    attack.assert_no_marker_anywhere()


async def test_a_tree_recreates_the_planted_link_and_enters_nothing_through_it(
    attack: Attack,
) -> None:
    out = attack.workdir / "out"
    run = await attack.run("get", "-r", "-p", attack.spec("/gcol"), str(out))
    assert run.returncode == 8, run.stderr
    assert "unsafe name 'x/a'" in run.stderr
    assert_terminal_safe(run)
    assert os.readlink(out / "a") == str(attack.victim)  # copied as a link, verbatim
    assert entries(out) == [".", "a"]
    attack.assert_victim_untouched()  # mode included: -p never chmods through the link
    attack.assert_no_marker_anywhere()


async def test_a_link_where_a_directory_goes_is_refused_whoever_planted_it(
    attack: Attack,
) -> None:
    """Planted before the run (by anyone): the listing's directory ``a`` is not entered."""
    out = attack.workdir / "out"
    (out / "suid").mkdir(parents=True)
    os.symlink(attack.victim, out / "suid" / "dir")
    run = await attack.run("get", "-r", "-p", attack.spec("/suid"), str(out))
    assert run.returncode == 3, run.stderr
    assert "is a symbolic link; a directory was expected" in run.stderr
    assert_terminal_safe(run)
    attack.assert_victim_untouched()


@pytest.mark.parametrize("resume", [True, False])
async def test_resume_names_a_server_lists_are_left_out(attack: Attack, resume: bool) -> None:
    out = attack.workdir / "out"
    options = ["--resume"] if resume else []
    run = await attack.run("get", "-r", *options, attack.spec("/resume"), str(out))
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("an sshpipe temporary or resume file") == 2, run.stderr
    assert_terminal_safe(run)
    assert entries(out) == [".", "big"]
    assert (out / "big").read_bytes() == REAL_FILES["resume/big"]
    attack.assert_victim_untouched()


async def test_links_planted_at_the_resume_names_are_replaced_not_followed(
    attack: Attack,
) -> None:
    out = attack.workdir / "out"
    out.mkdir()
    os.symlink(attack.victim / "partial", out / ".big.sshpipe.partial")
    os.symlink(attack.victim / "journal", out / ".big.sshpipe.journal")
    run = await attack.run("get", "--resume", "-q", attack.spec("/resume/big"), str(out / "big"))
    assert run.returncode == 0, run.stderr
    assert entries(out) == [".", "big"]  # the partial became big, the journal went
    assert not (out / "big").is_symlink()
    assert (out / "big").read_bytes() == REAL_FILES["resume/big"]
    attack.assert_victim_untouched()


async def test_inplace_twice_replaces_the_link_it_made_instead_of_writing_through_it(
    attack: Attack,
) -> None:
    out = attack.workdir / "out"
    out.mkdir()  # both runs land in out/inplace
    first = await attack.run("get", "-r", "--inplace", attack.spec("/inplace"), str(out))
    assert first.returncode == 0, first.stderr
    big = out / "inplace" / "big"
    assert os.readlink(big) == str(attack.victim / "f")  # the server said: a link
    attack.scenario.flipped = True  # now it says: a file
    second = await attack.run("get", "-r", "--inplace", attack.spec("/inplace"), str(out))
    assert second.returncode == 0, second.stderr
    assert not big.is_symlink()
    assert big.read_bytes() == REAL_FILES["inplace/big"]
    attack.assert_victim_untouched()
    # A single file too, to a name that is a link (here the user's own).
    os.symlink(attack.victim / "f", out / "mine")
    single = await attack.run(
        "get", "--inplace", "-q", attack.spec("/inplace/big"), str(out / "mine")
    )
    assert single.returncode == 0, single.stderr
    assert not (out / "mine").is_symlink()
    attack.assert_victim_untouched()


# -- 4: files the user never asked for --------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("get", "GLOB/*.txt"),
        ("get", "-r", "GLOB/*"),
    ],
)
async def test_a_glob_takes_no_name_with_a_slash(attack: Attack, args: tuple[str, ...]) -> None:
    out = attack.workdir / "out"
    out.mkdir()
    *flags, pattern = args
    run = await attack.run(*flags, attack.spec(pattern.replace("GLOB", "/glob")), str(out) + "/")
    assert run.returncode == 8, run.stderr
    assert "unsafe name" in run.stderr
    assert_terminal_safe(run)
    # The glob stops at the unsafe name; the real matches listed before it may
    # have been copied already (its matches stream: they are never collected).
    assert set(os.listdir(out)) <= {"a.txt", "b.txt"}
    attack.assert_no_marker_anywhere()
    attack.assert_victim_untouched()


# -- 5: privileges -----------------------------------------------------------------------


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    """The umask the commands started meanwhile inherit."""
    before = os.umask(mask)
    try:
        yield
    finally:
        os.umask(before)


@pytest.mark.parametrize(("umask", "others"), [(0o022, 0), (0o002, 0), (0, 0o002)])
async def test_p_keeps_permissions_but_never_setuid_setgid_or_a_servers_write_for_others(
    attack: Attack, umask: int, others: int
) -> None:
    """A server's 7777 is 0775 here (1775 for a directory: sticky only ever protects),
    unless the user's own umask lets their files be written by others."""
    out = attack.workdir / "out"
    with _umask(umask):
        run = await attack.run("get", "-r", "-p", attack.spec("/suid"), str(out))
        single = await attack.run("get", "-p", "-q", attack.spec("/suid/tool"), str(out / "one"))
    assert run.returncode == 0, run.stderr
    assert stat.S_IMODE(os.lstat(out / "tool").st_mode) == 0o775 | others
    assert stat.S_IMODE(os.lstat(out / "dir").st_mode) == 0o1775 | others
    assert stat.S_IMODE(os.lstat(out / "dir" / "inner").st_mode) == 0o755
    assert single.returncode == 0, single.stderr
    assert stat.S_IMODE(os.lstat(out / "one").st_mode) == 0o775 | others


# -- 6: the terminal ---------------------------------------------------------------------


async def test_names_and_server_text_reach_the_terminal_escaped(attack: Attack) -> None:
    out = attack.workdir / "out"
    tree = await attack.run("get", "-r", "-L", attack.spec("/esc"), str(out))
    assert tree.returncode == 0, tree.stderr
    assert_terminal_safe(tree)
    assert "symlink loop: /\\x1b]0;owned\\x07" in tree.stderr  # REALPATH text, escaped
    for name in ESCAPED_NAMES:  # legal names: copied, byte for byte
        assert os.path.exists(os.path.join(os.fsencode(out), name))
    listed = await attack.run("get", "-r", "--json", attack.spec("/esc"), str(attack.workdir / "j"))
    assert listed.returncode == 0, listed.stderr
    assert_terminal_safe(listed)
    json.loads(listed.stdout)
    denied = await attack.run("get", attack.spec("/esc/denied"), str(attack.workdir / "d"))
    assert denied.returncode == 4, denied.stderr
    assert_terminal_safe(denied)
    assert len(denied.stderr.splitlines()) == 1 and "\\x1b[2J" in denied.stderr
    attack.assert_victim_untouched()


async def test_a_disconnect_reason_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    async with _attacking(tmp_path, server_factory=Disconnecting) as attack:
        bye = await attack.run("get", attack.spec("/f"), str(tmp_path / "f"))
    assert bye.returncode == 5, bye.stderr
    assert_terminal_safe(bye)
    assert "server disconnected" in bye.stderr
    assert "\\x9b31m" in bye.stderr  # the DISCONNECT reason, its C1 CSI escaped


# -- 7: memory ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("how", ["tree", "glob"])
async def test_a_listing_that_never_ends_is_refused_in_bounded_memory(
    attack: Attack, how: str
) -> None:
    """A million entries stream through (and are checked for repeats); past that, exit 8."""
    out = attack.workdir / "out"
    out.mkdir()
    source = "/endless" if how == "tree" else "/endless/*.gz"
    run = await attack.run("get", "-r", attack.spec(source), str(out), limit=600)
    assert run.returncode == 8, run.stderr[-3000:]
    assert "listing refused: more than 1048576 entries" in run.stderr
    print(f"endless {how}: peak RSS {run.peak_rss_mib:.0f} MiB in {run.seconds:.1f} s")
    assert run.peak_rss_mib < MAX_RSS_MIB, run.peak_rss_mib
    assert_terminal_safe(run)
    assert len(run.stderr.splitlines()) < 1100  # the first 1,000 skipped fifos, then counted
    assert leftover_temps(out) == []


@pytest.mark.timing  # stops within 2.5 s
async def test_ctrl_c_in_an_endless_listing_stops_at_once_with_130(attack: Attack) -> None:
    out = attack.workdir / "out"
    run = await attack.run("get", "-r", attack.spec("/endless"), str(out), interrupt_after=3.0)
    assert run.returncode == 130, run.stderr[-2000:]
    assert run.seconds < 2.5, run.seconds
    assert run.stderr.splitlines()[-1] == "sshpipe: interrupted"
    assert leftover_temps(out) == []


@pytest.fixture
async def endless_commands(tmp_path: Path) -> AsyncIterator[Attack]:
    async with _attacking(tmp_path, process_factory=endless_output) as hostile:
        yield hostile


async def test_a_command_that_prints_without_end_is_refused(endless_commands: Attack) -> None:
    """``--verify``'s sha256sum (an exec), and a tree's shell (``sync``, ``sha256sum``)."""
    attack = endless_commands
    out = attack.workdir / "out"
    out.mkdir()
    single = await attack.run("get", "--verify", attack.spec("/resume/big"), str(out / "big"))
    assert single.returncode == 8, single.stderr
    assert "printed more than" in single.stderr
    assert single.peak_rss_mib < MAX_RSS_MIB
    assert_terminal_safe(single)
    assert os.listdir(out) == []  # nothing took the name, no temporary file left
    src = attack.workdir / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"a")
    tree = await attack.run("put", "-r", str(src), attack.spec("/up"))
    assert tree.returncode == 8, tree.stderr
    assert "printed more than" in tree.stderr
    assert tree.peak_rss_mib < MAX_RSS_MIB
    assert_terminal_safe(tree)


@pytest.mark.parametrize(
    ("verb", "level"), [("put", "hash"), ("put", "best"), ("get", "best")], ids=str
)
async def test_a_sha256sum_that_prints_no_hash_is_not_a_match(
    tmp_path: Path, verb: str, level: str
) -> None:
    """It was "runs no sha256sum" (--verify=hash), or a quiet fall back to the size (best):
    a server could turn the hash check off by printing garbage."""
    async with _attacking(tmp_path, process_factory=garbled_output) as attack:
        src = attack.workdir / "src.bin"
        src.write_bytes(os.urandom(100_000))
        (attack.peer.root / "src.bin").write_bytes(src.read_bytes())
        out = attack.workdir / "out"
        out.mkdir()
        paths = (
            [str(src), attack.spec("/up.bin")]
            if verb == "put"
            else [attack.spec("/src.bin"), str(out / "got.bin")]
        )
        run = await attack.run(verb, f"--verify={level}", *paths)
    assert run.returncode == 10, run.stderr
    assert "sha256sum on the server printed no hash that can be read" in run.stderr
    assert "not taken as a match" in run.stderr and len(run.stderr.splitlines()) == 1
    assert_terminal_safe(run)
    assert not (attack.peer.root / "up.bin").exists() and os.listdir(out) == []
    assert leftover_temps(attack.peer.root) == []


@pytest.mark.parametrize(
    ("handle_length", "code", "message"),
    [
        (4 * 1024 * 1024, 8, "out of bounds"),  # past the reply cap: never buffered
        (1000, 8, "handle of 1000 bytes"),
        (256, 0, ""),  # filexfer-02's largest: fine
    ],
)
async def test_oversized_handles_are_refused(
    tmp_path: Path, handle_length: int, code: int, message: str
) -> None:
    data = os.urandom(8 * 1024 * 1024)
    options = RawOptions(files={b"/f": data}, handle_length=handle_length)
    async with _attacking(tmp_path, server_factory=lambda: RawServer(options)) as attack:
        run = await attack.run("get", attack.spec("/f"), str(tmp_path / "f"))
    assert run.returncode == code, run.stderr
    assert message in run.stderr
    assert run.peak_rss_mib < MAX_RSS_MIB
    if code == 0:
        assert (tmp_path / "f").read_bytes() == data
    assert leftover_temps(tmp_path) == []


# -- 7b: trees without end ----------------------------------------------------------------


def _depth(root: Path) -> int:
    """Directories below ``root`` on its longest path."""
    return max((dirpath.count(os.sep) - str(root).count(os.sep) for dirpath, *_ in os.walk(root)))


def assert_bounded(run: Run, limit: str, seconds: float) -> None:
    """One line naming the limit, exit 8, bounded memory and time, nothing to the terminal."""
    assert run.returncode == 8, run.stderr[-3000:]
    assert limit in run.stderr.splitlines()[-1], run.stderr[-3000:]
    assert run.peak_rss_mib < MAX_RSS_MIB, run.peak_rss_mib
    assert run.seconds < seconds, run.seconds
    assert_terminal_safe(run)


@pytest.mark.parametrize(("where", "seconds"), [("/deep", 20), ("/wide", 30)])
async def test_a_tree_without_end_stops_at_the_depth_limit(
    attack: Attack, where: str, seconds: float
) -> None:
    """A chain of directories, and 100,000 directories in every directory: the stack of
    directories fills, one scanner goes down, and the limit is met at once."""
    out = attack.workdir / "out"
    run = await attack.run("get", "-r", attack.spec(where), str(out))
    print(f"{where}: peak RSS {run.peak_rss_mib:.0f} MiB in {run.seconds:.1f} s")
    assert_bounded(
        run, "more than 64 levels of directories (--max-depth raises the limit)", seconds
    )
    assert len(run.stderr.splitlines()) == 1, run.stderr[-3000:]
    assert _depth(out) == 63  # 64 levels made (the source's and 63 below it), no more
    attack.assert_victim_untouched()


async def test_a_link_loop_behind_a_realpath_that_never_repeats_stops_at_the_depth_limit(
    attack: Attack,
) -> None:
    """Two links to ``.`` in every directory: 2^64 directories by their paths, walked
    depth first, so the limit is met after a few hundred."""
    out = attack.workdir / "out"
    run = await attack.run(
        "get", "-r", "-L", "--max-depth", "20", attack.spec("/realpath"), str(out)
    )
    assert_bounded(run, "more than 20 levels of directories", 30)
    assert attack.scenario.realpaths < 20 * 2 * 16 * 4  # depth first, not 2^20 of them
    assert _depth(out) == 19
    attack.assert_victim_untouched()


async def test_a_link_loop_a_realpath_does_not_resolve_is_seen_all_the_same(
    attack: Attack,
) -> None:
    """``sub/up`` links to ``..``; REALPATH answers the path asked: the directory it leads
    to looks as the one above does (size, owner, mode, mtime), so it is the loop."""
    out = attack.workdir / "out"
    run = await attack.run("get", "-r", "-L", attack.spec("/unresolved"), str(out))
    assert run.returncode == 0, run.stderr
    assert "skipping /unresolved/sub/up: symlink loop" in run.stderr
    assert entries(out) == [".", "sub", "sub/f.txt"]


@pytest.mark.slow
async def test_an_endless_listing_of_long_names_is_refused_by_their_size(
    attack: Attack,
) -> None:
    """1.9 KB names shaped like sshpipe's temporary files: each left out, and remembered
    (a repeat is refused) in a few bytes; the listing ends past 256 MiB of names."""
    out = attack.workdir / "out"
    run = await attack.run("get", "-r", attack.spec("/longnames"), str(out), limit=300)
    print(f"long names: peak RSS {run.peak_rss_mib:.0f} MiB in {run.seconds:.1f} s")
    assert_bounded(run, "entries failed", 240)
    assert "listing refused: more than 256 MiB of names" in run.stderr
    assert len(run.stderr.splitlines()) < 1010  # the first 1,000 left out, then counted
    assert entries(out) == ["."]


@pytest.mark.slow
async def test_a_glob_over_wide_directories_streams_its_matches_in_bounded_memory(
    attack: Attack,
) -> None:
    """``*/*`` over 1,000 directories of 100,000 names: matches are placed as they come,
    never collected, and refused past what one directory's listing may hold."""
    out = attack.workdir / "out"
    out.mkdir()
    run = await attack.run("get", "-r", attack.spec("/globwide/*/*"), str(out), limit=300)
    print(f"glob */*: peak RSS {run.peak_rss_mib:.0f} MiB in {run.seconds:.1f} s")
    assert_bounded(run, "/globwide/*/*: listing refused: more than 256 MiB of names matched", 240)
    assert os.listdir(out) == []  # fifos: left out, each
    attack.assert_victim_untouched()


# -- 8: hangs ----------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["/silent/f", "/slow/f"])
async def test_a_server_that_does_not_answer_is_given_up_on_after_the_stall_timeout(
    attack: Attack, where: str
) -> None:
    out = attack.workdir / "out"
    out.mkdir()
    run = await attack.run(
        "get", "--stall-timeout", "1", "--retries", "0", attack.spec(where), str(out / "f")
    )
    assert run.returncode == 5, run.stderr
    assert "no reply" in run.stderr and "1 s" in run.stderr
    assert run.seconds < 10, run.seconds
    assert_terminal_safe(run)
    assert os.listdir(out) == []


async def test_a_limits_request_never_answered_is_given_up_on(tmp_path: Path) -> None:
    options = RawOptions(files={b"/f": b"x"}, limits_silent=True)
    async with _attacking(tmp_path, server_factory=lambda: RawServer(options)) as attack:
        run = await attack.run(
            "get", "--stall-timeout", "1", "--retries", "0", attack.spec("/f"), str(tmp_path / "f")
        )
    assert run.returncode == 5, run.stderr
    assert "no reply" in run.stderr and run.seconds < 10
    assert not (tmp_path / "f").exists()


async def test_a_file_that_never_ends_is_copied_in_flat_memory_and_ctrl_c_cleans_up(
    attack: Attack,
) -> None:
    """1 TiB of zeros as fast as loopback goes: RSS stays flat, Ctrl-C removes the partial."""
    out = attack.workdir / "out"
    out.mkdir()
    run = await attack.run("get", attack.spec("/huge/f"), str(out / "f"), interrupt_after=4.0)
    assert run.returncode == 130, run.stderr
    assert run.peak_rss_mib < MAX_RSS_MIB, run.peak_rss_mib
    assert os.listdir(out) == []


@pytest.mark.timing  # stops within 2.5 s
@pytest.mark.parametrize("interrupts", [1, 2])
async def test_ctrl_c_stops_a_command_waiting_on_a_silent_server(
    attack: Attack, interrupts: int
) -> None:
    """The default stall timeout is a minute; Ctrl-C does not wait for it."""
    out = attack.workdir / "out"
    out.mkdir()
    run = await attack.run(
        "get", attack.spec("/silent/f"), str(out / "f"), interrupt_after=2.0, interrupts=interrupts
    )
    assert run.returncode == 130, run.stderr
    assert run.seconds < 2.5, run.seconds
    assert run.stderr.strip() == "sshpipe: interrupted"
    assert os.listdir(out) == []


# -- 9-12: lies and odd servers ----------------------------------------------------------


async def test_a_nul_in_link_text_fails_that_entry_alone(attack: Attack) -> None:
    out = attack.workdir / "out"
    run = await attack.run("get", "-r", attack.spec("/nullink"), str(out))
    assert run.returncode == 8, run.stderr
    assert "unsafe link target" in run.stderr
    assert_terminal_safe(run)
    assert entries(out) == [".", "ok.txt"]
    assert (out / "ok.txt").read_bytes() == REAL_FILES["nullink/ok.txt"]


async def test_a_rename_that_lies_is_reported(attack: Attack) -> None:
    src = attack.workdir / "f.bin"
    src.write_bytes(os.urandom(100_000))
    run = await attack.run("put", "--verify=size", str(src), attack.spec("/lying/f.bin"))
    assert run.returncode == 8, run.stderr
    assert "said it renamed" in run.stderr and "temporary file is still there" in run.stderr
    assert_terminal_safe(run)
    assert os.listdir(attack.peer.root / "lying") == [".keep"]  # its temporary file removed
    tree = attack.workdir / "tree"
    tree.mkdir()
    (tree / "a.txt").write_bytes(b"a")
    run = await attack.run("put", "-r", str(tree), attack.spec("/lying/tree"))
    assert run.returncode == 8, run.stderr
    assert "said it renamed" in run.stderr


# A file already at the destination, alike in size, mode and times: a look at the
# size alone (or, with -p, at every attribute SFTP shows) cannot tell it from the upload.
TWIN_SIZE = 100_000
TWIN_TIMES = (1_000_000_000, 1_000_000_007)


def _twins(local: Path, remote: Path) -> bytes:
    """Different bytes at ``local`` and ``remote``, alike in everything else; the remote's."""
    old = os.urandom(TWIN_SIZE)
    for path, data in ((local, os.urandom(TWIN_SIZE)), (remote, old)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o644)
        os.utime(path, TWIN_TIMES)
    return old


@pytest.mark.parametrize("options", [(), ("--verify",), ("-p",)], ids=["plain", "verify", "p"])
@pytest.mark.parametrize("where", ["lying", "unlinking"])
async def test_a_rename_that_lies_over_a_file_of_the_same_size_is_reported(
    attack: Attack, where: str, options: tuple[str, ...]
) -> None:
    """Did nothing, or removed the temporary name and left the old file: exit 8 either way."""
    dest = attack.peer.root / where / "f.bin"
    old = _twins(attack.workdir / "f.bin", dest)
    run = await attack.run(
        "put", *options, str(attack.workdir / "f.bin"), attack.spec(f"/{where}/f.bin")
    )
    assert run.returncode == 8, run.stderr
    assert "said it renamed" in run.stderr and "verified" not in run.stdout
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert_terminal_safe(run)
    assert dest.read_bytes() == old
    assert sorted(os.listdir(dest.parent)) == [".keep", "f.bin"]  # its temporary file removed


@pytest.mark.parametrize(
    ("where", "options"),
    [("lying", ("-p",)), ("unlinking", ()), ("unlinking", ("-p",))],
    ids=["lying-p", "unlinking", "unlinking-p"],
)
async def test_a_tree_whose_renames_lie_over_files_of_the_same_size_fails_them(
    attack: Attack, where: str, options: tuple[str, ...]
) -> None:
    """A tree's small files (with -p: sent with the source's times, as the old ones have)."""
    tree, dest = attack.workdir / "tree", attack.peer.root / where / "tree"
    old = {name: _twins(tree / name, dest / name) for name in ("a.bin", "b.bin")}
    os.utime(tree, TWIN_TIMES)  # -p sets the directory's times too: nothing else differs
    run = await attack.run("put", "-r", *options, str(tree), attack.spec(f"/{where}"))
    assert run.returncode == 8, run.stderr
    assert "said it renamed" in run.stderr, run.stderr  # a server that lies stops the tree
    assert_terminal_safe(run)
    assert {name: (dest / name).read_bytes() for name in old} == old
    assert sorted(os.listdir(dest)) == ["a.bin", "b.bin"]  # the temporary files removed


async def test_limits_too_small_to_be_true_are_not_believed(tmp_path: Path) -> None:
    data = os.urandom(1024 * 1024)
    options = RawOptions(files={b"/f": data}, limits=(1000, 1000, 1000, 64))
    async with _attacking(tmp_path, server_factory=lambda: RawServer(options)) as attack:
        run = await attack.run("get", "--json", attack.spec("/f"), str(tmp_path / "f"))
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "f").read_bytes() == data
    stats = json.loads(run.stdout)
    assert stats["block_size"] >= 4096 and stats["requests"] <= 300, stats


async def test_a_name_that_is_not_utf8_is_copied_byte_for_byte(attack: Attack) -> None:
    out = attack.workdir / "out"
    run = await attack.run("get", "-r", attack.spec("/latin1"), str(out))
    assert run.returncode == 0, run.stderr
    assert_terminal_safe(run)
    assert os.listdir(os.fsencode(out)) == [b"caf\xe9.txt"]
    into = attack.workdir / "globbed"
    into.mkdir()
    glob = await attack.run("get", attack.spec("/latin1/*.txt"), str(into) + "/")
    assert glob.returncode == 0, glob.stderr
    copied = Path(os.fsdecode(os.path.join(os.fsencode(into), b"caf\xe9.txt")))
    assert copied.read_bytes() == b"latin-1 name\n"
