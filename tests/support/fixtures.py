"""Pytest fixtures around :mod:`tests.support.openssh`.

Import ``openssh`` into a conftest.py to make it available to tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Relative so mypy resolves one module name whether or not tests/ is a package.
from tests.support.openssh import SSHServerInfo, openssh_server, sshd_path

__all__ = ["ALLOW_NO_SSHD_ENV", "openssh"]

ALLOW_NO_SSHD_ENV = "SSHPIPE_ALLOW_NO_SSHD"


@pytest.fixture(scope="session")
def openssh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServerInfo]:
    """A real OpenSSH server shared by the whole test session."""
    _require_sshd()
    with openssh_server(tmp_path_factory.mktemp("openssh")) as info:
        yield info


def _require_sshd() -> None:
    # A silent skip would let CI pass without ever exercising a real server,
    # so skipping is opt-in.
    if sshd_path() is not None:
        return
    if os.environ.get(ALLOW_NO_SSHD_ENV) == "1":
        pytest.skip(f"sshd not installed ({ALLOW_NO_SSHD_ENV}=1)")
    pytest.fail(
        "sshd not found: install openssh-server (e.g. apt-get install "
        f"openssh-server), or set {ALLOW_NO_SSHD_ENV}=1 to skip these tests",
        pytrace=False,
    )
