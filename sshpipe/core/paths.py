"""The paths the public API takes: ``str`` or any ``os.PathLike[str]``, made ``str`` once.

Remote paths too: a ``PurePosixPath`` is the natural type for one. Everything
below the API works with ``str`` alone, and only with paths that can name a
file (``usable``): the one check at every door, the API's (``fspath``), the
command line's remote words and URLs (``cli.targets``), fsspec's paths, and
the names and files ``connect()`` is given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeAlias

from .errors import UsageError

# What ``os.fspath`` turns into a ``str`` (typeshed's ``StrPath``).
StrPath: TypeAlias = str | os.PathLike[str]


def fspath(path: StrPath) -> str:
    """``path`` as a ``str``, one that can name a file (``usable``).

    Raises:
        UsageError: a ``bytes`` path (or anything else that is no path), or
            one no file can have.
    """
    try:
        text = os.fspath(path)
    except TypeError as exc:
        raise UsageError(f"a path is a str or os.PathLike[str], not {path!r}") from exc
    if not isinstance(text, str):
        raise UsageError(f"a path is a str or os.PathLike[str], not bytes: {path!r}")
    return usable(text)


def usable(text: str, what: str = "path") -> str:
    """``text`` if it can name a file (or a host, a user: ``what`` says which).

    Refused: a NUL (POSIX names end there, and an SFTP server's C strings
    with it: sent anyway, the server drops the channel or acts on the part
    before it), and a character with no bytes to send, a lone surrogate
    (``surrogateescape``'s U+DC80-U+DCFF stand for the bytes of a name that
    is not UTF-8: those are kept).

    Raises:
        UsageError: the first such character, named.
    """
    if "\0" in text:
        raise UsageError(f"{what} {text!r}: a NUL byte cannot be in a {what}")
    try:
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"{what} {text!r}: {text[exc.start]!r} has no bytes (a lone surrogate)"
        ) from None
    return text


def is_one(paths: StrPath | Sequence[StrPath]) -> bool:
    """``paths`` is one path, not a sequence of them (a ``str`` is both: one path)."""
    return isinstance(paths, str | bytes | os.PathLike)  # bytes: refused by ``fspath``


def fspaths(paths: StrPath | Sequence[StrPath]) -> list[str]:
    """One path or several, as a list of ``str`` (a single ``str`` is one path, not its letters).

    Raises:
        UsageError: a ``bytes`` path.
    """
    if isinstance(paths, str | bytes | os.PathLike):
        return [fspath(paths)]  # a bytes path too, for ``fspath`` to refuse by name
    return [fspath(path) for path in paths]
