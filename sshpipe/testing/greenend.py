"""Green End's SFTP server (``gesftpserver``) behind the test sshd, a foreign SFTP implementation.

sshd does the SSH side exactly as in ``sshpipe.testing.sshd`` (same keys, same
port handling, root or ordinary user); only its ``Subsystem sftp`` runs Green
End's server instead of ``internal-sftp``. Its banner therefore says OpenSSH,
while the SFTP server behind it is another implementation: a client that
guesses the SFTP dialect from the SSH banner guesses wrong here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .sshd import SSHServerError, SSHServerInfo, openssh_server

__all__ = ["gesftpserver_path", "greenend_server"]

# Debian 12 installs it in /usr/libexec; older releases in /usr/lib.
_GESFTPSERVER_PLACES = (
    Path("/usr/libexec/gesftpserver"),
    Path("/usr/lib/gesftpserver"),
    Path("/usr/lib/sftp-server/gesftpserver"),
    Path("/usr/local/libexec/gesftpserver"),
)


def gesftpserver_path() -> Path | None:
    """Where Green End's ``gesftpserver`` is installed, or None."""
    for candidate in _GESFTPSERVER_PLACES:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@contextlib.contextmanager
def greenend_server(workdir: Path) -> Iterator[SSHServerInfo]:
    """Run sshd serving SFTP with ``gesftpserver`` for the duration of the ``with`` block.

    Raises:
        SSHServerError: gesftpserver or sshd is missing, or sshd did not start.
    """
    server = gesftpserver_path()
    if server is None:
        raise SSHServerError("gesftpserver not found (install gesftpserver)")
    with openssh_server(workdir, sftp_subsystem=str(server)) as info:
        yield info
