"""Cloud SFTP servers' known quirks, as named profiles: read from the banner or forced (pure).

Some servers are not file systems behind SFTP but object stores or mailboxes
in front of one, and refuse what every POSIX-backed server does. Each quirk
below is one users reported; a profile is the set one product has:

- ``aws-transfer`` (AWS Transfer Family, banner ``AWS_SFTP_*``): no SETSTAT
  or FSETSTAT; OPEN with CREAT|TRUNC together with READ|WRITE refused.
- ``azure-blob`` (Azure Blob Storage's SFTP endpoint, banner ``AzureSSH_*``):
  writes only at the end of the file, at most 50,000 WRITEs per file (a
  block blob's block count), no symlinks, no SETSTAT, and a connection idle
  for 4 minutes dropped.
- ``mailbox`` (IBM Sterling-style mailboxes; no banner to tell them by, so
  only forced): a file may be read once, and a STAT by name may consume it
  (rclone's ``use_fstat``): attributes come from FSTAT on the open handle, no
  read-back verify, no second OPEN for striping.
- ``standard``: none of these; ``auto`` (the default) takes the profile the
  banner names, else ``standard``.

A ``Quirks`` object may stand for a setting (``TransferConfig(server_profile=
Quirks(name="azure-blob", idle_timeout=30.0, ...))``): a server of a known kind
configured otherwise (a shorter idle timeout), or a test that cannot wait
four minutes.

Whatever the profile, a quirk met at run time (a SETSTAT refused, a WRITE out
of order) is learned by ``servercaps.ServerCaps`` for the rest of the run; a
profile only saves the failed attempt, and says up front what it changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import codec
from .readplan import Range

# Azure Blob's cap on the blocks of one blob: one WRITE is one block.
AZURE_MAX_WRITE_BLOCKS = 50_000
# A block raised for a block cap is a multiple of this (a page: servers and
# disks take those whole).
BLOCK_ALIGN = 4096
# The flags an OPEN to write may not combine (AWS Transfer Family).
_CREAT_TRUNC = codec.FXF_CREAT | codec.FXF_TRUNC
_READ_WRITE = codec.FXF_READ | codec.FXF_WRITE
# Azure drops a connection idle for 4 minutes; ours close a margin before.
AZURE_IDLE_TIMEOUT = 240.0
# The margin: the server's idle clock starts at the last request it read, ours
# when the last channel came back idle (a reply's trip later); 30 s covers a
# slow link's round trips and timers firing late on a loaded machine.
IDLE_MARGIN = 30.0

# What a read-once file cannot have: a second read, so no hash of it but ours.
READ_ONCE_UNVERIFIABLE = "not verified: read-once server (the file cannot be read a second time)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Quirks:
    """What one kind of server refuses, so the client does not ask.

    Attributes:
        name: the profile's name ("standard", "aws-transfer", "azure-blob", "mailbox").
        no_setstat: SETSTAT and FSETSTAT refused: times and modes are not set
            (and the copy says so once) instead of failing the copy.
        split_open: OPEN with CREAT|TRUNC and READ|WRITE together refused: a
            file to write is opened CREAT|WRITE, then truncated apart.
        sequential_writes: WRITEs only at the file's current end.
        max_write_blocks: most WRITEs one file may take (None: no cap); the
            block size is chosen so the file fits.
        no_symlinks: SYMLINK refused: a link is copied as what it points to, or skipped.
        idle_timeout: seconds after which the server drops an idle connection
            (None: never); idle connections are closed before it.
        read_once: a file may be read once; a STAT by name may consume it.
    """

    name: str
    no_setstat: bool = False
    split_open: bool = False
    sequential_writes: bool = False
    max_write_blocks: int | None = None
    no_symlinks: bool = False
    idle_timeout: float | None = None
    read_once: bool = False

    def changes(self) -> list[str]:
        """One line per quirk in force, for ``-v`` and ``--json`` ("what it changed")."""
        said: list[str] = []
        if self.no_setstat:
            said.append("times and modes are not set (no SETSTAT)")
        if self.split_open:
            said.append("files are opened, then truncated (no combined OPEN flags)")
        if self.sequential_writes:
            said.append("uploads are written in order on one channel")
        if self.max_write_blocks is not None:
            said.append(f"at most {self.max_write_blocks:,} WRITEs per file")
        if self.no_symlinks:
            said.append("no symlinks are made")
        if self.idle_timeout is not None:
            said.append(f"idle connections closed before {self.idle_timeout:g} s")
        if self.read_once:
            said.append("each file is opened once (read-once): no STAT by name, no read-back")
        return said


STANDARD = Quirks(name="standard")
PROFILES: dict[str, Quirks] = {
    "standard": STANDARD,
    "aws-transfer": Quirks(name="aws-transfer", no_setstat=True, split_open=True),
    "azure-blob": Quirks(
        name="azure-blob",
        no_setstat=True,
        sequential_writes=True,
        max_write_blocks=AZURE_MAX_WRITE_BLOCKS,
        no_symlinks=True,
        idle_timeout=AZURE_IDLE_TIMEOUT,
    ),
    "mailbox": Quirks(name="mailbox", read_once=True, no_setstat=True),
}
# What ``TransferConfig.server_profile`` takes is ``defaults.PROFILE_SETTINGS``:
# "auto" and these names (tests/core/test_quirks.py holds the two together).

# The software field of a banner (``serverprofile.software_of``), by prefix.
_BANNERS = (("AWS_SFTP", "aws-transfer"), ("AzureSSH", "azure-blob"))


def detected(software: str) -> Quirks:
    """The profile a server's banner software names, else ``STANDARD``."""
    for prefix, name in _BANNERS:
        if software.startswith(prefix):
            return PROFILES[name]
    return STANDARD


def quirks_for(setting: str | Quirks, software: str) -> Quirks:
    """The profile in force: the one ``setting`` forces (a name, or itself), or
    (``auto``) the banner's."""
    if isinstance(setting, Quirks):
        return setting
    return detected(software) if setting == "auto" else PROFILES[setting]


def idle_close_after(idle_timeout: float) -> float:
    """Seconds after which our idle connection is closed, before the server drops it.

    ``IDLE_MARGIN`` before the server's timeout, and never more than a
    quarter of a short one.
    """
    return idle_timeout - min(IDLE_MARGIN, idle_timeout / 4)


def read_once_verify(level: str) -> str | None:
    """The ``--verify`` level a read-once file allows instead of ``level``; None: none.

    A hash needs the server to read the file again (``sha256sum``,
    ``check-file``, a read-back): a read-once file is gone by then. The size
    needs no second read: the handle's FSTAT stated it ("best" settles for
    it, as where a server cannot hash). "hash" and "read-back" asked by name
    cannot be had at all.
    """
    if level in ("none", "size"):
        return level
    return "size" if level == "best" else None


def combined_open(pflags: int) -> bool:
    """Whether an OPEN with ``pflags`` is one a ``split_open`` server refuses."""
    return pflags & _CREAT_TRUNC == _CREAT_TRUNC and bool(pflags & _READ_WRITE)


def split_opens(pflags: int) -> tuple[int, ...]:
    """The OPENs such a server takes for one of ``pflags``, sent together, in order.

    With EXCL the file is new, so empty: TRUNC is dropped, nothing else to do
    (our temporary files). Without, "create or truncate" is two OPENs: the
    first truncates a file that is there (no CREAT), the second creates one
    that was not (EXCL, no TRUNC); at most one gives a handle, and neither
    needs SETSTAT, which such servers often refuse too.
    """
    if not combined_open(pflags):
        return (pflags,)
    if pflags & codec.FXF_EXCL:
        return (pflags & ~codec.FXF_TRUNC,)
    return (pflags & ~codec.FXF_CREAT, (pflags & ~codec.FXF_TRUNC) | codec.FXF_EXCL)


def capped_block(size: int, block: int, largest: int, max_blocks: int) -> int | None:
    """The WRITE length for ``size`` bytes in at most ``max_blocks`` WRITEs.

    ``block`` where it fits; else the least multiple of ``BLOCK_ALIGN`` that
    does, up to ``largest`` (the most the server takes in one WRITE); None
    when even ``largest`` cannot fit the file.
    """
    if -(-size // block) <= max_blocks:
        return block
    needed = -(-size // max_blocks)
    if needed > largest:
        return None
    return min(largest, -(-needed // BLOCK_ALIGN) * BLOCK_ALIGN)


def appendable(kept: list[Range], size: int | None) -> list[Range]:
    """What a resume to a server that writes only at the end keeps of ``kept``.

    Only a prefix it can append to: the ranges from offset 0 on without a
    gap, and only if the partial file (``size`` bytes) ends where they do
    (past it, the next WRITE would not be at the end). Else nothing: the
    partial is written again from 0.
    """
    end = 0
    for rng in sorted(kept, key=lambda rng: rng.offset):
        if rng.offset > end:
            break
        end = max(end, rng.end)
    if end == 0 or size != end:
        return []
    return [Range(0, end)]
