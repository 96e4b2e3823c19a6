"""ssh_config files read for the keywords sshpipe applies itself (``core.sshconfig``).

asyncssh reads the files for what it knows (HostName, Port, User,
IdentityFile, IdentitiesOnly, UserKnownHostsFile, ...). ``OWN_KEYWORDS`` are
the ones sshpipe decides: asyncssh ignores them (StrictHostKeyChecking,
BatchMode, Control*), or sshpipe must know them before asyncssh runs
(ProxyJump: each hop is opened here, under our host key policy, and
ProxyCommand, read only to know which of the two came first; Ciphers,
Compression, ConnectTimeout: whether the file sets them decides whether
sshpipe's defaults apply). A keyword added to the table gets the ssh_config
fallback everywhere ``own_options`` is asked.

Blocking file reads: call it off the event loop (``asyncio.to_thread``) or
before the loop starts, as the CLI may.
"""

from __future__ import annotations

import getpass
import glob
import os
from collections.abc import Sequence
from pathlib import Path

from ..core.errors import UsageError
from ..core.sshconfig import Query, lookup

__all__ = ["DEFAULT_SSH_CONFIG", "OWN_KEYWORDS", "config_files", "options_text", "own_options"]

DEFAULT_SSH_CONFIG = "~/.ssh/config"
# Where a relative Include points from a user's config (ssh_config(5)).
_INCLUDE_BASE = "~/.ssh"

# The keywords sshpipe reads from ssh_config itself, lower-case.
OWN_KEYWORDS = frozenset(
    {
        "stricthostkeychecking",
        "proxyjump",
        "proxycommand",
        "ciphers",
        "compression",
        "connecttimeout",
        "batchmode",
        "controlmaster",
        "controlpath",
        "controlpersist",
    }
)


def config_files(ssh_config: Sequence[str | os.PathLike[str]] | None) -> list[Path]:
    """The files to read: those named, else ~/.ssh/config where it can be read (as asyncssh)."""
    if ssh_config is None:
        default = Path(DEFAULT_SSH_CONFIG).expanduser()
        return [default] if default.is_file() and os.access(default, os.R_OK) else []
    return [Path(path).expanduser() for path in ssh_config]


def options_text(options: Sequence[tuple[str, str]]) -> str:
    """``-o`` options as the lines of a config read before the files (ssh(1) does so)."""
    return "".join(f"{keyword} {value}\n" for keyword, value in options)


def own_options(
    config_paths: Sequence[str | os.PathLike[str]] | None,
    host: str,
    user: str | None = None,
    *,
    options: Sequence[tuple[str, str]] = (),
) -> dict[str, str]:
    """The values ssh_config gives ``host`` for the keywords in ``OWN_KEYWORDS``.

    OpenSSH's precedence: ``options`` (the ``-o`` pairs) first, then the
    files in order, the first value of a keyword winning; what the command
    line says by other means (``-J``, ``-C``, a field of ``ConnectConfig``)
    comes before all of them and is the caller's to apply. Example::

        own_options(["~/.ssh/config"], "backup", "me")
        # {"stricthostkeychecking": "accept-new", "proxyjump": "bastion"}

    Args:
        config_paths: ssh_config files (``-F``); None means ~/.ssh/config.
        host: the host as typed (an alias works: ``Host`` matches it).
        user: the remote user the command line gave, if any (``Match user``).
        options: ``-o`` (keyword, value) pairs.

    Returns:
        lower-case keyword -> value as written (``"accept-new"``, ``"a,b"``),
        only for keywords some line applying to ``host`` sets.

    Raises:
        UsageError: a file named cannot be read, or has a line ssh refuses
            (the message names the file and line).
    """
    sources = [("-o options", options_text(options))]
    sources += [(str(path), _read(path)) for path in config_files(config_paths)]
    query = Query(host=host, user=user, local_user=_local_user())
    values = lookup(sources, query, include=_include)
    return {keyword: value for keyword, value in values.items() if keyword in OWN_KEYWORDS}


def _local_user() -> str:
    try:
        return getpass.getuser()  # as asyncssh finds it, so both match the same blocks
    except (KeyError, OSError):
        return ""


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(f"cannot read ssh_config file {path}: {exc.strerror or exc}") from exc


def _include(pattern: str) -> list[tuple[str, str]]:
    """The files an ``Include`` names: relative to ~/.ssh, wildcards expanded, sorted."""
    path = Path(pattern).expanduser()
    if not path.is_absolute():
        path = Path(_INCLUDE_BASE).expanduser() / path
    found = sorted(glob.glob(str(path))) if glob.has_magic(str(path)) else [str(path)]
    return [(name, _read(Path(name))) for name in found if os.path.isfile(name)]
