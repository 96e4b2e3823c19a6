"""The server profile: which server this is, from its banner and VERSION extensions."""

from __future__ import annotations

import pytest

from sshpipe.core.serverprofile import profile_of, software_of

GREENEND = {
    "posix-rename@openssh.com": b"1",
    "fsync@openssh.com": b"1",
    "statvfs@openssh.com": b"2",
    "symlink-order@rjk.greenend.org.uk": b"linkpath-targetpath",
}


@pytest.mark.parametrize(
    ("banner", "extensions", "order"),
    [
        ("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3", {"limits@openssh.com": b"1"}, "target-link"),
        # ProFTPD and paramiko read OpenSSH's order under their own banners.
        ("SSH-2.0-mod_sftp", {"check-file": b"md5,sha1"}, "target-link"),
        ("SSH-2.0-paramiko_3.4.0", {"check-file": b"md5,sha1"}, "target-link"),
        # Green End sits behind sshd's OpenSSH banner and says it uses the draft's.
        ("SSH-2.0-OpenSSH_9.2p1", GREENEND, "link-target"),
        ("SSH-2.0-x", {"symlink-order@rjk.greenend.org.uk": b"targetpath-linkpath"}, "target-link"),
        # AsyncSSH's server reads the client's banner, and ours is not OpenSSH's.
        ("SSH-2.0-AsyncSSH_2.24.1", {}, "link-target"),
        ("", {}, "target-link"),
    ],
)
def test_symlink_order(banner: str, extensions: dict[str, bytes], order: str) -> None:
    assert profile_of(banner, extensions).symlink_order == order


def test_offers_are_short_names_of_what_matters() -> None:
    profile = profile_of("SSH-2.0-OpenSSH_9.2p1", {**GREENEND, "vendor-id": b"x"})
    assert profile.offers == ("fsync", "posix_rename", "statvfs")
    assert profile.offer("fsync") and not profile.offer("limits")
    assert "vendor-id" in profile.extensions
    assert profile.as_dict() == {
        "software": "OpenSSH_9.2p1",
        "symlink_order": "link-target",
        "offers": ["fsync", "posix_rename", "statvfs"],
    }


@pytest.mark.parametrize(
    ("banner", "software"),
    [
        ("SSH-2.0-OpenSSH_9.2p1 Debian-2", "OpenSSH_9.2p1"),
        ("SSH-1.99-Old", "Old"),
        ("SSH-2.0-evil\x1b[31m", "evil\\x1b[31m"),  # a server's text never reaches a terminal raw
        ("SSH-2.0-Caf\udce9_9.9", "Caf\\xe9_9.9"),  # a byte that is not UTF-8, surrogateescaped
        ("SSH-2.0-" + "a" * 500, "a" * 64),
    ],
)
def test_software_is_escaped_and_bounded(banner: str, software: str) -> None:
    assert software_of(banner) == software
