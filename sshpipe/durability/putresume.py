"""``put --resume``: a remote partial under a fixed name, and a local journal of its ranges.

An upload with ``resume`` writes ``.NAME.sshpipe.partial`` beside the
destination and keeps it when it fails. Each WRITE the server acknowledges is
appended to a journal in the user's state directory
(``$XDG_STATE_HOME/sshpipe/resume/``, one file per server and remote path):
the source's directory may be read-only, and SFTP has no cheap append. The
next ``--resume`` reads the journaled ranges back from the partial (pipelined,
as a download does: ``transfer.readback`` runs it) and keeps only those whose
SHA-256 still matches; every other byte is sent again. A source that is not
the file the partial was made of (its device and inode, size, mtime, ctime:
``core.identity``) is refused, saying what differs. One copy at a time: the
journal is locked while it runs (``Journal.claim``).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
from pathlib import Path
from typing import Any

from ..core import codec
from ..core.errors import IntegrityError, ProtocolError, RemoteNotFound
from ..core.identity import change
from ..core.readback import Entry, latest_disjoint
from ..core.readplan import Range
from ..core.tempnames import beside, resume_name
from ..local.dirfd import DirRoot, local_error
from ..local.source import LocalSource
from ..transport.sftp import SFTPSession
from .journal import Journal
from .journal import load as load_journal


def state_dir(name: str = "resume") -> Path:
    """``$XDG_STATE_HOME/sshpipe/NAME`` (made 0700 if missing): upload journals live in
    ``resume``, the record of temporary files in ``ledger`` (``durability.ledger``)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    # The XDG spec says to ignore a relative path here.
    root = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "state"
    path = root / "sshpipe" / name
    try:
        root.mkdir(parents=True, exist_ok=True)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise local_error(path, exc) from exc
    return path


def journal_name(peer: str, remote: str) -> str:
    """The journal's name for an upload to ``remote`` (absolute) on ``peer`` ("user@host:port")."""
    key = hashlib.sha256(codec.wire(f"{peer}\n{remote}")).hexdigest()
    return f"{key}.journal"


def remote_resume_name(remote: str) -> str:
    """The partial's name when resuming: fixed, so the next run finds it (within NAME_MAX)."""
    return beside(remote, resume_name(posixpath.basename(remote), "partial"))


async def absolute(sftp: SFTPSession, remote: str) -> str:
    """``remote`` as an absolute path (its directory resolved by the server)."""
    head, sep, name = remote.rpartition("/")
    directory = await sftp.realpath((head or "/") if sep else ".")
    if not directory.startswith("/") or "\x00" in directory:  # it names the journal
        raise ProtocolError(f"{remote}: the server resolved its directory to {directory!r}")
    return f"{directory.rstrip('/')}/{name}"


class UploadResume:
    """An upload that may continue an earlier one: its remote partial and local journal."""

    def __init__(self, source: LocalSource) -> None:
        self.source = source
        self.partial = ""  # the remote partial's path, once the destination is known
        self.journal: Journal | None = None
        self.kept: list[Range] = []  # ranges of the partial found intact
        self.prepared = False
        self._header: dict[str, Any] = {}  # the journal's, from ``look`` until ``keep``
        self._hashes: dict[int, str] = {}  # offset -> SHA-256 of the WRITE in flight there
        self._state: DirRoot | None = None  # the state directory, held while journaling

    def __repr__(self) -> str:
        return f"<UploadResume {self.partial or '?'} kept={self.kept_bytes} {self.journal!r}>"

    @property
    def continuing(self) -> bool:
        """The partial holds kept ranges: open it without TRUNC."""
        return bool(self.kept)

    @property
    def kept_bytes(self) -> int:
        return sum(rng.length for rng in self.kept)

    async def look(self, sftp: SFTPSession, remote: str) -> tuple[codec.Attrs, list[Entry]] | None:
        """Find the journal (claimed) and check the source against it.

        Returns:
            The partial's attributes and the journaled ranges worth reading
            back from it (maybe none), or None when nothing of it can be kept
            (no journal, no partial, or a partial longer than the source).

        Raises:
            LocalError: another copy is resuming this one (``Journal.claim``).
            IntegrityError: the source changed since the partial was made.
        """
        self.partial = remote_resume_name(remote)
        where = await absolute(sftp, remote)
        if self._state is None:
            self._state = DirRoot(str(state_dir()))
        if self.journal is None:  # claimed once: a retry after a drop holds it already
            self.journal = Journal(self._state.top.file(journal_name(sftp.peer, where)))
            self.journal.claim(str(self.source.path))
        assert self.source.identity is not None
        self._header = header = {
            "peer": sftp.peer,
            "remote": where,
            "local": os.path.abspath(self.source.path),
            **self.source.identity.header(),
        }
        earlier = load_journal(self.journal.path)
        attrs = await self._partial_attrs(sftp)
        # No partial: a journal left by a run whose partial was removed is stale.
        if earlier is None or attrs is None:
            return None
        was, entries = earlier
        self._refuse_if_changed(was, header)
        # A partial longer than the source is not ours to extend: start over.
        if attrs.size is None or attrs.size > self.source.size:
            return None
        return attrs, latest_disjoint(entries, attrs.size)

    def keep(self, kept: list[Range]) -> None:
        """The ranges of the partial found intact stay; the journal starts (again) with them."""
        assert self.journal is not None  # ``look`` claimed it
        self.kept = kept
        self.journal.start(self._header, append=self.continuing)
        self.prepared = True

    async def _partial_attrs(self, sftp: SFTPSession) -> codec.Attrs | None:
        try:
            return await sftp.stat(self.partial)
        except RemoteNotFound:
            return None

    def _refuse_if_changed(self, was: dict[str, Any], now: dict[str, Any]) -> None:
        path = str(self.source.path)
        if any(was.get(key) != now[key] for key in ("peer", "remote", "local")):
            raise IntegrityError(  # a partial copy of another file
                path,
                f"the partial copy {self.partial} on the server is of {was.get('local')}, "
                "not of this file: remove it, or copy without --resume",
            )
        source = self.source.identity
        assert source is not None
        # A journal of an older sshpipe has no inode or ctime: they are not compared.
        changed = change(source.from_header(was), source)
        if changed is not None:
            raise IntegrityError(
                path,
                f"changed since the partial copy {self.partial} was made: {changed}: "
                "remove it, or copy without --resume",
            )

    def sent(self, offset: int, data: bytes) -> None:
        """A WRITE of ``data`` at ``offset`` is going out: hash it for the journal."""
        self._hashes[offset] = hashlib.sha256(data).hexdigest()

    def acked(self, offset: int, length: int) -> None:
        """The server acknowledged the WRITE at ``offset``: journal it.

        Raises:
            LocalError: the journal could not be written.
        """
        digest = self._hashes.pop(offset, None)
        if self.journal is None or digest is None:
            return
        try:
            self.journal.record_hashed([(offset, length, digest)])
        except OSError as exc:
            raise local_error(self.journal.path, exc) from exc

    def finish(self, committed: bool) -> None:
        """After success the journal goes; after a failure it stays, for next time."""
        try:
            if self.journal is not None and committed:
                self.journal.remove()
            elif self.journal is not None:
                self.journal.close()
        finally:
            if self._state is not None:
                self._state.close()
                self._state = None
