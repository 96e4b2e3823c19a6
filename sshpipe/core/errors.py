"""The exception tree, split by cause.

Every error sshpipe raises is an :class:`SSHPipeError`; the CLI prints its
one-line ``str()`` and exits with its ``exit_code``. Whether an error is worth
retrying is a class attribute (``retryable``), never found by reading messages::

    SSHPipeError
    ├── UsageError                 bad options or arguments (exit 2)
    ├── LocalError                 the local file system said no (exit 3)
    │   └── LocalNoSpace           disk full or over quota (a tree stops there)
    ├── RemoteError                the SFTP server answered with a failure status (exit 4)
    │   ├── RemoteNotFound
    │   ├── RemotePermissionDenied
    │   ├── RemoteIsADirectory
    │   ├── RemoteExists           something is already at the path (mkdir, rename)
    │   └── RemoteOpenFailed       an OPEN refused with a bare failure (out of handles?)
    ├── ConnectError               no session could be set up (exit 5, retryable)
    │   ├── ConnectTimeout         TCP connect plus handshake took over connect_timeout (T)
    │   ├── ConnectDropped         the server closed the connection before the log-in
    │   │                          (sshd's MaxStartups): tried again within the retries
    │   ├── AuthenticationError    keys/password refused (exit 6)
    │   │   └── KeyLoadError       a private key named cannot be used: missing, unreadable,
    │   │                          encrypted without (or with a wrong) passphrase, malformed
    │   └── HostKeyError           host key not trusted (exit 7); as itself: a known_hosts
    │       │                      callable refused it
    │       ├── UnknownHostKey
    │       └── HostKeyMismatch
    ├── ConnectionBroken           the network or the peer dropped us mid-way (exit 5, retryable)
    │   ├── Stalled                no reply for stall_timeout seconds (T)
    │   └── ChannelRefused         no more channels on this connection (MaxSessions)
    ├── PoolExhausted              every channel the client may open carries all the transfers
    │                              it can, for queue_timeout seconds (exit 11, retryable) (T)
    ├── ProtocolError              the server broke the SFTP protocol (exit 8), or sent
    │   │                          more than sshpipe holds (an endless output, a huge handle)
    │   ├── UnsafePath             a listing named something outside the destination (or
    │   │                          a repeated name, a bad link target, a listing without end)
    │   └── TooDeep                a tree deeper than ``max_depth`` directories (a tree stops)
    ├── ClosedError                you closed the session and then used it (exit 9)
    ├── IntegrityError             what arrived is not what the source holds (exit 10, retryable)
    │   └── HashUnavailable        verify="hash" asked, the server cannot hash (not retryable)
    └── IncompleteTransfer         some files of a tree failed (their common exit code, else 1)

(T): also a :class:`TimedOut`, so ``except sshpipe.TimedOut`` catches every
deadline that passed, whichever stage it was at. None is a builtin
``TimeoutError``: that stays asyncio's, inside sshpipe.

*Closed* is what you did; *broken* is what the world did (trio's split).

Only what another try may fix is ``retryable``: a refused or timed-out
connection, a dropped one, a copy that came out different. A key that cannot
be loaded, credentials refused, a host key not trusted, a server that cannot
hash are the same on every try. Every ``ConnectError`` carries the ``host``
and ``port`` it was for (None where not known yet); host key errors also the
key's ``fingerprint`` ("SHA256:...") and ``key_type`` ("ssh-ed25519").

Messages quote what servers send (names, status text, disconnect reasons), so
``str()`` of every error escapes control characters (``core.text.printable``):
a message is safe to print to a terminal or write to a log as it is. It is
bounded too (``core.text.clip``): a server's text shows its first
``core.text.SHOWN`` characters and counts the rest, and a whole message at most
``MESSAGE_SHOWN``. The attributes (``path``, ``reason``) keep the text exactly
as it came.

A ``TransferError``'s ``errno`` is the POSIX errno it stands for, where one
does (ENOENT for ``RemoteNotFound``; a ``LocalError``'s own OS error's), else
None: what fsspec's OSErrors and a tree's ``TreeFailure.errno`` carry.
"""

from __future__ import annotations

from errno import EACCES, EEXIST, EISDIR, ENOENT

from .text import MESSAGE_SHOWN, clip, printable

# Not typing's: the command line's usage errors load no typing (re, enum) for it.
TYPE_CHECKING = False

if TYPE_CHECKING:
    from .stats import TreeStats


class SSHPipeError(Exception):
    """Base class of every error sshpipe raises."""

    exit_code = 1
    retryable = False

    def __str__(self) -> str:
        return printable(clip(super().__str__(), MESSAGE_SHOWN))


class UsageError(SSHPipeError, ValueError):
    """An option, argument or configuration value is invalid."""

    exit_code = 2


class TransferError(SSHPipeError):
    """A failure tied to one path (and possibly one offset) of a transfer.

    Attributes:
        path: the local or remote path concerned.
        offset: the byte offset of the failing request, when there was one.
        reason: the underlying message (server text or OS error string).
        errno: the POSIX errno this failure is, when one says it (else None).
    """

    errno: int | None = None

    def __init__(self, path: str, reason: str, *, offset: int | None = None) -> None:
        self.path = path
        self.reason = reason
        self.offset = offset
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"{self._side}: {path}{where}: {clip(reason)}")

    _side = "error"


class LocalError(TransferError):
    """Reading or writing the local file failed (missing, permission, disk full...)."""

    exit_code = 3
    _side = "local"

    def __init__(
        self, path: str, reason: str, *, offset: int | None = None, errno: int | None = None
    ) -> None:
        super().__init__(path, reason, offset=offset)
        self.errno = errno  # the OS error's, when it came from one


class LocalNoSpace(LocalError):
    """The local file system is full (or over quota): every next file would fail too."""


class RemoteError(TransferError):
    """The SFTP server answered a request with a failure status.

    Attributes:
        status: the SFTP status code (filexfer-02 §7), when the server sent one.
    """

    exit_code = 4
    _side = "remote"

    def __init__(
        self, path: str, reason: str, *, offset: int | None = None, status: int | None = None
    ) -> None:
        super().__init__(path, reason, offset=offset)
        self.status = status


class RemoteNotFound(RemoteError):
    """The remote path does not exist."""

    errno = ENOENT


class RemotePermissionDenied(RemoteError):
    """The server refused access to the remote path."""

    errno = EACCES


class RemoteIsADirectory(RemoteError):
    """A file was expected at the remote path but it is a directory."""

    errno = EISDIR


class RemoteExists(RemoteError):
    """Something is already at the remote path, and the operation would not replace it."""

    errno = EEXIST


class RemoteOpenFailed(RemoteError):
    """An OPEN or OPENDIR answered with a bare failure, which is also how a
    server out of handles says so: a tree that holds others lowers its cap
    and asks again (``core.servercaps``) before it takes it as the file's."""


class TimedOut(SSHPipeError):
    """A deadline passed: a connect or handshake, or a reply the server owed.

    A base for catching, not raised itself: the exit code and ``retryable``
    are those of the concrete class (``ConnectTimeout``, ``Stalled``).
    """


class ConnectError(SSHPipeError):
    """The SSH session could not be set up (DNS, refused, timeout, handshake).

    Attributes:
        host: the host asked for (an ssh_config alias as given), None if not known.
        port: the TCP port tried, None if not known.
    """

    exit_code = 5
    retryable = True

    def __init__(self, message: str, *, host: str | None = None, port: int | None = None) -> None:
        super().__init__(message)
        self.host = host
        self.port = port


class ConnectTimeout(ConnectError, TimedOut):
    """TCP connect plus the SSH handshake took longer than ``connect_timeout``."""


class ConnectDropped(ConnectError):
    """The server closed the connection before the log-in began.

    What sshd does to a connection past its ``MaxStartups`` (by default, at
    random once 10 are waiting to log in: "Exceeded MaxStartups", then the
    socket closed), and what a server that limits its connections does: it
    is busy now, not refusing for good. So a connection is tried again for
    it, with backoff, within ``TransferConfig.retries`` (the first of a
    command, and every later one); a refused port is not (nothing listens
    there: OpenSSH's ConnectionAttempts is 1 too), nor anything the log-in
    itself refused.
    """


class AuthenticationError(ConnectError):
    """The server refused every credential we offered."""

    exit_code = 6
    retryable = False


class KeyLoadError(AuthenticationError):
    """A private key given by name (or as bytes) cannot be used; nothing was tried.

    Missing or unreadable, malformed, or encrypted and no passphrase (or a
    wrong one) given, with nothing to ask it with (no ``prompt`` callback,
    ``batch_mode``; on the command line, no terminal or BatchMode). OpenSSH
    warns and logs in with the other keys; sshpipe refuses before it
    connects, as a key named on purpose that cannot be used is a mistake
    another try repeats. With a prompt, an encrypted key is asked about
    when the log-in reaches it instead.

    Attributes:
        key: the file named (or "(bytes)").
    """

    def __init__(
        self, key: str, reason: str, *, host: str | None = None, port: int | None = None
    ) -> None:
        super().__init__(f"cannot load private key {key}: {reason}", host=host, port=port)
        self.key = key


class HostKeyError(ConnectError):
    """The server's host key is not trusted under the host key policy.

    Raised as itself when a ``known_hosts`` callable returned False (or raised).

    Attributes:
        fingerprint: the server's key, as ``ssh-keygen -l`` shows it ("SHA256:..."),
            None if none was seen.
        key_type: its algorithm ("ssh-ed25519"), None if none was seen.
    """

    exit_code = 7
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        host: str | None = None,
        port: int | None = None,
        fingerprint: str | None = None,
        key_type: str | None = None,
    ) -> None:
        super().__init__(message, host=host, port=port)
        self.fingerprint = fingerprint
        self.key_type = key_type


class UnknownHostKey(HostKeyError):
    """The host is not in known_hosts and StrictHostKeyChecking forbids adding it."""


class HostKeyMismatch(HostKeyError):
    """known_hosts has a different key for this host: refused whatever the policy."""


class ConnectionBroken(SSHPipeError):
    """The connection or channel went away mid-way; the transfer may be retried."""

    exit_code = 5
    retryable = True


class Stalled(ConnectionBroken, TimedOut):
    """No reply came for ``stall_timeout`` seconds: the connection counts as dropped."""


class ChannelRefused(ConnectionBroken):
    """The server would not open another channel on this connection.

    OpenSSH refuses past ``MaxSessions`` (10 by default); the connection itself
    is fine and another connection can carry more channels.
    """


class PoolExhausted(TimedOut):
    """No channel could be had for ``TransferConfig.queue_timeout`` seconds.

    The client's own limit, not the server's failure: every connection it may
    open (``max_connections``) is open and every channel on them carries as
    many transfers as the server's handle cap allows. Retryable: the queue
    drains as the other transfers finish.
    """

    exit_code = 11
    retryable = True


class ProtocolError(SSHPipeError):
    """The server sent something the SFTP protocol does not allow."""

    exit_code = 8


class ClosedError(SSHPipeError):
    """The session was closed by this side and then used."""

    exit_code = 9


class IntegrityError(TransferError):
    """The copy's hash (or size) is not the source's: nothing took the final name.

    The source changed while it was copied, or bytes were corrupted on the way.
    """

    exit_code = 10
    retryable = True
    _side = "verify"


class HashUnavailable(IntegrityError):
    """``verify="hash"`` was asked and the server can hash the copy in no way.

    It runs no ``sha256sum`` and offers no ``check-file``; the copy did not take
    its name. Not retryable: the server will not learn to hash. ``"best"`` (the
    CLI's plain ``--verify``) checks the size there instead.
    """

    retryable = False


class UnsafePath(ProtocolError):
    """A remote listing held what cannot be copied safely; nothing is written for it.

    A name that is not one plain path component (``..``, ``.``, a ``/`` or a
    NUL inside it, too long), the same name twice, link text no symlink can
    hold: a server that sends one is broken or hostile (the scp CVE-2019-6111
    class). The other entries are still copied. ``listing_refused`` marks a
    listing given up on as a whole (endless, or made of unsafe names).
    """

    def __init__(
        self, where: str, name: str, *, what: str = "name", listing_refused: str | None = None
    ) -> None:
        self.path = where
        self.name = name
        # Why the whole listing of ``where`` was given up on, if it was.
        self.listing_refused = listing_refused
        if listing_refused is not None:
            message = f"remote: {where}: listing refused: {listing_refused}"
        else:
            message = f"remote: {where}: unsafe {what} {clip(name)!r} in the listing, refused"
        super().__init__(message)


class TooDeep(ProtocolError):
    """A tree went more than ``TransferConfig.max_depth`` directories deep; it stops there.

    A server's endless chain of directories, or of links under ``-L`` whose
    REALPATH never repeats, ends here (OpenSSH's sftp stops at 64 too). An
    honest tree that deep needs the limit raised (``--max-depth``). The
    whole tree stops, not the branch: a tree that branches at every level
    would otherwise be walked down every branch.

    Attributes:
        path: the directory past the limit (``shown`` elides its middle).
        limit: the ``max_depth`` in force.
    """

    def __init__(self, path: str, limit: int, *, side: str = "remote", shown: str = "") -> None:
        self.path = path
        self.limit = limit
        super().__init__(
            f"{side}: {shown or path}: more than {limit} levels of directories "
            "(--max-depth raises the limit)"
        )


class IncompleteTransfer(SSHPipeError):
    """Some files of a tree transfer failed; the others were copied.

    Attributes:
        stats: the TreeStats of the whole transfer.
        failures: a TreeFailure per path that failed, in the order they failed.
        summary: "N of M entries failed", without the first failure's text that
            the message adds (for a caller that lists every failure itself).
    """

    def __init__(self, stats: TreeStats) -> None:
        self.stats = stats
        self.failures = stats.failures
        codes = {failure.exit_code for failure in self.failures}
        self.exit_code = codes.pop() if len(codes) == 1 else 1
        first = self.failures[0].error if self.failures else "no detail"
        failed = len(self.failures) + stats.failures_unlisted
        # A directory can fail twice (its listing, then its times): never "3 of 2".
        entries = max(stats.entries, failed)
        self.summary = f"{failed} of {entries} entries failed"
        super().__init__(f"{self.summary} (first: {first})")
