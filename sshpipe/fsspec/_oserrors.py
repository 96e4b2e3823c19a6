"""sshpipe's errors as the builtin OSErrors fsspec users catch (FileNotFoundError...).

The sshpipe error stays the ``__cause__``: its status code and the server's
words are not lost. Only the classes of the documented tree decide (never the
message text): a listing of a non-directory is told apart by a STAT in ``_ls``.
"""

from __future__ import annotations

import errno
import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from .._errors import (
    IncompleteTransfer,
    LocalError,
    RemoteError,
    RemoteExists,
    RemoteIsADirectory,
    RemoteNotFound,
    RemotePermissionDenied,
)

P = ParamSpec("P")
T = TypeVar("T")

_BY_CLASS: tuple[tuple[type[RemoteError], type[OSError], int], ...] = (
    (RemoteNotFound, FileNotFoundError, errno.ENOENT),
    (RemoteExists, FileExistsError, errno.EEXIST),
    (RemotePermissionDenied, PermissionError, errno.EACCES),
    (RemoteIsADirectory, IsADirectoryError, errno.EISDIR),
)


def as_oserror(exc: BaseException) -> BaseException:
    """The OSError fsspec expects for ``exc``, or ``exc`` itself when none fits."""
    if isinstance(exc, IncompleteTransfer):
        # A tree's failures are kept as messages, not classes: an OSError says
        # "some files failed"; a caller wanting the cause re-reads the one file.
        return OSError(errno.EIO, str(exc))
    for cls, builtin, code in _BY_CLASS:
        if isinstance(exc, cls):
            return builtin(code, exc.reason, exc.path)
    if isinstance(exc, LocalError):
        return OSError(errno.EIO, exc.reason, exc.path)
    return exc


@contextmanager
def oserrors() -> Iterator[None]:
    """Re-raise sshpipe's remote and local errors as OSErrors (the cause kept)."""
    try:
        yield
    except (RemoteError, LocalError, IncompleteTransfer) as exc:
        mapped = as_oserror(exc)
        if mapped is exc:
            raise
        raise mapped from exc


def translated(func: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """``func`` with :func:`oserrors` around its body."""

    @functools.wraps(func)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        with oserrors():
            return await func(*args, **kwargs)

    return wrapper
