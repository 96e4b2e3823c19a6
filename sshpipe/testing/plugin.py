"""A pytest plugin: the real OpenSSH sshd (``sshpipe.testing.sshd``) as fixtures.

Load it from a conftest.py with ``pytest_plugins = ["sshpipe.testing.plugin"]``
(or ``pytest -p sshpipe.testing.plugin``). ``openssh`` is one sshd for the whole
session; a fixture that starts an sshd of its own (other settings) takes
``sshd_executable`` first, so that a missing sshd is reported the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .sshd import SSHServerInfo, openssh_server, sshd_path

__all__ = ["ALLOW_NO_SSHD_ENV", "openssh", "sshd_executable"]

ALLOW_NO_SSHD_ENV = "SSHPIPE_ALLOW_NO_SSHD"


@pytest.fixture(scope="session")
def sshd_executable() -> Path:
    """The sshd program; a test needing it fails without one, or skips if so allowed."""
    found = sshd_path()
    if found is not None:
        return found
    # A silent skip would let CI pass without ever exercising a real server,
    # so skipping is opt-in.
    if os.environ.get(ALLOW_NO_SSHD_ENV) == "1":
        pytest.skip(f"sshd not installed ({ALLOW_NO_SSHD_ENV}=1)")
    pytest.fail(
        "sshd not found: install openssh-server (e.g. apt-get install "
        f"openssh-server), or set {ALLOW_NO_SSHD_ENV}=1 to skip these tests",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def openssh(
    sshd_executable: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SSHServerInfo]:
    """A real OpenSSH server shared by the whole test session."""
    with openssh_server(tmp_path_factory.mktemp("openssh")) as info:
        yield info
