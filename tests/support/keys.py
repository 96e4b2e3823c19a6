"""Private keys for the tests: new ones, and the fixture's authorized client key encrypted."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path


def new_key(where: Path, name: str, *, passphrase: str = "", pem: bool = False) -> Path:
    """A fresh ed25519 key ``where/name`` (and its ``.pub``) made by ssh-keygen.

    With a ``passphrase`` (five characters at least) it is encrypted, with one
    KDF round (as ``encrypted_copy``). ``pem``: an ECDSA key in the PEM format
    instead (ed25519 has none), whose public half cannot be read without the
    passphrase (no public part in the file): remove its ``.pub`` to have none.
    """
    path = where / name
    subprocess.run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ecdsa" if pem else "ed25519",
            "-a",
            "1",
            "-N",
            passphrase,
            "-C",
            name,
            "-f",
            str(path),
            *(["-m", "PEM"] if pem else []),
        ],
        check=True,
        capture_output=True,
    )
    return path


def encrypted_copy(key: Path, where: Path, passphrase: str) -> Path:
    """``key`` copied into ``where`` and encrypted by ssh-keygen (OpenSSH format, bcrypt KDF).

    One KDF round (``-a 1``): the same bcrypt path as ssh-keygen's default 16,
    without their half a second per load.
    """
    copy = where / "encrypted_key"
    shutil.copyfile(key, copy)
    copy.chmod(0o600)
    subprocess.run(
        ["ssh-keygen", "-q", "-p", "-a", "1", "-P", "", "-N", passphrase, "-f", str(copy)],
        check=True,
        capture_output=True,
    )
    body = b"".join(line for line in copy.read_bytes().splitlines() if b"-----" not in line)
    assert b"bcrypt" in base64.b64decode(body)  # encrypted with OpenSSH's KDF
    return copy
