"""ssh_config read as OpenSSH reads it, for one host: text in, first values out.

``lookup`` walks the files' lines in order, keeps the ``Host`` and ``Match``
blocks that apply to the host asked for, and returns the first value of each
keyword (ssh_config(5): "the first obtained value will be used"). Keywords are
case-insensitive (returned lower-case); ``Key Value`` and ``Key=Value`` are the
same line; values are split as a shell would (quotes, backslashes).

asyncssh parses the same files for the keywords it knows; this module reads
what it does not (``StrictHostKeyChecking``, ``BatchMode``, ``Control*``) and
what sshpipe must decide before asyncssh does (``ProxyJump``, whether the file
sets ``Ciphers``). So its rules are asyncssh's where the two could disagree
on which block applies:

- ``Host`` patterns (``*``, ``?``, ``!`` negation, several per line, or
  comma-separated) match the host as typed (the alias);
- ``Match`` takes ``all``, ``host`` (``HostName`` so far, else the alias),
  ``originalhost``, ``user`` (``User`` so far: the command line's first, else
  the local user), ``localuser``, each negatable with ``!``; ``canonical``
  never matches (no canonicalisation here), ``final`` always does (this is the
  only pass); ``exec``, ``localnetwork``, ``tagged``, ``address`` and
  ``localaddress`` are taken as not matching (no command is run here);
- ``Include`` applies where it stands (inside a block only if that block
  applies), its files in sorted order, nested at most 16 deep (OpenSSH's
  READCONF_MAX_DEPTH); the I/O edge finds and reads them (``include``).

No I/O: files arrive as text, ``Include`` through the ``include`` callable.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .errors import UsageError

__all__ = [
    "MAX_INCLUDE_DEPTH",
    "Include",
    "Query",
    "jump_in_force",
    "lookup",
    "matches_patterns",
    "parse_destination",
    "parse_jump",
]

# OpenSSH's READCONF_MAX_DEPTH: an Include loop ends here, not in a RecursionError.
MAX_INCLUDE_DEPTH = 16

# (name shown in errors, text) of each file an Include pattern names, in order.
Include = Callable[[str], Sequence[tuple[str, str]]]

# Match criteria that take a pattern and are evaluated here, and those that
# take one but are left to others (asyncssh runs ``exec``; nothing is run here).
_MATCH_VALUES = {"host", "originalhost", "user", "localuser"}
_MATCH_NOT_EVALUATED = {"exec", "localnetwork", "tagged", "address", "localaddress"}


@dataclass(frozen=True, kw_only=True, slots=True)
class Query:
    """The host whose values are looked up.

    Attributes:
        host: the host as typed (an alias or a name): ``Host``'s and
            ``Match originalhost``'s subject.
        user: the remote user the command line (or the API) gave, None if none:
            ``Match user`` sees it before any ``User`` of the files.
        local_user: the local user name (``Match localuser``; ``Match user``
            when no ``User`` is set).
    """

    host: str
    user: str | None
    local_user: str


def _no_include(pattern: str) -> Sequence[tuple[str, str]]:
    raise UsageError(f"Include {pattern}: no include reader given")


def lookup(
    sources: Sequence[tuple[str, str]],
    query: Query,
    *,
    include: Include = _no_include,
) -> dict[str, str]:
    """The first value of every keyword that applies to ``query.host``.

    Args:
        sources: (name, text) of each config, read in this order (``-o``
            options first, as a config of their own, then ``-F``'s file or
            ~/.ssh/config); the name is only for errors.
        query: the host, the command line's user, the local user.
        include: the files an ``Include`` pattern names, as (name, text).

    Returns:
        lower-case keyword -> its first value (the words as written, joined
        by one space). ``user`` starts as ``query.user`` when given: the
        command line's user comes first. ``hostname`` has ``%h`` and ``%%``
        expanded.

    Raises:
        UsageError: a line ssh would refuse (unclosed quote, a keyword with no
            value, a bad ``Match``), or Includes nested too deep; the message
            names the file and line.
    """
    reader = _Reader(query, include)
    for name, text in sources:
        reader.read(name, text, depth=0)
    return reader.values


class _Reader:
    def __init__(self, query: Query, include: Include) -> None:
        self.query = query
        self.include = include
        self.values: dict[str, str] = {}
        if query.user:
            self.values["user"] = query.user

    def read(self, name: str, text: str, *, depth: int) -> None:
        if depth > MAX_INCLUDE_DEPTH:
            raise UsageError(f"{name}: Include nested more than {MAX_INCLUDE_DEPTH} deep")
        active = True  # every file starts outside any block
        for number, line in enumerate(text.splitlines(), 1):
            where = f"{name} line {number}"
            words = _words(line, where)
            if not words:
                continue
            keyword, args = words[0], words[1:]
            if keyword == "host":
                if not args:
                    raise UsageError(f"{where}: missing Host pattern")
                active = matches_patterns(",".join(args), self.query.host)
                continue
            if keyword == "match":
                active = self._match(args, where)
                continue
            if not active:
                continue
            if not args:
                raise UsageError(f"{where}: missing {keyword} value")
            if keyword == "include":
                for pattern in args:
                    for included, content in self.include(pattern):
                        self.read(included, content, depth=depth + 1)
                continue
            if keyword not in self.values:
                self.values[keyword] = self._value(keyword, args)

    def _value(self, keyword: str, args: list[str]) -> str:
        value = " ".join(args)
        if keyword == "hostname":
            value = re.sub(r"%([%h])", lambda m: "%" if m[1] == "%" else self.query.host, value)
        return value

    def _match(self, args: list[str], where: str) -> bool:
        if not args:
            raise UsageError(f"{where}: Match needs a condition")
        matching = True
        words = list(args)
        while words:
            criterion = words.pop(0).lower()
            negated = criterion.startswith("!")
            criterion = criterion.removeprefix("!")
            if criterion == "all":
                result = True
            elif criterion == "canonical":
                result = False
            elif criterion == "final":
                result = True
            elif criterion in _MATCH_VALUES or criterion in _MATCH_NOT_EVALUATED:
                if not words:
                    raise UsageError(f"{where}: missing Match {criterion} pattern")
                pattern = words.pop(0)
                subject = self._subject(criterion)
                result = subject is not None and matches_patterns(pattern, subject)
            else:
                raise UsageError(f"{where}: unsupported Match condition {criterion!r}")
            if result == negated:
                matching = False  # the rest is still read, for its errors
        return matching

    def _subject(self, criterion: str) -> str | None:
        if criterion == "host":
            return self.values.get("hostname", self.query.host)
        if criterion == "originalhost":
            return self.query.host
        if criterion == "user":
            return self.values.get("user", self.query.local_user)
        if criterion == "localuser":
            return self.query.local_user
        return None  # not evaluated here: taken as not matching


def _words(line: str, where: str) -> list[str]:
    """The keyword (lower-case) and its arguments, ``Key=Value`` split as asyncssh does."""
    line = line.strip()
    if not line or line.startswith("#"):
        return []
    try:
        split = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None
    words: list[str] = []
    allow_equal = True
    for index, word in enumerate(split):
        if word.startswith("="):
            if len(word) > 1:
                words.append(word[1:])
        elif not allow_equal:
            words.extend(split[index:])
            break
        elif word.endswith("="):
            words.append(word[:-1])
        elif "=" in word:
            words.extend(word.split("=", 1))
        else:
            words.append(word)
        if index == 0 and words:
            words[0] = words[0].lower()
            # Only Host and Match take '=' inside their arguments apart.
            allow_equal = words[0] in ("host", "match")
    return words


def matches_patterns(patterns: str, subject: str) -> bool:
    """Whether a comma-separated pattern list matches: one positive does, no negated one.

    ``*`` is any run of characters, ``?`` one; nothing else is special
    (OpenSSH's match_pattern). A list of only negations matches nothing.
    """
    positive = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        if _compiled(pattern.removeprefix("!")).fullmatch(subject):
            if negated:
                return False
            positive = True
    return positive


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.compile(regex, re.DOTALL)


def jump_in_force(values: dict[str, str], given: str | None) -> str | None:
    """The ProxyJump that applies, or None where ssh_config's ProxyCommand does.

    ssh_config(5): ProxyJump "will compete with the ProxyCommand option -
    whichever is specified first will prevent later instances of the other
    from taking effect" (OpenSSH's ``parse_jump`` ignores a ProxyJump once
    ProxyCommand is set, "none" too, and the other way round). ``given``
    (``-J``, the API's ``proxy_jump``) comes before every line. ``values``:
    ``lookup``'s, whose order is the order the keywords were first obtained.
    """
    if given is not None:
        return given
    for keyword, value in values.items():
        if keyword == "proxyjump":
            return value
        if keyword == "proxycommand":
            return None
    return "none"


def parse_jump(text: str) -> list[tuple[str | None, str, int | None]]:
    """``-J``/``ProxyJump``'s hops, in the order they are connected: (user, host, port).

    ``[user@]host[:port]`` separated by commas; an IPv6 address in brackets
    (``[::1]:2222``); ``ssh://[user@]host[:port]`` as ssh(1) takes too.
    ``none`` (any case) is no hop at all.

    Raises:
        UsageError: an empty hop, or a port that is not 1-65535.
    """
    if text.strip().lower() == "none":
        return []
    hops: list[tuple[str | None, str, int | None]] = []
    for word in text.split(","):
        hop = word.strip().removeprefix("ssh://").rstrip("/")
        user, at, rest = hop.rpartition("@")
        port_text: str | None = None
        if rest.startswith("["):
            host, _, after = rest[1:].partition("]")
            if after:
                if not after.startswith(":"):
                    raise UsageError(f"bad jump host {word.strip()!r}")
                port_text = after[1:]
        elif rest.count(":") == 1:
            host, _, port_text = rest.partition(":")
        else:
            host = rest  # a bare IPv6 address has no port
        if not host or (at and not user):
            raise UsageError(f"bad jump host {word.strip()!r}: want [user@]host[:port]")
        port: int | None = None
        if port_text is not None:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise UsageError(f"bad port in jump host {word.strip()!r}")
            port = int(port_text)
        hops.append((user or None, host, port))
    return hops


def parse_destination(destination: str) -> tuple[str | None, str]:
    """Split ``[user@]host`` into (user, host); IPv6 may be written in brackets."""
    user, sep, host = destination.rpartition("@")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise UsageError(f"no host in {destination!r}")
    return (user if sep and user else None), host
