"""Single files for the tests: random contents written, digested, and sshpipe's leftovers found."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["left_counts", "leftover_temps", "random_file", "sha256_file"]

# The line a run that could not remove its temporary files ends with (``durability.ledger``).
_LEFT = re.compile(
    r"(?:(\d+) temporary file\(s\) left on the server"
    r"(?: \(and (\d+) more may have been created\))?"
    r"|(\d+) temporary file\(s\) may have been left on the server)"
)


def random_file(path: Path, size: int) -> bytes:
    """Write ``size`` random bytes to ``path`` and return them."""
    data = os.urandom(size)
    path.write_bytes(data)
    return data


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's contents, hex, read in pieces (files here reach 64 MiB)."""
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def leftover_temps(*roots: Path) -> list[str]:
    """sshpipe's temporary names (``.NAME.sshpipe-XXXXXX.partial``) anywhere under ``roots``."""
    found: list[str] = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            found.extend(
                os.path.join(dirpath, n) for n in [*dirnames, *filenames] if ".sshpipe-" in n
            )
    return found


def left_counts(line: str) -> tuple[int, int]:
    """From the line of what a run left: (files there for sure, files that may be there)."""
    found = _LEFT.search(line)
    assert found is not None, line
    there, more, maybe = found.groups()
    if maybe is not None:
        return 0, int(maybe)
    return int(there), int(more or 0)


@contextlib.contextmanager
def mounted_tmpfs(mount: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes at the new directory ``mount`` (needs root), unmounted
    afterwards; the test is skipped where it cannot be mounted."""
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
