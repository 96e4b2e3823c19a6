"""Private keys for the tests: the fixture's authorized client key, encrypted."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path


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
