"""The paths the public API takes: ``str`` or any ``os.PathLike[str]``, made ``str`` once.

Remote paths too: a ``PurePosixPath`` is the natural type for one. Everything
below the API works with ``str`` alone.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeAlias

from ._errors import UsageError

# What ``os.fspath`` turns into a ``str`` (typeshed's ``StrPath``).
StrPath: TypeAlias = str | os.PathLike[str]


def fspath(path: StrPath) -> str:
    """``path`` as a ``str``.

    Raises:
        UsageError: a ``bytes`` path (or anything else that is no path).
    """
    try:
        text = os.fspath(path)
    except TypeError as exc:
        raise UsageError(f"a path is a str or os.PathLike[str], not {path!r}") from exc
    if not isinstance(text, str):
        raise UsageError(f"a path is a str or os.PathLike[str], not bytes: {path!r}")
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
