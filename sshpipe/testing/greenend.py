"""Green End's SFTP server (``gesftpserver``) behind the test sshd, a foreign SFTP implementation.

sshd does the SSH side exactly as in ``sshpipe.testing.sshd`` (same keys, same
port handling, root or ordinary user); only its ``Subsystem sftp`` runs Green
End's server instead of ``internal-sftp``. Its banner therefore says OpenSSH,
while the SFTP server behind it is another implementation: a client that
guesses the SFTP dialect from the SSH banner guesses wrong here.

The server starts in the served root, not in the user's home: a relative path
(such as a SYMLINK whose arguments came in the order the server does not
expect) then lands in the throwaway directory, never in ``$HOME``.
"""

from __future__ import annotations

import contextlib
import os
import re
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
# sshd re-joins the Subsystem words with single spaces and hands them to the
# user's shell: a path in it must need no quoting.
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+-]+")


def gesftpserver_path() -> Path | None:
    """Where Green End's ``gesftpserver`` is installed, or None."""
    for candidate in _GESFTPSERVER_PLACES:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


@contextlib.contextmanager
def greenend_server(workdir: Path, *, max_sessions: int = 64) -> Iterator[SSHServerInfo]:
    """Run sshd serving SFTP with ``gesftpserver`` for the duration of the ``with`` block.

    ``max_sessions``: sshd's ``MaxSessions``, as for ``openssh_server``.

    Raises:
        SSHServerError: gesftpserver or sshd is missing, or sshd did not start.
    """
    server = gesftpserver_path()
    if server is None:
        raise SSHServerError("gesftpserver not found (install gesftpserver)")
    # Where openssh_server puts the served root (checked below).
    root = workdir.resolve() / "root"
    if not _PLAIN_PATH.fullmatch(str(root)):
        raise SSHServerError(f"the served root needs a plain path for the shell: {root}")
    # gesftpserver has no start-directory option (OpenSSH's sftp-server has -d).
    command = f"cd {root} && exec {server}"
    with openssh_server(workdir, sftp_subsystem=command, max_sessions=max_sessions) as info:
        if info.root != root:
            raise SSHServerError(f"sshd serves {info.root}, not {root}")
        yield info
