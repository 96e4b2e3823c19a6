"""--verify through check-file, against the in-memory server (no sockets, no commands).

The fake runs no command, so after the size the only remote hash is its
check-file: ProFTPD's way (whole file by name, "1" in VERSION) or paramiko's
(listed algorithms, 64 KiB blocks on a handle). A server that lies fails the
copy before it takes its name; one that names another algorithm breaks the
protocol; one without the algorithm asked leaves the next check to decide.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import sshpipe
import sshpipe.transfer.verify
from sshpipe.core import checkfile
from sshpipe.core.checkfile import LISTED_BLOCK, CheckFile, HashSpec
from sshpipe.core.errors import IntegrityError, ProtocolError
from sshpipe.testing.fakes import CheckFileOffer, FakeLease, FakeServer
from sshpipe.transfer.download import download
from sshpipe.transfer.upload import upload
from sshpipe.transport import remotehash
from sshpipe.transport.checkfile import remote_check_file

BLOCK = 16 * 1024
HASHED = sshpipe.TransferConfig(
    block_size=BLOCK,
    requests=8,
    local_io_in_thread=False,
    fsync=False,
    stall_timeout=5.0,
    verify="hash",
)
READ_BACK = sshpipe.TransferConfig(
    block_size=BLOCK, local_io_in_thread=False, fsync=False, verify="read-back"
)
PROFTPD = CheckFileOffer(advertised=b"1", algorithms=("md5", "sha1", "sha256"))
PARAMIKO = CheckFileOffer(advertised=b"md5,sha1", algorithms=("md5", "sha1"))


def _specs_hashed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[HashSpec, ...]]:
    """The specs of each OrderedHash made: what the bytes were hashed with as they flowed."""
    made: list[tuple[HashSpec, ...]] = []
    real = sshpipe.transfer.verify.OrderedHash.__init__

    def recording(self: Any, specs: Any = (checkfile.SHA256,)) -> None:
        made.append(tuple(specs))
        real(self, specs)

    monkeypatch.setattr(sshpipe.transfer.verify.OrderedHash, "__init__", recording)
    return made


async def _get(server: FakeServer, tmp_path: Path, config: sshpipe.TransferConfig = HASHED) -> Any:
    lease = await FakeLease.open(server)
    return await download(lease, "/f", str(tmp_path / "f"), config, into_directory=False)


async def test_proftpd_hashes_the_whole_file_by_name_with_the_one_sha256(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(300_000)
    offer = CheckFileOffer(advertised=b"1", algorithms=("md5", "sha256"))
    made = _specs_hashed(monkeypatch)
    stats = await _get(FakeServer({"/f": data}, check_file=offer), tmp_path)
    assert stats.verified == "hash-remote:sha256"
    assert offer.asked == [("check-file-name", "sha256", 0, 0, 0)]  # to the end, one hash
    assert made == [(checkfile.SHA256,)]  # no command to run: one hash
    assert (tmp_path / "f").read_bytes() == data


async def test_paramiko_is_asked_on_a_handle_for_64k_blocks_a_reply_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkfile, "MAX_HASH_BYTES", 4 * 20)  # four sha1 hashes a reply
    data = os.urandom(10 * LISTED_BLOCK + 5)
    server = FakeServer({"/f": data}, check_file=PARAMIKO)
    made = _specs_hashed(monkeypatch)
    stats = await _get(server, tmp_path)
    assert stats.verified == "hash-remote:sha1"  # the best it lists
    step = 4 * LISTED_BLOCK
    assert PARAMIKO.asked == [
        ("check-file", "sha1", 0, step, LISTED_BLOCK),
        ("check-file", "sha1", step, step, LISTED_BLOCK),
        ("check-file", "sha1", 2 * step, 2 * LISTED_BLOCK + 5, LISTED_BLOCK),
    ]
    assert made == [(HashSpec("sha1", LISTED_BLOCK),)]
    assert server.open_handles == 0  # the handle it hashed was closed


@pytest.mark.parametrize("offer", [PROFTPD, PARAMIKO], ids=["proftpd", "paramiko"])
async def test_a_server_that_lies_fails_a_download_and_leaves_no_file(
    offer: CheckFileOffer, tmp_path: Path
) -> None:
    lying = CheckFileOffer(advertised=offer.advertised, algorithms=offer.algorithms, lies=True)
    server = FakeServer({"/f": os.urandom(200_000)}, check_file=lying)
    with pytest.raises(IntegrityError) as caught:
        await _get(server, tmp_path)
    assert "check-file on the server" in str(caught.value) and caught.value.exit_code == 10
    assert os.listdir(tmp_path) == []  # no file, no .partial


@pytest.mark.parametrize("offer", [PROFTPD, PARAMIKO], ids=["proftpd", "paramiko"])
async def test_a_server_that_lies_fails_an_upload_which_never_takes_its_name(
    offer: CheckFileOffer, tmp_path: Path
) -> None:
    (tmp_path / "a.bin").write_bytes(os.urandom(200_000))
    lying = CheckFileOffer(advertised=offer.advertised, algorithms=offer.algorithms, lies=True)
    server = FakeServer({"/old": b"the old file"}, check_file=lying)
    lease = await FakeLease.open(server)
    with pytest.raises(IntegrityError):
        await upload(lease, str(tmp_path / "a.bin"), "/old", HASHED, into_directory=False)
    assert list(server.files) == ["/old"] and server.files["/old"] == b"the old file"


async def test_an_upload_checked_by_check_file_takes_its_name(tmp_path: Path) -> None:
    data = os.urandom(200_000)
    (tmp_path / "a.bin").write_bytes(data)
    offer = CheckFileOffer(advertised=b"md5", algorithms=("md5",))
    server = FakeServer(check_file=offer)
    lease = await FakeLease.open(server)
    stats = await upload(lease, str(tmp_path / "a.bin"), "/a.bin", HASHED, into_directory=False)
    assert stats.verified == "hash-remote:md5"
    assert bytes(server.files["/a.bin"]) == data and list(server.files) == ["/a.bin"]
    (request, _, _, _, _), *_ = offer.asked
    assert request == "check-file"  # on the temp file, before its rename


async def test_an_empty_file_is_not_hashed_its_size_says_it_all(tmp_path: Path) -> None:
    offer = CheckFileOffer(advertised=b"1", algorithms=("sha256",))
    stats = await _get(FakeServer({"/f": b""}, check_file=offer), tmp_path)
    assert stats.verified == "hash-remote:sha256"
    assert offer.asked == []


async def test_without_the_algorithm_asked_the_next_check_decides(tmp_path: Path) -> None:
    offer = CheckFileOffer(advertised=b"1", algorithms=("md5",))  # no sha256: refused
    server = FakeServer({"/f": os.urandom(50_000)}, check_file=offer)
    assert (await _get(server, tmp_path, replace(HASHED, verify="best"))).verified == "size"
    assert (await _get(server, tmp_path, READ_BACK)).verified == "read-back"
    with pytest.raises(sshpipe.HashUnavailable, match="its check-file refused"):
        await _get(server, tmp_path)  # "hash" asked by name: no size instead
    assert len(offer.asked) == 3


async def test_an_answer_in_another_algorithm_is_a_protocol_error(tmp_path: Path) -> None:
    offer = CheckFileOffer(advertised=b"1", algorithms=("sha256",), answer_with="md5")
    server = FakeServer({"/f": os.urandom(50_000)}, check_file=offer)
    with pytest.raises(ProtocolError, match="asked for sha256"):
        await _get(server, tmp_path)
    assert os.listdir(tmp_path) == []


async def test_a_slow_answer_has_the_time_the_servers_read_takes(tmp_path: Path) -> None:
    """The server reads the file before it answers: 4 MB at 10 MB/s is 0.4 s on top."""
    offer = CheckFileOffer(advertised=b"1", algorithms=("sha256",), delay=0.5)
    server = FakeServer({"/f": os.urandom(4_000_000)}, check_file=offer)
    config = replace(HASHED, block_size=64 * 1024, stall_timeout=0.3)
    lease = await FakeLease.open(server, stall_timeout=0.3)
    stats = await download(lease, "/f", str(tmp_path / "f"), config, into_directory=False)
    assert stats.verified == "hash-remote:sha256" and stats.reconnects == 0


async def test_by_handle_a_file_of_another_size_is_not_asked() -> None:
    """paramiko never finishes a block it cannot read whole: the size is compared first."""
    offer = CheckFileOffer(advertised=b"md5", algorithms=("md5",))
    server = FakeServer({"/f": bytes(1000)}, check_file=offer)
    sftp = await server.channel()
    check = CheckFile("check-file", HashSpec("md5", LISTED_BLOCK))
    assert await remote_check_file(sftp, "/f", check, 2000) is None
    assert offer.asked == [] and server.open_handles == 0
    assert await remote_check_file(sftp, "/f", check, 1000) == hashlib.md5(bytes(1000)).digest()


@pytest.mark.parametrize(
    ("output", "found"),
    [
        (f"{'ab' * 32}  /srv/f.bin\n", "ab" * 32),
        (f"\\{'ab' * 32}  /srv/new\\nline\n", "ab" * 32),  # a name GNU escapes
        (f"Welcome to the server!\n{'ab' * 32}  /srv/f.bin\n", "ab" * 32),  # a chatty .bashrc
        ("", None),
        ("\n", None),
        ("not a hash  /srv/f.bin\n", None),
        (f"{'AB' * 32}  /srv/f.bin\n", None),  # not what sha256sum prints
        (f"{'ab' * 31}  /srv/f.bin\n", None),
    ],
)
def test_sha256sum_output_is_read_or_said_unreadable(output: str, found: str | None) -> None:
    got = remotehash.sha256_in(output)
    if found is None:
        assert got == remotehash.Unreadable(output)
    else:
        assert got == found
