"""What one SFTP server is and offers, learned once per connection (pure).

Built from what the server says of itself at no cost: the SSH version string
(its banner) and the extensions its SFTP VERSION lists. Every choice that
depends on *which* server this is reads it here, not the banner: the SYMLINK
argument order, whether a rename may replace, fsync, the hash check-file
offers. What is only learned by trying (the block the server takes whole,
its handle cap, whether it runs commands) is kept next to it by the pool
(``transport.servercaps``) and shown with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from .codec import Limits
from .text import printable

# filexfer-02 §6.10 sends SYMLINK as (linkpath, targetpath); OpenSSH's server
# has always read them the other way round, and since every v3 client talks
# to OpenSSH first, servers followed it: ProFTPD's mod_sftp and paramiko take
# (targetpath, linkpath) under their own banners. Green End says what it does
# in an extension. AsyncSSH's server reads the order from the *client's*
# banner (OpenSSH's for OpenSSH and paramiko clients, else the draft's), and
# ours is not OpenSSH's: it too gets the draft's order.
SymlinkOrder = Literal["target-link", "link-target"]
GREENEND_SYMLINK_ORDER = "symlink-order@rjk.greenend.org.uk"
GREENEND_LINK_ORDER = "link-order@rjk.greenend.org.uk"

# Extensions whose presence changes what the client does, by their short name.
_KNOWN = {
    "limits@openssh.com": "limits",
    "posix-rename@openssh.com": "posix_rename",
    "fsync@openssh.com": "fsync",
    "hardlink@openssh.com": "hardlink",
    "copy-data": "copy_data",
    "check-file": "check_file",
    "check-file-name": "check_file",
    "check-file-handle": "check_file",
    "statvfs@openssh.com": "statvfs",
    "home-directory": "home_directory",
    "expand-path@openssh.com": "home_directory",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerProfile:
    """One server's identity and offers, as its banner and VERSION state them.

    Attributes:
        software: the software part of the SSH version string
            ("OpenSSH_9.2p1", "mod_sftp", "AsyncSSH_2.24.1"), its first 64
            characters, anything unprintable escaped (``\\x1b``; a byte that
            is not UTF-8 as ``\\xe9``): it is untrusted text.
        symlink_order: the order SYMLINK's two paths go on the wire.
        offers: the short names of the extensions that matter to us
            ("limits", "posix_rename", "fsync", "hardlink", "copy_data",
            "check_file", "statvfs", "home_directory"), sorted.
        extensions: every extension name the server listed, sorted.
    """

    software: str
    symlink_order: SymlinkOrder
    offers: tuple[str, ...]
    extensions: tuple[str, ...]

    def offer(self, name: str) -> bool:
        return name in self.offers

    def as_dict(self) -> dict[str, object]:
        return {
            "software": self.software,
            "symlink_order": self.symlink_order,
            "offers": list(self.offers),
        }


def software_of(server_version: str) -> str:
    """The software field of an SSH version string (RFC 4253 §4.2), escaped and bounded."""
    text = server_version.removeprefix("SSH-2.0-").removeprefix("SSH-1.99-")
    software = text.split(" ", 1)[0]
    return printable(software[:64])


def symlink_order(software: str, extensions: dict[str, bytes]) -> SymlinkOrder:
    """SYMLINK's wire order: OpenSSH's unless the server states (or is known for) the draft's."""
    stated = extensions.get(GREENEND_SYMLINK_ORDER)
    if stated is not None:
        return "link-target" if stated.strip() == b"linkpath-targetpath" else "target-link"
    if software.startswith("AsyncSSH_"):
        return "link-target"
    return "target-link"


def profile_of(server_version: str, extensions: dict[str, bytes]) -> ServerProfile:
    """The profile of the server whose banner and VERSION extensions these are."""
    offers = sorted({_KNOWN[name] for name in extensions if name in _KNOWN})
    software = software_of(server_version)
    return ServerProfile(
        software=software,
        symlink_order=symlink_order(software, extensions),
        offers=tuple(offers),
        extensions=tuple(sorted(extensions)),
    )


def describe_server(
    profile: ServerProfile | None,
    limits: Limits | None,
    learned: dict[str, object],
    *,
    quirks: str = "standard",
    adapted: Sequence[str] = (),
) -> dict[str, object]:
    """What the server is, offers, states and was found to allow (``--json``'s "server").

    ``quirks`` names the cloud profile in force (``core.quirks``), ``adapted``
    what the client changed for this server (``ServerCaps.adapted``).
    """
    shown: dict[str, object] = {}
    if profile is not None:
        shown.update(profile.as_dict())
    shown["profile"] = quirks
    shown["adapted"] = list(adapted)
    if limits is not None:
        shown["limits"] = {
            "max_read_len": limits.max_read_len,
            "max_write_len": limits.max_write_len,
            "max_open_handles": limits.max_open_handles,
        }
    shown["learned"] = learned
    return shown
