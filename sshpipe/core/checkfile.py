"""The SFTP ``check-file`` extension, and which hashes ``--verify`` takes (pure).

A server that runs no commands cannot run ``sha256sum``; ProFTPD's mod_sftp
and paramiko hash a file themselves when asked with ``check-file``
(draft-ietf-secsh-filexfer-extensions-00 §3, filexfer-13 §9.1.2). The
request is ``string name, string filename or handle, string
hash-algorithm-list, uint64 start-offset, uint64 length (0: to the end),
uint32 block-size (0: one hash of the range)``; the reply, an
EXTENDED_REPLY, names the algorithm used and carries one hash per block.
The servers met disagree on the details, so each is asked its own way:

- ProFTPD advertises ``check-file`` = "1" (no list: it takes md5, sha1 and the
  SHA-2s) and answers ``check-file-name`` and ``check-file-handle`` with
  ``string algorithm`` then the raw hash (contrib/mod_sftp/fxp.c,
  ``fxp_handle_ext_check_file``). It is asked for the whole file's SHA-256.
- paramiko advertises ``check-file`` = "md5,sha1" and answers only a request
  named ``check-file``, on a handle, with ``string "check-file"`` before the
  algorithm (paramiko/sftp_server.py, ``_check_file``). It reads a block in
  64 KiB chunks and moves its offset by the bytes read so far rather than by
  the last chunk: a block over 128 KiB is hashed wrong, or never ends. So a
  server that lists its algorithms is asked paramiko's way, for 64 KiB
  blocks, a hash each, as many blocks a request as one small reply holds.
- Apache MINA SSHD writes the "check-file" prefix too, and each hash as a
  string of its own; the decoder takes that layout as well.

What a server says is untrusted (``untrusted``): the algorithm must be the
one asked for and the hashes exactly as many and as long as it makes; else
it is a ProtocolError.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from . import codec
from .errors import ProtocolError
from .stats import Verified

# Best first: the SHA-2s by strength, then what older servers have.
PREFERENCE: Final = ("sha256", "sha512", "sha384", "sha224", "sha1", "md5")
DIGEST_SIZES: Final = {
    "md5": 16,
    "sha1": 20,
    "sha224": 28,
    "sha256": 32,
    "sha384": 48,
    "sha512": 64,
}
# What ``verified`` says of a copy a check-file hashed: a table, not an
# f-string, so the type checker knows every value ``Verified`` may take.
HASH_REMOTE_LEVELS: Final[Mapping[str, Verified]] = {
    "sha256": "hash-remote:sha256",
    "sha512": "hash-remote:sha512",
    "sha384": "hash-remote:sha384",
    "sha224": "hash-remote:sha224",
    "sha1": "hash-remote:sha1",
    "md5": "hash-remote:md5",
}
# One hash per 64 KiB: a block paramiko reads in one chunk, so hashes right.
LISTED_BLOCK: Final = 64 * 1024
# The hashes one reply may carry: under the 34,000-byte packet every server
# must take (filexfer-02 §3), whatever its own limit.
MAX_HASH_BYTES: Final = 32 * 1024

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


@dataclass(frozen=True, slots=True)
class HashSpec:
    """A hash as ``--verify`` compares it: ``algorithm`` (hashlib's name) over each
    ``block`` bytes of the file, the hashes concatenated (0: one hash of it all)."""

    algorithm: str
    block: int = 0

    @property
    def digest_size(self) -> int:
        return DIGEST_SIZES[self.algorithm]


SHA256: Final = HashSpec("sha256")  # what sha256sum prints


@dataclass(frozen=True, slots=True)
class CheckFile:
    """How a server's check-file is asked for a file's hashes.

    Attributes:
        request: "check-file-name" (a path), or "check-file-handle" /
            "check-file" (paramiko's name) on a handle of the file opened for reading.
        spec: the algorithm asked for (the only one: the copy is hashed with
            it as it flows) and the block size.
    """

    request: str
    spec: HashSpec

    @property
    def by_handle(self) -> bool:
        return self.request != "check-file-name"

    @property
    def level(self) -> Verified:
        """What ``verified`` says of a copy checked this way."""
        return HASH_REMOTE_LEVELS[self.spec.algorithm]


def offered_algorithms(data: bytes) -> tuple[str, ...] | None:
    """The algorithms we know of in a VERSION extension's data, best first.

    None where the data is no list of names (ProFTPD sends "1"): which
    algorithms the server has is then not said.
    """
    names = [name.strip() for name in data.decode("ascii", "replace").split(",")]
    if all(not name or name.isdigit() for name in names):
        return None
    return tuple(name for name in PREFERENCE if name in names)


def choose_check_file(extensions: Mapping[str, bytes], software: str = "") -> CheckFile | None:
    """How to ask this server's check-file (its VERSION ``extensions``), or None if it has none.

    A server that does not say which algorithms it has is asked for SHA-256
    (ProFTPD has it with every OpenSSL since 0.9.8); if it refuses, the next
    check is used. ProFTPD 1.3.8 (``software`` "mod_sftp") lists check-file
    only to SFTP v5 clients, and answers ``check-file-name`` on v3 all the
    same: it is asked without being listed.
    """
    if software.startswith("mod_sftp") and not any(
        name in extensions for name in ("check-file", "check-file-name", "check-file-handle")
    ):
        return CheckFile("check-file-name", SHA256)
    for request in ("check-file-name", "check-file-handle"):
        if request in extensions:
            listed = offered_algorithms(extensions[request])
            best = "sha256" if listed is None else next(iter(listed), None)
            return CheckFile(request, HashSpec(best)) if best is not None else None
    if "check-file" not in extensions:
        return None
    listed = offered_algorithms(extensions["check-file"])
    if listed is None:
        return CheckFile("check-file-name", SHA256)  # ProFTPD
    if not listed:
        return None  # only algorithms we cannot compute
    return CheckFile("check-file", HashSpec(listed[0], LISTED_BLOCK))  # paramiko


# -- what the copy is hashed with ---------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifyPlan:
    """The checks ``--verify`` will try, in order, and the hashes they need.

    Chosen before the bytes flow, which are hashed once for every spec in
    ``specs``: the server's ``sha256sum`` (if it may run one), else its
    check-file, else (``level`` "read-back") a read-back, else the size.
    """

    level: str
    sha256sum: bool
    check_file: CheckFile | None
    specs: tuple[HashSpec, ...]


def plan_verify(level: str, check_file: CheckFile | None, *, runs_commands: bool) -> VerifyPlan:
    """The plan for ``level`` ("none", "size", "best", "hash", "read-back").

    ``runs_commands``: the server may run ``sha256sum`` (not known not to).
    Two hashes flow only where the server may answer either way: a command
    (SHA-256 of the whole file) or a check-file of another algorithm or by blocks.
    """
    if level not in ("best", "hash", "read-back"):
        return VerifyPlan(level, False, None, ())
    specs = [SHA256] if runs_commands else []
    if check_file is not None and check_file.spec not in specs:
        specs.append(check_file.spec)
    if not specs and level == "read-back":
        specs.append(SHA256)
    return VerifyPlan(level, runs_commands, check_file, tuple(specs))


def level_strength(level: str) -> tuple[int, int]:
    """How much a check proves, to find a tree's weakest: size < read-back < any remote hash.

    Remote hashes rank by their algorithm (md5 below sha256), ``sha256sum``'s
    ("hash-remote") as check-file's SHA-256.
    """
    kind, _, algorithm = level.partition(":")
    if kind == "hash-remote":
        return 3, len(PREFERENCE) - PREFERENCE.index(algorithm or "sha256")
    return {"none": 0, "size": 1, "read-back": 2}[kind], 0


class Hasher:
    """The hashes of ``spec`` of bytes given in file order."""

    def __init__(self, spec: HashSpec) -> None:
        self.spec = spec
        self._hash = _new(spec.algorithm)
        self._left = spec.block  # bytes until the current block is whole
        self._blocks = bytearray()  # the hashes of the whole blocks so far

    def update(self, data: bytes | memoryview) -> None:
        block = self.spec.block
        if not block:
            self._hash.update(data)
            return
        with memoryview(data) as view:
            while view:
                piece = view[: self._left]
                self._hash.update(piece)
                self._left -= len(piece)
                view = view[len(piece) :]
                if not self._left:
                    self._blocks += self._hash.digest()
                    self._hash = _new(self.spec.algorithm)
                    self._left = block

    def digest(self) -> bytes:
        """The hash, or one per block (the last may be short; none for no bytes)."""
        if not self.spec.block:
            return self._hash.digest()
        partial = self._left != self.spec.block
        return bytes(self._blocks) + (self._hash.digest() if partial else b"")


def _new(algorithm: str) -> hashlib._Hash:
    # A check of a copy, not a signature: md5 is allowed where FIPS forbids it
    # for security.
    return hashlib.new(algorithm, usedforsecurity=False)


# -- the wire ---------------------------------------------------------------------


def check_ranges(size: int, spec: HashSpec) -> list[tuple[int, int]]:
    """(start-offset, length) of each request for a file of ``size`` bytes.

    The whole file in one, its length 0 ("to the end": a file longer on the
    server hashes differently); by blocks, as many as one reply holds each,
    each length given (paramiko never ends a block past the end of the file).
    """
    if not spec.block:
        return [(0, 0)]
    step = max(1, MAX_HASH_BYTES // spec.digest_size) * spec.block
    return [(start, min(step, size - start)) for start in range(0, size, step)]


def hashes_in(length: int, spec: HashSpec) -> int:
    """The hashes a request of ``length`` bytes (0: the whole file) is answered with."""
    return 1 if not spec.block else -(-length // spec.block)


def encode_check_file(
    request_id: int,
    request: str,
    target: bytes,
    algorithms: Sequence[str],
    start: int,
    length: int,
    block: int,
) -> bytes:
    """A check-file request: ``request`` names what ``target`` is (a path, or a handle)."""
    payload = b"".join(
        (
            _U32.pack(len(target)),
            target,
            _U32.pack(len(listed := ",".join(algorithms).encode("ascii"))),
            listed,
            _U64.pack(start),
            _U64.pack(length),
            _U32.pack(block),
        )
    )
    return codec.encode_extended(request_id, request, payload)


def decode_check_file_reply(payload: bytes, spec: HashSpec, count: int) -> bytes:
    """The ``count`` hashes of ``spec`` in a check-file reply's data (after its request id).

    Takes ``[string "check-file"] string algorithm`` then the raw hashes
    (ProFTPD, paramiko), or each hash as a string (MINA SSHD).

    Raises:
        ProtocolError: another algorithm than the one asked for, or hashes
            not ``count`` of that algorithm's size.
    """
    name, rest = _string(payload)
    if name == b"check-file":  # the extension's name first (filexfer-13, paramiko)
        name, rest = _string(rest)
    if name != spec.algorithm.encode("ascii"):
        said = name.decode("ascii", "replace")
        raise ProtocolError(f"check-file: answered with {said!r}, asked for {spec.algorithm}")
    size = spec.digest_size
    if len(rest) == count * size:
        return rest
    if len(rest) == count * (4 + size):  # each hash a string (MINA SSHD)
        starts = range(0, len(rest), 4 + size)
        if all(_U32.unpack_from(rest, at)[0] == size for at in starts):
            return b"".join(rest[at + 4 : at + 4 + size] for at in starts)
    raise ProtocolError(
        f"check-file: {len(rest)} bytes of {spec.algorithm} hashes, "
        f"{count} of {size} bytes were asked for"
    )


def _string(data: bytes) -> tuple[bytes, bytes]:
    length = _U32.unpack_from(data)[0] if len(data) >= 4 else None
    if length is None or len(data) < 4 + length:
        raise ProtocolError("check-file: truncated reply")
    return data[4 : 4 + length], data[4 + length :]
