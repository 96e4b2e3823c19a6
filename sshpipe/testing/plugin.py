"""A pytest plugin: the real servers of ``sshpipe.testing`` as session-wide fixtures.

Load it from a conftest.py with ``pytest_plugins = ["sshpipe.testing.plugin"]``
(or ``pytest -p sshpipe.testing.plugin``).

- ``openssh``: one OpenSSH sshd (``sshpipe.testing.sshd``); a fixture that starts
  an sshd of its own (other settings) takes ``sshd_executable`` first, so that a
  missing sshd is reported the same way.
- ``proftpd``: ProFTPD with ``mod_sftp`` (``sshpipe.testing.proftpd``), after
  ``proftpd_executable``.
- ``greenend``: sshd whose SFTP subsystem is Green End's ``gesftpserver``
  (``sshpipe.testing.greenend``), after ``gesftpserver_executable``.

A missing program fails the tests that need it, with the package to install;
``SSHPIPE_ALLOW_NO_SSHD=1`` (sshd) and ``SSHPIPE_ALLOW_NO_FOREIGN=1`` (ProFTPD,
Green End) turn that into a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from .greenend import gesftpserver_path, greenend_server
from .proftpd import ProFTPDError, ProFTPDInfo, mod_sftp_directive, proftpd_path, proftpd_server
from .sshd import SSHServerInfo, openssh_server, sshd_path

__all__ = [
    "ALLOW_NO_FOREIGN_ENV",
    "ALLOW_NO_SSHD_ENV",
    "gesftpserver_executable",
    "greenend",
    "openssh",
    "proftpd",
    "proftpd_executable",
    "sshd_executable",
]

ALLOW_NO_SSHD_ENV = "SSHPIPE_ALLOW_NO_SSHD"
ALLOW_NO_FOREIGN_ENV = "SSHPIPE_ALLOW_NO_FOREIGN"


def _missing(what: str, packages: str, allow_env: str) -> NoReturn:
    # A silent skip would let CI pass without ever exercising a real server,
    # so skipping is opt-in.
    if os.environ.get(allow_env) == "1":
        pytest.skip(f"{what} not installed ({allow_env}=1)")
    pytest.fail(
        f"{what} not found: install {packages} (e.g. apt-get install {packages}), "
        f"or set {allow_env}=1 to skip these tests",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def sshd_executable() -> Path:
    """The sshd program; a test needing it fails without one, or skips if so allowed."""
    found = sshd_path()
    if found is None:
        _missing("sshd", "openssh-server", ALLOW_NO_SSHD_ENV)
    return found


@pytest.fixture(scope="session")
def openssh(
    sshd_executable: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SSHServerInfo]:
    """A real OpenSSH server shared by the whole test session."""
    with openssh_server(tmp_path_factory.mktemp("openssh")) as info:
        yield info


@pytest.fixture(scope="session")
def proftpd_executable() -> Path:
    """The proftpd program, with mod_sftp built in or installed beside it."""
    found = proftpd_path()
    if found is not None:
        try:
            mod_sftp_directive(found)
        except ProFTPDError:
            pass  # proftpd-core without proftpd-mod-crypto
        else:
            return found
    _missing("ProFTPD with mod_sftp", "proftpd-core proftpd-mod-crypto", ALLOW_NO_FOREIGN_ENV)


@pytest.fixture(scope="session")
def proftpd(
    proftpd_executable: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProFTPDInfo]:
    """A real ProFTPD mod_sftp server shared by the whole test session."""
    with proftpd_server(tmp_path_factory.mktemp("proftpd")) as info:
        yield info


@pytest.fixture(scope="session")
def gesftpserver_executable(sshd_executable: Path) -> Path:
    """Green End's SFTP server (it runs behind sshd, so sshd is needed too)."""
    found = gesftpserver_path()
    if found is None:
        _missing("gesftpserver", "gesftpserver", ALLOW_NO_FOREIGN_ENV)
    return found


@pytest.fixture(scope="session")
def greenend(
    gesftpserver_executable: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SSHServerInfo]:
    """sshd serving SFTP with Green End's server, shared by the whole test session."""
    with greenend_server(tmp_path_factory.mktemp("greenend")) as info:
        yield info
