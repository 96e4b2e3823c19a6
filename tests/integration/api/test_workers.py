"""One file by worker processes (``--workers``), against a real sshd.

Each worker is a real child process with its own SSH connection: the copy
must come out byte for byte, a worker's failure must reach the user as the
single process's error (same class, message, exit code) with nothing left
behind, and cancelling must end every worker.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sshpipe
from tests.support.cli import run_cli
from tests.support.files import leftover_temps, random_file
from tests.support.peers import Peer

MiB = 1024 * 1024
SIZE = 9 * MiB + 12345  # over several stripe boundaries (1 MiB), not a multiple of a block


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_get_by_two_workers_is_byte_identical(openssh_peer: Peer, tmp_path: Path) -> None:
    random_file(openssh_peer.root / "src.bin", SIZE)
    config = sshpipe.TransferConfig(workers=2, verify="hash")
    async with openssh_peer.client(config) as client:
        stats = await client.get(openssh_peer.remote("src.bin"), str(tmp_path / "got.bin"))
    assert _sha(tmp_path / "got.bin") == _sha(openssh_peer.root / "src.bin")
    assert stats.bytes == SIZE
    assert stats.workers == 2 and stats.connections >= 2, stats  # one connection each at least
    assert stats.verified == "hash-remote"
    assert leftover_temps(tmp_path, openssh_peer.root) == []


@pytest.mark.parametrize(("compression", "workers"), [(None, 2), ("auto", 1)])
async def test_workers_beside_compression_auto(
    openssh_peer: Peer, tmp_path: Path, compression: str | None, workers: int
) -> None:
    # Auto only as the default (None): --workers wins, the workers copy plain.
    # Asked for by name, auto decides per file on this process's connections.
    random_file(openssh_peer.root / "src.bin", SIZE)
    config = sshpipe.TransferConfig(workers=2)
    async with openssh_peer.client(config, compression=compression) as client:  # type: ignore[arg-type]
        stats = await client.get(openssh_peer.remote("src.bin"), str(tmp_path / "got.bin"))
    assert _sha(tmp_path / "got.bin") == _sha(openssh_peer.root / "src.bin")
    assert stats.workers == workers, stats
    assert (stats.compression is not None) == (workers == 1), stats


async def test_put_by_two_workers_is_byte_identical(openssh_peer: Peer, tmp_path: Path) -> None:
    random_file(tmp_path / "src.bin", SIZE)
    config = sshpipe.TransferConfig(workers=2, verify="hash")
    async with openssh_peer.client(config) as client:
        stats = await client.put(str(tmp_path / "src.bin"), openssh_peer.remote("up.bin"))
    assert _sha(openssh_peer.root / "up.bin") == _sha(tmp_path / "src.bin")
    assert stats.bytes == SIZE and stats.workers == 2, stats
    assert stats.verified == "hash-remote"
    assert leftover_temps(tmp_path, openssh_peer.root) == []


def _workers_alive(parent: int | None = None) -> list[int]:
    """The worker processes of ``parent`` (default: this test process) still running."""
    parent = os.getpid() if parent is None else parent
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        state, ppid = stat.rpartition(")")[2].split()[:2]
        if state == "Z":
            continue  # exited, not reaped yet
        if int(ppid) == parent and b"sshpipe.workers.child" in cmdline:
            alive.append(int(entry))
    return alive


async def test_a_worker_refusing_a_changed_file_fails_the_get_cleanly(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file shrinks after the parent planned: each worker refuses it, with its own error."""
    from sshpipe.workers.crew import Crew

    source = openssh_peer.root / "src.bin"
    random_file(source, SIZE)
    run = Crew.run

    async def shrink_first(self: Crew, *args: object, **kwargs: object) -> object:
        os.truncate(source, SIZE // 2)  # planned for SIZE; the workers open it now
        return await run(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Crew, "run", shrink_first)
    async with openssh_peer.client(sshpipe.TransferConfig(workers=2)) as client:
        with pytest.raises(sshpipe.IntegrityError) as caught:
            await client.get(openssh_peer.remote("src.bin"), str(tmp_path / "got.bin"))
    assert str(caught.value) == (
        f"verify: {openssh_peer.remote('src.bin')}: changed size while it was copied "
        f"({SIZE} -> {SIZE // 2} bytes)"
    )
    assert caught.value.exit_code == 10 and caught.value.retryable
    assert not (tmp_path / "got.bin").exists()
    assert leftover_temps(tmp_path, openssh_peer.root) == []
    assert _workers_alive() == []


async def test_a_worker_finding_the_temp_file_gone_fails_the_put_cleanly(
    openssh_peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The remote temp file goes before the workers open it: their error names the user's path."""
    from sshpipe.workers import wire
    from sshpipe.workers.crew import Crew

    random_file(tmp_path / "src.bin", SIZE)
    run = Crew.run

    async def remove_first(self: Crew, jobs: list[wire.Job], *args: object) -> object:
        os.remove(jobs[0].remote)  # sshd is not chrooted: the remote path is a local one
        return await run(self, jobs, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Crew, "run", remove_first)
    remote = openssh_peer.remote("up.bin")
    async with openssh_peer.client(sshpipe.TransferConfig(workers=2)) as client:
        with pytest.raises(sshpipe.RemoteNotFound) as caught:
            await client.put(str(tmp_path / "src.bin"), remote)
    assert str(caught.value).startswith(f"remote: {remote}: "), str(caught.value)
    assert caught.value.exit_code == 4
    assert not (openssh_peer.root / "up.bin").exists()
    assert leftover_temps(tmp_path, openssh_peer.root) == []
    assert _workers_alive() == []


async def test_a_worker_that_dies_fails_the_get_and_leaves_nothing(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    random_file(openssh_peer.root / "src.bin", SIZE)
    killed: list[int] = []

    def kill_one(progress: sshpipe.Progress) -> None:
        if not killed and progress.bytes_done > 0:
            killed.extend(_workers_alive()[:1])
            os.kill(killed[0], 9)

    # Slow enough (two workers at 2 MiB/s each, the limit shared) that the kill lands mid-way.
    config = sshpipe.TransferConfig(workers=2, rate_limit=4 * MiB)
    async with openssh_peer.client(config) as client:
        with pytest.raises(sshpipe.SSHPipeError) as caught:
            await client.get(
                openssh_peer.remote("src.bin"), str(tmp_path / "got.bin"), progress=kill_one
            )
    assert killed
    assert re.fullmatch(r"worker process [12] ended \(exit code -9\)", str(caught.value))
    assert caught.value.exit_code == 1
    assert leftover_temps(tmp_path, openssh_peer.root) == []
    assert _workers_alive() == []


@pytest.mark.parametrize("direction", ["get", "put"])
async def test_cancelling_ends_every_worker_and_cleans_up(
    openssh_peer: Peer, tmp_path: Path, direction: str
) -> None:
    random_file(openssh_peer.root / "src.bin", SIZE)
    random_file(tmp_path / "src.bin", SIZE)
    started = asyncio.Event()

    def seen(progress: sshpipe.Progress) -> None:
        if progress.bytes_done > 0:
            started.set()

    config = sshpipe.TransferConfig(workers=2, rate_limit=4 * MiB)
    async with openssh_peer.client(config) as client:
        if direction == "get":
            copy = client.get(
                openssh_peer.remote("src.bin"), str(tmp_path / "got.bin"), progress=seen
            )
        else:
            copy = client.put(
                str(tmp_path / "src.bin"), openssh_peer.remote("up.bin"), progress=seen
            )
        task = asyncio.ensure_future(copy)
        await asyncio.wait_for(started.wait(), 10)
        assert len(_workers_alive()) == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert _workers_alive() == []
    assert not (tmp_path / "got.bin").exists() and not (openssh_peer.root / "up.bin").exists()
    assert leftover_temps(tmp_path, openssh_peer.root) == []


async def test_a_small_file_is_copied_by_one_process(openssh_peer: Peer, tmp_path: Path) -> None:
    """Below two stripes' worth there is no second worker to start: one process copies it."""
    data = random_file(openssh_peer.root / "small.bin", 700_000)
    async with openssh_peer.client(sshpipe.TransferConfig(workers=4)) as client:
        stats = await client.get(openssh_peer.remote("small.bin"), str(tmp_path / "small.bin"))
    assert (tmp_path / "small.bin").read_bytes() == data
    assert stats.workers == 1


async def test_resumed_get_by_workers_sends_only_the_gaps(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """A get by workers that fails keeps its partial and journal; the next one resumes it."""
    source = openssh_peer.root / "src.bin"
    data = random_file(source, SIZE)
    local = tmp_path / "got.bin"
    killed: list[int] = []

    def kill_one(progress: sshpipe.Progress) -> None:
        if not killed and progress.bytes_done >= 2 * MiB:
            killed.extend(_workers_alive()[:1])
            os.kill(killed[0], 9)

    config = sshpipe.TransferConfig(workers=2, resume=True, rate_limit=4 * MiB)
    async with openssh_peer.client(config) as client:
        with pytest.raises(sshpipe.SSHPipeError):
            await client.get(openssh_peer.remote("src.bin"), str(local), progress=kill_one)
    assert (tmp_path / ".got.bin.sshpipe.partial").exists()
    assert (tmp_path / ".got.bin.sshpipe.journal").exists()
    async with openssh_peer.client(sshpipe.TransferConfig(workers=2, resume=True)) as client:
        stats = await client.get(openssh_peer.remote("src.bin"), str(local))
    assert local.read_bytes() == data
    assert 0 < stats.resumed_bytes < SIZE, stats
    assert not (tmp_path / ".got.bin.sshpipe.journal").exists()
    assert leftover_temps(tmp_path, openssh_peer.root) == []


def test_cli_workers_copy_and_say_so(openssh_peer: Peer, tmp_path: Path) -> None:
    data = random_file(openssh_peer.root / "src.bin", SIZE)
    got = run_cli(
        "get", "--workers", "2", "--json", *openssh_peer.cli_options(),
        openssh_peer.spec("src.bin"), str(tmp_path / "got.bin"),
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["workers"] == 2
    assert (tmp_path / "got.bin").read_bytes() == data
    put = run_cli(
        "put", "--workers", "2", *openssh_peer.cli_options(),
        str(tmp_path / "got.bin"), openssh_peer.spec("up.bin"),
    )  # fmt: skip
    assert put.returncode == 0, put.stderr
    assert "of 2 worker processes" in put.stdout
    assert (openssh_peer.root / "up.bin").read_bytes() == data


def test_ctrl_c_at_the_terminal_is_the_single_process_interrupt(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """SIGINT to the whole process group (as a terminal sends it): exit 130, nothing left."""
    random_file(openssh_peer.root / "src.bin", SIZE)
    argv = [
        sys.executable, "-m", "sshpipe", "get", "-q", "--workers", "2", "-l", "16000",
        *openssh_peer.cli_options(), openssh_peer.spec("src.bin"), str(tmp_path / "got.bin"),
    ]  # fmt: skip
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as proc:
        deadline = time.monotonic() + 20
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
            workers = _workers_alive(proc.pid)
        assert len(workers) == 2
        time.sleep(0.3)  # into the copy
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert out == ""  # -q
    assert proc.returncode == 130, err
    assert err.strip().endswith("interrupted"), err
    assert "Traceback" not in err and "worker" not in err
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert leftover_temps(tmp_path, openssh_peer.root) == []


async def test_a_worker_that_cannot_log_in_fails_with_the_log_in_error(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    """The key file goes after the parent logged in: each worker loads it again, and cannot."""
    random_file(openssh_peer.root / "src.bin", SIZE)
    key = tmp_path / "key"
    key.write_bytes(openssh_peer.client_key.read_bytes())
    key.chmod(0o600)
    client = sshpipe.connect(
        f"{openssh_peer.user}@{openssh_peer.host}",
        port=openssh_peer.port,
        identity_files=[str(key)],
        known_hosts=[str(openssh_peer.known_hosts)],
        ssh_config=[],
        agent_path="none",
        config=sshpipe.TransferConfig(workers=2),
    )
    async with client:
        key.unlink()
        with pytest.raises(sshpipe.AuthenticationError) as caught:
            await client.get(openssh_peer.remote("src.bin"), str(tmp_path / "got.bin"))
    assert caught.value.exit_code == 6
    assert "\n" not in str(caught.value)
    assert leftover_temps(tmp_path, openssh_peer.root) == []
    assert _workers_alive() == []


async def test_into_directories_the_file_keeps_its_name(openssh_peer: Peer, tmp_path: Path) -> None:
    """scp's rule holds with workers: a directory at the destination receives the file."""
    data = random_file(openssh_peer.root / "src.bin", SIZE)
    (openssh_peer.root / "in").mkdir()
    (tmp_path / "down").mkdir()
    async with openssh_peer.client(sshpipe.TransferConfig(workers=3)) as client:
        got = await client.get(openssh_peer.remote("src.bin"), str(tmp_path / "down"))
        put = await client.put(str(tmp_path / "down" / "src.bin"), openssh_peer.remote("in"))
    assert (tmp_path / "down" / "src.bin").read_bytes() == data
    assert (openssh_peer.root / "in" / "src.bin").read_bytes() == data
    assert got.workers == put.workers == 3
    assert leftover_temps(tmp_path, openssh_peer.root) == []


async def test_a_put_over_a_file_keeps_its_mode_as_one_process_does(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    data = random_file(tmp_path / "src.bin", SIZE)
    (tmp_path / "src.bin").chmod(0o644)
    target = openssh_peer.root / "up.bin"
    target.write_bytes(b"old")
    target.chmod(0o600)
    async with openssh_peer.client(sshpipe.TransferConfig(workers=2)) as client:
        await client.put(str(tmp_path / "src.bin"), openssh_peer.remote("up.bin"))
    assert target.read_bytes() == data
    assert target.stat().st_mode & 0o777 == 0o600
