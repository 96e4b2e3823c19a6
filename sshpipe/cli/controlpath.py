"""Where a command's master is: Control* from ``-o`` and ssh_config, the socket's path.

Apart from ``control`` (which starts and asks masters) so that a thin client
(``thin``) finds its master without loading logging, threading or the rest.
The directory rule: ControlPath's directory must be ours and mode 0700, or the
command refuses (exit 3): whoever reaches the socket uses our log-in.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import stat
from collections.abc import Mapping, Sequence

from ..core.control import (
    ControlSettings,
    ControlWordError,
    control_master,
    control_persist,
    expand_control_path,
)
from ..core.errors import LocalError, UsageError

__all__ = ["CONTROL_OPTIONS", "check_socket_dir", "control_settings", "socket_path"]

# The -o options this module reads (settings.ssh_kwargs leaves them here).
CONTROL_OPTIONS = ("controlmaster", "controlpath", "controlpersist")
DEFAULT_CONTROL_PATH = "%C"
# sockaddr_un's sun_path: 108 bytes on Linux, the last one the NUL.
_SUN_PATH_MAX = 107


def control_settings(
    options: Sequence[str], fallback: Mapping[str, str] | None = None
) -> ControlSettings:
    """ControlMaster, ControlPath and ControlPersist from ``-o`` words (the first
    wins), else from ``fallback`` (ssh_config's, lower-case keyword -> value).

    Raises:
        UsageError: a value OpenSSH's grammar does not allow.
    """
    found: dict[str, str] = {}
    for option in options:
        name, sep, value = option.partition("=")
        if not sep:
            name, _, value = option.partition(" ")
        key = name.strip().lower()
        if key in CONTROL_OPTIONS:
            found.setdefault(key, value.strip())
    for key, value in (fallback or {}).items():
        if key in CONTROL_OPTIONS:
            found.setdefault(key, value.strip())
    try:
        return ControlSettings(
            master=control_master(found.get("controlmaster", "no")),
            path=found.get("controlpath"),
            persist=control_persist(found.get("controlpersist", "no")),
        )
    except ControlWordError as exc:
        raise UsageError(f"-o {exc}") from None


def _socket_dir() -> str:
    """The default socket directory: the per-user runtime one, else under ~/.ssh."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, "sshpipe")
    return os.path.join(os.path.expanduser("~"), ".ssh", "sshpipe")


def check_socket_dir(path: str) -> None:
    """The socket's directory must be ours and shut to everyone else (0700).

    Anyone who can reach the socket uses our authenticated connection: a
    directory others can enter would let them try.

    Raises:
        LocalError: it is not a directory, not ours, or open to group or others.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        info = os.stat(directory)
    except OSError as exc:
        raise LocalError(directory, exc.strerror or str(exc)) from exc
    if not stat.S_ISDIR(info.st_mode):
        raise LocalError(directory, "ControlPath's directory is not a directory")
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise LocalError(
            directory,
            f"ControlPath's directory must be yours and mode 0700, not "
            f"{stat.S_IMODE(info.st_mode):04o}",
        )


def socket_path(
    settings: ControlSettings,
    host: str,
    port: int | None,
    user: str | None,
    *,
    create: bool = True,
) -> str:
    """The expanded ControlPath; the default's directory is made (0700) if missing.

    Args:
        create: make the default directory; without (``-O``), a missing one
            is left to the connect to report.

    Raises:
        UsageError: an unknown token. LocalError: the directory is not ours alone.
    """
    template = settings.path
    if template is None:
        directory = _socket_dir()
        if create:
            # Each level made 0700 (makedirs' mode is the last one's only): ~/.ssh too.
            with contextlib.suppress(FileExistsError):
                os.makedirs(os.path.dirname(directory), mode=0o700)
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, mode=0o700)
        template = os.path.join(directory, DEFAULT_CONTROL_PATH)
    try:
        path = expand_control_path(
            os.path.expanduser(template),
            host=host,
            port=port or 22,
            user=user or getpass.getuser(),
            local_user=getpass.getuser(),
            local_host=socket.gethostname(),
        )
    except ControlWordError as exc:
        raise UsageError(f"-o {exc}") from None
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        raise UsageError(
            f"ControlPath {path!r} is longer than a UNIX socket's name may be "
            f"({_SUN_PATH_MAX} bytes): use a shorter one, or %C"
        )
    if create or os.path.isdir(os.path.dirname(os.path.abspath(path))):
        check_socket_dir(path)
    return path
