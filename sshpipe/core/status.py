"""What a failure STATUS from the server means: the ``RemoteError`` for its code.

One place for every reply path (reads, writes, opens, listings, renames), so
the same code always becomes the same error class and message.
"""

from __future__ import annotations

from . import codec
from .errors import RemoteError, RemoteNotFound, RemotePermissionDenied


def status_error(
    status: codec.Status, path: str, offset: int | None = None, *, write: bool = False
) -> RemoteError:
    """The exception for a failure STATUS, by its code (filexfer-02 §7).

    ``write``: it answered a WRITE. SFTP v3 has no code for a full disk or a
    quota; OpenSSH answers a bare "Failure", so the message says what that
    usually means rather than leave the user guessing.
    """
    cls: type[RemoteError] = RemoteError
    if status.code == codec.FX_NO_SUCH_FILE:
        cls = RemoteNotFound
    elif status.code == codec.FX_PERMISSION_DENIED:
        cls = RemotePermissionDenied
    reason = status.message or _STATUS_NAMES.get(status.code, f"status {status.code}")
    if write and status.code == codec.FX_FAILURE and reason.lower() == "failure":
        reason += " (the server gives no reason: most often its disk or your quota is full)"
    return cls(path, reason, offset=offset, status=status.code)


_STATUS_NAMES = {
    codec.FX_EOF: "end of file",
    codec.FX_NO_SUCH_FILE: "no such file",
    codec.FX_PERMISSION_DENIED: "permission denied",
    codec.FX_FAILURE: "failure",
    codec.FX_BAD_MESSAGE: "bad message",
    codec.FX_NO_CONNECTION: "no connection",
    codec.FX_CONNECTION_LOST: "connection lost",
    codec.FX_OP_UNSUPPORTED: "operation unsupported",
}
