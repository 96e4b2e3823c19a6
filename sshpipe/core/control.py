"""Connection reuse's words, pure: ControlMaster, ControlPersist, ControlPath tokens.

OpenSSH's semantics (ssh_config(5)), values in, values out; the socket, the
directory checks and the master process live in ``transport.muxmaster`` and
``cli.control``.

- ``control_master``: "auto" (use a master, start one when none runs; "yes"
  is read the same: sshpipe never prompts, so "ask"/"autoask" are refused) or
  "no";
- ``control_persist``: seconds the master stays after its last client, or
  None for "until ``-O exit``" (OpenSSH's "yes" and "0"); "no" is 0;
- ``expand_control_path``: the tokens %h %p %r %C %u %l %L %n %% (%C is
  OpenSSH's: the SHA-1 of ``%l%h%p%r`` in hex, a fixed 40 characters that fit
  a UNIX socket's 108-byte name where the parts might not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ControlSettings",
    "ControlWordError",
    "control_master",
    "control_persist",
    "expand_control_path",
]

MasterMode = Literal["auto", "no"]


class ControlWordError(ValueError):
    """A value OpenSSH's grammar does not allow (the CLI makes it a UsageError)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ControlSettings:
    """What ``-o ControlMaster/ControlPath/ControlPersist`` asked for.

    ``path`` is the template, not yet expanded; None means the default
    (``cli.controlpath.DEFAULT_CONTROL_PATH`` under the per-user directory).
    """

    master: MasterMode = "no"
    path: str | None = None
    persist: float | None = 0.0

    @property
    def enabled(self) -> bool:
        """Reuse is on: "auto", or a ControlPath other than "none" (a master may listen)."""
        if self.path is not None and self.path.lower() == "none":
            return False
        return self.master == "auto" or self.path is not None


def control_master(value: str) -> MasterMode:
    """ControlMaster's value: "auto" ("yes" alike) or "no"."""
    word = value.strip().lower()
    if word in ("auto", "yes"):
        return "auto"
    if word == "no":
        return "no"
    raise ControlWordError(
        f"ControlMaster {value!r}: sshpipe takes auto, yes or no (it never prompts: no ask)"
    )


# OpenSSH's time format (sshd_config(5) TIME FORMATS): a number, or numbers
# each with a unit: 90, 90s, 10m, 1h30m, 1w.
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_TIME_PART = re.compile(r"(\d+)([smhdw]?)", re.IGNORECASE)


def control_persist(value: str) -> float | None:
    """ControlPersist's value in seconds; None means for ever (until ``-O exit``).

    "yes" and "0" keep the master until it is told to exit, as OpenSSH;
    "no" lets it go with its last client.
    """
    word = value.strip().lower()
    if word == "yes":
        return None
    if word == "no":
        return 0.0
    seconds = 0
    at = 0
    for match in _TIME_PART.finditer(word):
        if match.start() != at:
            break
        seconds += int(match.group(1)) * _UNITS[match.group(2).lower()]
        at = match.end()
    if not word or at != len(word):
        raise ControlWordError(f"ControlPersist {value!r}: yes, no, or a time (600, 10m, 1h30m)")
    return None if seconds == 0 else float(seconds)


def expand_control_path(
    template: str, *, host: str, port: int, user: str, local_user: str, local_host: str
) -> str:
    """``template`` with OpenSSH's tokens replaced; a leading ``~`` is the caller's.

    Args:
        host: the remote host as given (%h and %n; ssh's %h is the HostName
            ssh_config chose, which sshpipe does not see here).
        port, user: the remote port and login (%p, %r).
        local_user, local_host: %u, %l (%L is its first label).
    """
    digest = ""
    if "%C" in template:
        # Here: hashlib (OpenSSL's) is 5 ms of a thin client's start; only %C needs it.
        import hashlib

        digest = hashlib.sha1(f"{local_host}{host}{port}{user}".encode()).hexdigest()
    tokens = {
        "%": "%",
        "h": host,
        "n": host,
        "p": str(port),
        "r": user,
        "u": local_user,
        "l": local_host,
        "L": local_host.split(".")[0],
        "C": digest,
    }
    out: list[str] = []
    index = 0
    while index < len(template):
        char = template[index]
        if char != "%":
            out.append(char)
            index += 1
            continue
        token = template[index + 1 : index + 2]
        if token not in tokens:
            raise ControlWordError(f"ControlPath {template!r}: unknown token %{token}")
        out.append(tokens[token])
        index += 2
    return "".join(out)
