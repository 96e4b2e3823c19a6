"""sshpipe's errors as the builtin OSErrors fsspec users catch (FileNotFoundError...).

The sshpipe error stays the ``__cause__``: its status code and the server's
words are not lost. Only the classes of the documented tree decide (never the
message text), through their ``errno``: ``OSError(errno, ...)`` is the builtin
subclass of that errno (ENOENT: FileNotFoundError). One with none is EIO. A
listing of a non-directory is told apart by a STAT in ``_ls``.
"""

from __future__ import annotations

import errno
import functools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from ..core.errors import IncompleteTransfer, LocalError, RemoteError, TransferError

P = ParamSpec("P")
T = TypeVar("T")


def as_oserror(exc: BaseException) -> BaseException:
    """The OSError fsspec expects for ``exc``, or ``exc`` itself when none fits."""
    if isinstance(exc, IncompleteTransfer):
        # The failures' common errno, named by the first one's path (the
        # message counts them all); failures of several kinds are EIO.
        codes = {failure.errno for failure in exc.failures}
        code = codes.pop() if len(codes) == 1 else None
        first = exc.failures[0].path if exc.failures else None
        return OSError(code or errno.EIO, str(exc), first)
    if isinstance(exc, TransferError):
        return OSError(exc.errno or errno.EIO, exc.reason, exc.path)
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
