"""Storage options and ``sshpipe://`` URLs, turned into a ``sshpipe.connect`` call (no I/O).

``fsspec.filesystem("sshpipe", host=..., port=..., username=..., identity_files=[...])``:
the storage options are ``sshpipe.connect``'s keyword arguments plus ``host``.
A URL ``sshpipe://user@host:port/abs/path`` carries host, port and user; the
rest comes in ``storage_options``. Paths are the server's: absolute, or
relative to the login directory (as sftp's).
"""

from __future__ import annotations

import inspect
from typing import Any

from ..core.errors import UsageError
from ..core.paths import usable

PROTOCOL = "sshpipe"
# fsspec's own keywords, taken by AsyncFileSystem.__init__ (or the instance
# cache): they never reach ``sshpipe.connect``.
FSSPEC_OPTIONS = frozenset(
    {
        "asynchronous",
        "loop",
        "batch_size",
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
    }
)
# The filesystem's own keywords (``SSHPipeFileSystem``), not ``sshpipe.connect``'s.
# ``max_connections_per_host``: ``TransferConfig``'s, as a storage option (Dask's
# workers take only storage options).
FILESYSTEM_OPTIONS = frozenset({"connect_early", "max_connections_per_host"})


def connect_parameters() -> frozenset[str]:
    """The keyword arguments ``sshpipe.connect`` takes (its signature is the one truth)."""
    from ..client.connect import connect

    params = inspect.signature(connect).parameters
    return frozenset(name for name, p in params.items() if p.kind is p.KEYWORD_ONLY)


def connect_options(options: dict[str, Any]) -> dict[str, Any]:
    """The options meant for ``sshpipe.connect`` (fsspec's own left out).

    Raises:
        UsageError: an option neither fsspec nor ``sshpipe.connect`` knows (a
            typo would otherwise be dropped in silence).
    """
    known = connect_parameters()
    chosen = {k: v for k, v in options.items() if k not in FSSPEC_OPTIONS | FILESYSTEM_OPTIONS}
    unknown = sorted(set(chosen) - known)
    if unknown:
        raise UsageError(f"sshpipe filesystem: unknown storage option(s) {', '.join(unknown)}")
    return chosen


def strip_protocol(path: str) -> str:
    """The server path in ``path``: ``sshpipe://user@host:port/a/b/`` -> ``/a/b``.

    A path without the scheme is already one. Trailing slashes go (fsspec's
    convention), except for the root itself.

    Raises:
        UsageError: a path no file can have (a NUL: ``_paths.usable``).
    """
    usable(path)
    if path.startswith(f"{PROTOCOL}://"):
        rest = path[len(PROTOCOL) + 3 :]
        _, slash, tail = rest.partition("/")
        path = slash + tail
    stripped = path.rstrip("/")
    if not stripped and path.startswith("/"):
        return "/"
    return stripped


def url_options(url: str) -> dict[str, Any]:
    """host, port and username from ``sshpipe://[user@]host[:port]/path`` (nothing else).

    Raises:
        UsageError: a port that is not a number.
    """
    if not url.startswith(f"{PROTOCOL}://"):
        return {}
    netloc = url[len(PROTOCOL) + 3 :].partition("/")[0]
    if not netloc:
        return {}
    user, at, hostport = netloc.rpartition("@")
    out: dict[str, Any] = {}
    if at and user:
        out["username"] = user
    host, port = hostport, ""
    if hostport.startswith("["):  # [IPv6]:port
        host, _, after = hostport[1:].partition("]")
        port = after.removeprefix(":")
    elif hostport.count(":") == 1:
        host, _, port = hostport.partition(":")
    if host:
        out["host"] = host
    if port:
        if not port.isdigit():
            raise UsageError(f"sshpipe URL: port {port!r} is not a number")
        out["port"] = int(port)
    return out
