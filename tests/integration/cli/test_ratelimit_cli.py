"""``-l`` through the CLI: the whole transfer's rate within +-10 % of the limit, every byte checked.

sshd sits behind the link emulator at 20 ms RTT (a WAN: the flow controller
would open several channels and a 1 Gbit/s x RTT first guess without the
limit). Rates are the transfer's own (``--json``: bytes / seconds, set-up
included), not the process's. 8000 Kbit/s is 1,024,000 bytes/s, so each
transfer of 0.9-1.7 MB takes 0.9-1.7 s.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sshpipe import TransferConfig
from sshpipe.cli.args import MAX_LIMIT_KBIT, parse_args
from sshpipe.cli.settings import transfer_config
from sshpipe.core.errors import UsageError
from sshpipe.core.ratelimit import kbit_to_bytes
from sshpipe.testing.linkemu import LinkSpec
from tests.support.cli import run_cli_async
from tests.support.files import random_file
from tests.support.peers import EmulatedLink, Peer, write_source

LIMIT_KBIT = 8000
RATE = kbit_to_bytes(LIMIT_KBIT)  # 1,024,000 bytes/s
SIZE = 1280 * 1024 - 12345  # 1.3 s; not a whole number of blocks
WAN = LinkSpec(rtt=0.020)


def assert_rate(shown: dict[str, object]) -> None:
    moved, seconds = shown["bytes"], shown["seconds"]
    assert isinstance(moved, int) and isinstance(seconds, float)
    rate = moved / seconds
    print(f"{moved} bytes in {seconds:.3f} s: {rate / RATE:.3f} x the limit")
    assert 0.9 * RATE <= rate <= 1.1 * RATE, f"{rate:.0f} B/s for a limit of {RATE} ({shown})"


async def cli_json(far: Peer, *words: str) -> dict[str, object]:
    done = await run_cli_async(*words, *far.cli_options(), "-l", str(LIMIT_KBIT), "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert isinstance(shown, dict)
    return shown


async def test_get_and_put_of_a_file_hold_the_limit(
    openssh_peer: Peer, emulated_link: EmulatedLink, tmp_path: Path
) -> None:
    data = write_source(openssh_peer, SIZE)
    async with emulated_link(openssh_peer, WAN) as (_, far):
        got = await cli_json(far, "get", far.spec("src.bin"), str(tmp_path / "got.bin"))
        assert (tmp_path / "got.bin").read_bytes() == data
        assert_rate(got)
        # Under the limit one channel carries it: no growth for 1 Gbit/s x RTT.
        assert got["channels"] == 1
        put = await cli_json(far, "put", str(tmp_path / "got.bin"), far.spec("put.bin"))
        assert (openssh_peer.root / "put.bin").read_bytes() == data
        assert_rate(put)
        assert put["channels"] == 1


async def test_a_tree_shares_one_limit(
    openssh_peer: Peer, emulated_link: EmulatedLink, tmp_path: Path
) -> None:
    """Small files and a big one in one tree draw on one bucket: the tree's rate is the limit."""
    tree = openssh_peer.root / "tree"
    # 1.7 MB: a tree's set-up (listings, directories, the batch's sync and
    # renames at the end) is more of it than a file's.
    files = {"big.bin": 1_200_000 + 7, "sub/mid.bin": 300_000}
    files.update({f"sub/small{n}.bin": 20_000 + n for n in range(8)})
    (tree / "sub").mkdir(parents=True)
    wanted = {name: random_file(tree / name, size) for name, size in files.items()}
    async with emulated_link(openssh_peer, WAN) as (_, far):
        got = await cli_json(far, "get", "-r", far.spec("tree"), str(tmp_path / "got"))
        for name, data in wanted.items():
            assert (tmp_path / "got" / name).read_bytes() == data
        assert_rate(got)
        put = await cli_json(far, "put", "-r", str(tmp_path / "got"), far.spec("back"))
        for name, data in wanted.items():
            assert (openssh_peer.root / "back" / name).read_bytes() == data
        assert_rate(put)


async def test_a_stream_and_put_stream_hold_the_limit_through_the_api(
    openssh_peer: Peer, emulated_link: EmulatedLink
) -> None:
    """``TransferConfig(rate_limit=)``: the bucket paces the in-order read and the pipe upload."""
    data = write_source(openssh_peer, 900_000)
    config = TransferConfig(rate_limit=RATE)
    async with emulated_link(openssh_peer, WAN) as (_, far), far.client(config) as client:
        await client.glob(far.remote("src.bin"))  # logged in: what follows is the copies only
        started = time.perf_counter()
        pieces = [piece async for piece in client.stream(far.remote("src.bin"))]
        seconds = time.perf_counter() - started
        assert b"".join(pieces) == data
        assert_rate({"bytes": len(data), "seconds": seconds})

        async def chunks() -> AsyncIterator[bytes]:
            for offset in range(0, len(data), 100_000):
                yield data[offset : offset + 100_000]

        stats = await client.put_stream(chunks(), far.remote("streamed.bin"))
        assert (openssh_peer.root / "streamed.bin").read_bytes() == data
        assert_rate({"bytes": stats.bytes, "seconds": stats.seconds})


@pytest.mark.parametrize(
    ("value", "rate"),
    [("1", 128), ("8000", 1_024_000), (str(MAX_LIMIT_KBIT), MAX_LIMIT_KBIT * 128)],
)
def test_the_limit_is_in_scps_kbits(value: str, rate: int) -> None:
    args = parse_args(["get", "-l", value, "h:x", "y"])
    assert transfer_config(args).rate_limit == rate
    assert transfer_config(parse_args(["get", "h:x", "y"])).rate_limit is None


@pytest.mark.parametrize("value", ["0", "-5", "x", "1.5", str(MAX_LIMIT_KBIT + 1)])
def test_a_bad_limit_is_a_usage_error(value: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_args(["get", "-l", value, "h:x", "y"])
    assert "-l" in str(caught.value) and "\n" not in str(caught.value)


def test_the_api_refuses_a_limit_that_is_not_a_positive_int() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(UsageError):
            TransferConfig(rate_limit=bad)  # type: ignore[arg-type]
