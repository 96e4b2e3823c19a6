"""Where a command line word points: ``[user@]host:path``, an ``sftp://`` or ``scp://`` URL,
or a local path.

OpenSSH's own rules, read from its ``misc.c`` (``colon``, ``parse_user_host_path``,
``parse_uri``, ``urldecode``) and ``scp.c`` (``prepare_remote_path``), so a word
means here what it means to ``scp`` and ``sftp``:

- ``[user@]host:path``: the first ``:`` before any ``/`` ends the host; a word
  with a ``/`` first (``./a:b``, ``/tmp/a:b``) or a leading ``:`` is local. An
  IPv6 address goes in brackets (``[::1]:path``, ``user@[::1]:path``). The user
  is everything before the *last* ``@``. An empty path is ``.``: the home directory.
- ``sftp://[user[;params]@]host[:port][/path]`` (and ``scp://``): the user is
  everything before the *first* ``@`` (``;params`` ignored), percent-decoded; the
  host is not decoded; the path is what follows the ``/`` after the host, so it is
  relative to the home directory (``sftp://h/etc/x`` is ``~/etc/x``) unless it
  starts with a second ``/`` (``sftp://h//etc/x`` is ``/etc/x``); it is
  percent-decoded, ``+`` being a space (``%2B`` is a ``+``), as OpenSSH decodes it.
- A path ``~`` or ``~/rest`` is the home directory (``.``) or ``rest`` under it:
  SFTP servers do not expand ``~``, so scp strips it. ``~user/`` is left as written.

Two differences from OpenSSH, both where it refuses a word we can mean one way
only: a bracketed IPv6 address in a URL (``sftp://[::1]:2222/x``; OpenSSH's host
check refuses any ``:``), and a scheme in other case (``SFTP://``). Any other
``scheme://`` is refused rather than read as a host named after the scheme.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..core.errors import UsageError
from ..core.paths import usable
from ..core.sshconfig import parse_destination

__all__ = ["RemoteSpec", "parse_remote"]

_SCHEMES = ("sftp", "scp")
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
# OpenSSH's valid_domain: letters, digits, '.', '-', '_' (common though invalid), no "..".
_HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_HEX = "0123456789abcdefABCDEF"

# How a URL's parser says what is wrong with it: the reason in, the error out.
_Invalid = Callable[[str], UsageError]


@dataclass(frozen=True, kw_only=True)
class RemoteSpec:
    """A remote path: who, where, and which file.

    ``port`` is the URL's (``sftp://host:2222/x``), else None: the command line's
    ``-P``, ``-o Port`` or ssh_config decide.
    """

    user: str | None
    host: str
    path: str
    port: int | None = None


def parse_remote(word: str) -> RemoteSpec | None:
    """What ``word`` names: a remote path, or None for a local one (see the module docstring).

    Raises:
        UsageError: a URL that is malformed, or of a scheme other than sftp/scp;
            a path or user no file or account can have (a ``%00`` decoded).
    """
    scheme = _URL.match(word)
    if scheme is not None:
        if scheme.group(1).lower() not in _SCHEMES:
            raise UsageError(
                f"unsupported URL scheme {scheme.group(1)!r} in {word!r} (sftp:// or scp://)"
            )
        spec = _parse_url(word, word[scheme.end() :])
    else:
        at = _colon(word)
        if at is None:
            return None
        user, host = parse_destination(word[:at])
        spec = RemoteSpec(user=user, host=host, path=_home_relative(word[at + 1 :]))
    if spec.user is not None:
        usable(spec.user, "user name")
    usable(spec.path, "remote path")
    return spec


def _colon(word: str) -> int | None:
    """Where the host ends in ``[user@]host:path`` (scp's ``colon``), or None: a local path."""
    if word.startswith(":"):
        return None  # a leading colon is part of a file name
    bracketed = word.startswith("[")
    for index, char in enumerate(word):
        following = word[index + 1 : index + 2]
        if char == "@" and following == "[":
            bracketed = True
        if char == "]" and following == ":" and bracketed:
            return index + 1
        if char == ":" and not bracketed:
            return index
        if char == "/":
            return None
    return None


def _parse_url(word: str, rest: str) -> RemoteSpec:
    def invalid(why: str) -> UsageError:
        return UsageError(f"invalid URL {word!r}: {why}")

    user: str | None = None
    userinfo, at, after = rest.partition("@")
    if at:
        userinfo = userinfo.partition(";")[0]  # connection parameters: ignored, as OpenSSH does
        if not userinfo:
            raise invalid("empty user name")
        user = _urldecode(userinfo, invalid)
        rest = after
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise invalid("no ']' after the IPv6 address")
        host, rest = rest[1:close], rest[close + 1 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise invalid(f"{host!r} is not an IPv6 address") from None
        if rest and rest[0] not in ":/":
            raise invalid("':' or '/' expected after ']'")
    else:
        found = re.search("[:/]", rest)
        end = found.start() if found else len(rest)
        host, rest = rest[:end], rest[end:]
        if not _HOSTNAME.fullmatch(host) or ".." in host:
            raise invalid(f"bad host name {host!r}" if host else "no host")
        host = host.removesuffix(".")
    port: int | None = None
    if rest.startswith(":"):
        digits, slash, rest = rest[1:].partition("/")
        rest = slash + rest
        if digits:  # "sftp://host:" has no port; "sftp://host:/x" has an empty one
            port = _port(digits, invalid)
        elif rest:
            raise invalid("empty port")
    path = _urldecode(rest[1:], invalid) if rest else ""
    return RemoteSpec(user=user, host=host, path=_home_relative(path), port=port)


def _port(digits: str, invalid: _Invalid) -> int:
    if not digits.isdigit() or not 0 < int(digits) <= 65535:
        raise invalid(f"bad port {digits!r}")
    return int(digits)


def _urldecode(text: str, invalid: _Invalid) -> str:
    """OpenSSH's ``urldecode``: ``%XX`` is a byte, ``+`` a space; a stray ``%`` is an error."""
    out = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        if char == "%":
            pair = text[index + 1 : index + 3]
            if len(pair) < 2 or pair[0] not in _HEX or pair[1] not in _HEX:
                raise invalid(f"bad percent-escape {text[index : index + 3]!r}")
            out.append(int(pair, 16))
            index += 3
            continue
        out += b" " if char == "+" else char.encode()
        index += 1
    try:
        return out.decode()
    except UnicodeDecodeError:
        raise invalid("percent-escapes that are not UTF-8") from None


def _home_relative(path: str) -> str:
    """scp's ``prepare_remote_path``: ``~`` and ``~/x`` name the home directory and ``x`` in it."""
    if path in ("", "~"):
        return "."
    if path.startswith("~/"):
        return path[2:].lstrip("/") or "."
    return path
