"""What the type checker makes of the common calls: checked by mypy (strict), never run.

``[tool.mypy] files`` lists this file, so ``scripts/test.sh``'s mypy run fails
when an overload stops matching a call users write; pytest does not collect
it (not ``test_*.py``). ``assert_type`` fails the check when the inferred type
is not exactly the one written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path, PurePosixPath
from typing import Literal, assert_type

import sshpipe
from sshpipe import FlowPhase, TransferStats, TreeProgress, TreeStats, Verified, VerifyLevel


def on_progress(progress: TreeProgress) -> None:
    print(progress.files_done)


async def on_progress_async(progress: sshpipe.Progress) -> None:
    print(progress.bytes_done, progress.eta, progress.current)


async def chunks() -> AsyncIterator[bytes]:
    yield b"data"


async def calls(flag: bool, level: VerifyLevel) -> None:
    client = sshpipe.connect(
        "me@example.org",
        identity_files=[Path("~/.ssh/id_ed25519"), "other_key"],
        known_hosts=Path("known_hosts"),
        ssh_config=(Path("config"),),
        config=sshpipe.TransferConfig(verify=level),
    )
    assert_type(client, sshpipe.Client)
    async with client as sp:
        assert_type(sp, sshpipe.Client)
        # One file, each direction, with str and with path objects.
        assert_type(await sp.get("/r/file", "file"), TransferStats)
        assert_type(await sp.get(PurePosixPath("/r/file"), Path("file")), TransferStats)
        assert_type(await sp.get("/r/file", "file", recursive=False), TransferStats)
        assert_type(await sp.put("file", "/r/file"), TransferStats)
        assert_type(await sp.put(Path("file"), PurePosixPath("/r/file")), TransferStats)
        assert_type(await sp.put(Path("file"), "/r/file", preserve=True), TransferStats)
        assert_type(await sp.put("file", "/r/file", overwrite=False), TransferStats)
        # Progress, sync or async, for one file as for a tree or a stream.
        assert_type(await sp.get("/r/file", "file", progress=on_progress), TransferStats)
        assert_type(await sp.put("file", "/r/file", progress=on_progress_async), TransferStats)
        assert_type(
            await sp.put_stream(chunks(), "/r/s", progress=on_progress_async), TransferStats
        )
        # Trees.
        assert_type(await sp.get("/r/dir", Path("dir"), recursive=True), TreeStats)
        assert_type(
            await sp.put(Path("dir"), "/r", recursive=True, progress=on_progress), TreeStats
        )
        # A flag known only at run time: either kind of result.
        assert_type(await sp.get("/r/x", "x", recursive=flag), TransferStats | TreeStats)
        assert_type(await sp.put(Path("x"), "/r", recursive=flag), TransferStats | TreeStats)
        # Several sources: always a tree's stats, whatever the flag.
        names: list[str] = await sp.glob("/r/*.log")
        assert_type(await sp.glob(PurePosixPath("/r/*.log")), list[str])
        assert_type(await sp.get(names, "logs"), TreeStats)
        assert_type(await sp.get(names, "logs", recursive=flag), TreeStats)
        # A glob copied as it is listed: a tree's stats, one pattern or several.
        assert_type(await sp.get("/r/*.log", "logs", glob=True), TreeStats)
        assert_type(await sp.get(["/r/*.log", "/r/*.gz"], "logs", glob=True), TreeStats)
        paths: list[Path] = [Path("a"), Path("b")]
        assert_type(await sp.put(paths, "/r"), TreeStats)
        assert_type(await sp.put(("a", Path("b")), "/r", recursive=True), TreeStats)
        # Streams.
        async for piece in sp.stream(PurePosixPath("/r/file"), progress=on_progress):
            assert_type(piece, bytes)
        assert_type(await sp.put_stream(chunks(), PurePosixPath("/r/s")), TransferStats)
        # Random-access files: entered or awaited; open() without a path connects.
        assert_type(await sp.open(), None)
        async with sp.open(PurePosixPath("/r/file"), read_ahead=0) as f:
            assert_type(f, sshpipe.RemoteFile)
            assert_type(await f.read(10), bytes)
            assert_type(f.seek(0, 2), int)
            assert_type(await f.read_ranges([(0, 10), (100, 5)]), list[bytes])
            assert_type(f.stats, sshpipe.RemoteFileStats)
        w = await sp.open("/r/out", "wb")
        assert_type(await w.write(b"data"), int)
        await w.aclose()
        # What the stats say, as Literals a match statement can be checked against.
        stats = await sp.get("/r/file", "file")
        assert_type(stats.verified, Verified)
        assert_type(stats.flow_phase, FlowPhase)
        tree = await sp.get("/r/dir", "dir", recursive=True)
        assert_type(tree.verified, Verified)
        # Remote file operations: names, or RemoteStats with ``detail``.
        assert_type(await sp.ls("/r"), list[str])
        assert_type(await sp.ls(PurePosixPath("/r"), detail=True), list[sshpipe.RemoteStat])
        assert_type(await sp.ls("/r", detail=flag), list[str] | list[sshpipe.RemoteStat])
        info = await sp.stat("/r/file")
        assert_type(info.type, Literal["file", "directory", "symlink", "other"])
        assert_type(info.size, int | None)
        assert_type((await sp.lstat("/r/link")).is_symlink(), bool)
        assert_type(await sp.exists("/r/file"), bool)
        await sp.mkdir("/r/a/b", parents=True, exist_ok=True, mode=0o755)
        await sp.rename("/r/a", "/r/b", overwrite=True)
        await sp.copy("/r/file", PurePosixPath("/r/copy"))
        assert_type(await sp.checksum("/r/file", "sha256"), str)
        await sp.remove("/r/copy")
        await sp.rmdir("/r/b/b")
        await sp.rmtree("/r/b")
        assert_type(await sp.clean_temps(dry_run=True), list[str])


def ask_the_user(prompt: sshpipe.Prompt) -> str | None:
    """A blocking prompt callback (run in a worker thread)."""
    return input(prompt.text) if prompt.echo else None


async def ask_async(prompt: sshpipe.Prompt) -> str | None:
    if prompt.kind == "passphrase":
        assert_type(prompt.key_path, str | None)
    return "secret" if prompt.attempt == 1 else None


async def logins() -> None:
    # A prompt callback, sync or async; BatchMode; the counts of tries.
    for answer in (ask_the_user, ask_async):
        async with sshpipe.connect("me@example.org", prompt=answer, password_prompts=1) as sp:
            await sp.get("/r/file", "file")
    sshpipe.connect("me@example.org", batch_mode=True, agent_path="none")
