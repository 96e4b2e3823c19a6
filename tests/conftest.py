"""Shared fixtures, and the markers they bring.

Fixtures: a real OpenSSH sshd, ProFTPD's mod_sftp and Green End's server behind
sshd (session-wide, from ``sshpipe.testing.plugin``), the in-process asyncssh
server, either behind the link emulator, a throwaway state directory for
journals, and a guard for tests that need root.

Markers (registered in pyproject.toml) are set here from the fixtures a test
uses, so ``-m`` selects by what a test needs rather than by file: ``openssh``,
``asyncssh_server``, ``proftpd``, ``greenend``, ``linkemu``, ``root``. A test
that starts a server or an emulator in its own body gets the marker from its
module's ``pytestmark``.

``needs_patches`` (set by hand) marks a test that asserts what one of
sshpipe's asyncssh patches does (a canary, a round-trip count): it skips,
saying why, where asyncssh runs stock (``SSHPIPE_ASYNCSSH_PATCHES=off``, as
scripts/test-as-user.sh runs, or a release the patches were not checked
against). Every other test must pass either way.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from sshpipe.testing.embedded import SFTPFactory, chrooted_sftp, embedded_server
from sshpipe.testing.hostile import faithful_links
from sshpipe.testing.linkemu import LinkEmulator, LinkSpec
from sshpipe.testing.proftpd import ProFTPDInfo
from sshpipe.testing.sshd import SSHServerInfo
from tests.support.peers import (
    PEER_PARAMS,
    EmulatedLink,
    Peer,
    from_embedded,
    from_greenend,
    from_openssh,
    from_proftpd,
)

# The real servers, session-wide: ``openssh``, ``proftpd``, ``greenend`` and the
# ``*_executable`` fixtures that find their programs.
pytest_plugins = ["sshpipe.testing.plugin", "tests.support.hangs"]

__all__ = [
    "asyncssh_patched",
    "asyncssh_peer",
    "emulated_link",
    "faulty_server",
    "greenend_peer",
    "link",
    "needs_root",
    "openssh_peer",
    "peer",
    "proftpd_peer",
    "slow_link",
    "state_home",
]

# The marker each fixture brings to every test that uses it, directly or through
# another fixture (``item.fixturenames`` is the whole closure). ``peer`` and the
# like mark each of their params instead (``PEER_PARAMS``).
FIXTURE_MARKERS = {
    "sshd_executable": "openssh",
    "proftpd_executable": "proftpd",
    "gesftpserver_executable": "greenend",
    "asyncssh_peer": "asyncssh_server",
    "faulty_server": "asyncssh_server",
    "emulated_link": "linkemu",
    "needs_root": "root",
}
# pytest-timeout's limit for tests marked slow (the default is in pyproject.toml).
SLOW_TIMEOUT = 900
# scripts/test.sh runs the suite on several pytest-xdist workers with
# ``--dist loadgroup``: tests carrying one of these markers go to a single
# worker, one after another, in one xdist group, so that two timing-sensitive
# tests never compete with each other for the link emulator's event loop and
# the CPU (each still runs beside tests that mostly wait on sockets). ``timing``
# is set by hand on tests that assert a tight wall-clock bound without the emulator.
SERIAL_MARKERS = ("linkemu", "timing")
SERIAL_GROUP = "serial"


# tryfirst: xdist's own hook turns the group mark into the node id's "@group"
# suffix, so the mark must be there before it runs.
# Why a ``needs_patches`` test skips where asyncssh runs stock.
STOCK_REASON = (
    "asserts an asyncssh patch's effect; asyncssh runs stock here "
    "(SSHPIPE_ASYNCSSH_PATCHES=off, or a release the patches were not checked against)"
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    from sshpipe.transport.asyncssh_patches import patches_enabled

    stock = not patches_enabled()
    for item in items:
        if stock and item.get_closest_marker("needs_patches"):
            item.add_marker(pytest.mark.skip(reason=STOCK_REASON))
        used = set(getattr(item, "fixturenames", ()))
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in used:
                item.add_marker(marker)
        if any(item.get_closest_marker(marker) for marker in SERIAL_MARKERS):
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))


@pytest.fixture
def openssh_peer(openssh: SSHServerInfo, tmp_path: Path) -> Peer:
    """The real sshd, with a fresh directory of its own for this test."""
    root = openssh.root / tmp_path.name
    root.mkdir()
    return from_openssh(openssh, root)


@pytest.fixture
def proftpd_peer(proftpd: ProFTPDInfo, tmp_path: Path) -> Peer:
    """ProFTPD's mod_sftp, with a fresh directory of its own for this test."""
    root = proftpd.root / tmp_path.name
    root.mkdir()
    return from_proftpd(proftpd, root)


@pytest.fixture
def greenend_peer(greenend: SSHServerInfo, tmp_path: Path) -> Peer:
    """Green End's server behind sshd, with a fresh directory of its own for this test."""
    root = greenend.root / tmp_path.name
    root.mkdir()
    return from_greenend(greenend, root)


@pytest.fixture
async def asyncssh_peer(tmp_path: Path) -> AsyncIterator[Peer]:
    async with embedded_server(tmp_path / "embedded") as server:
        yield from_embedded(server)


@pytest.fixture(params=PEER_PARAMS)
def peer(request: pytest.FixtureRequest) -> Peer:
    """Each test taking ``peer`` runs once against each real server."""
    fixture: Peer = request.getfixturevalue(f"{request.param}_peer")
    return fixture


@pytest.fixture(params=PEER_PARAMS)
async def tree_peer(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Peer]:
    """sshd, or asyncssh's server with readlink serving link text as stored."""
    if request.param == "openssh":
        yield request.getfixturevalue("openssh_peer")
        return
    async with embedded_server(tmp_path / "embedded", sftp_factory=faithful_links()) as server:
        yield from_embedded(server)


@pytest.fixture
def faulty_server(
    tmp_path: Path,
) -> Callable[[SFTPFactory], contextlib.AbstractAsyncContextManager[Peer]]:
    """Start the embedded server with a fault-injecting SFTPServer factory."""

    @contextlib.asynccontextmanager
    async def start(factory: SFTPFactory = chrooted_sftp) -> AsyncIterator[Peer]:
        async with embedded_server(tmp_path / "faulty", sftp_factory=factory) as server:
            yield from_embedded(server)

    return start


@pytest.fixture
def emulated_link(tmp_path: Path) -> EmulatedLink:
    """``async with emulated_link(peer, spec) as (emu, far)``: ``peer`` behind the emulator."""

    @contextlib.asynccontextmanager
    async def behind(peer: Peer, spec: LinkSpec) -> AsyncIterator[tuple[LinkEmulator, Peer]]:
        async with LinkEmulator(peer.host, peer.port, spec) as emu:
            yield emu, peer.behind(emu.port, tmp_path)

    return behind


@pytest.fixture
async def link(
    openssh_peer: Peer, emulated_link: EmulatedLink
) -> AsyncIterator[tuple[LinkEmulator, Peer]]:
    """sshd seen through a 2 ms emulated link whose connections the test can cut."""
    async with emulated_link(openssh_peer, LinkSpec(rtt=0.002)) as (emu, far):
        yield emu, far


@pytest.fixture
async def slow_link(
    openssh_peer: Peer, emulated_link: EmulatedLink
) -> AsyncIterator[tuple[Peer, LinkEmulator]]:
    """sshd behind a 40 Mbit/s link: 24 MiB take ~5 s, time to kill the copy mid-way."""
    async with emulated_link(openssh_peer, LinkSpec(rtt=0.004, rate=40e6)) as (emu, far):
        yield far, emu


@pytest.fixture(autouse=True, scope="session")
def _state_home_of_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every ledger record and journal goes to a throwaway directory, never the user's.

    Each upload and download keeps a record there while it runs, and a test
    that kills a copy leaves one behind. ``state_home`` gives a test its own.
    """
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if before is None:
        del os.environ["XDG_STATE_HOME"]
    else:
        os.environ["XDG_STATE_HOME"] = before


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A test that runs the command line's ``main`` in this process leaves its
    verbosity behind (``cli.verbosity``: sshpipe's logger at WARNING, asyncssh's
    at CRITICAL); a later test on the same worker that reads the log saw nothing."""
    loggers = [logging.getLogger(name) for name in ("", "sshpipe", "asyncssh")]
    before = [(log, log.level, list(log.handlers)) for log in loggers]
    yield
    for log, level, handlers in before:
        log.setLevel(level)
        log.handlers[:] = handlers


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Journals go to a throwaway state directory (CLI subprocesses inherit it).

    Modules whose every test writes journals use it with ``usefixtures``.
    """
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "sshpipe" / "resume"


@pytest.fixture
def asyncssh_patched() -> bool:
    """Whether sshpipe's asyncssh patches are in force in this run: for a test
    that checks a patch's effect in one line of many (a whole test that is about
    a patch is marked ``needs_patches`` instead)."""
    from sshpipe.transport.asyncssh_patches import patches_enabled

    return patches_enabled()


@pytest.fixture
def needs_root() -> None:
    """Skips the test unless it runs as root (scripts/test.sh runs the suite as root first)."""
    if os.geteuid() != 0:
        pytest.skip("needs root; the root run covers it")
