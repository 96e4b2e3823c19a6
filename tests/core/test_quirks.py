"""Cloud profiles: read from the banner, forced by the setting, each said once."""

from __future__ import annotations

import pytest

from sshpipe.core.codec import (
    FX_FAILURE,
    FX_NO_SUCH_FILE,
    FX_OP_UNSUPPORTED,
    FX_PERMISSION_DENIED,
    FXF_CREAT,
    FXF_EXCL,
    FXF_READ,
    FXF_TRUNC,
    FXF_WRITE,
)
from sshpipe.core.config import TransferConfig
from sshpipe.core.defaults import PROFILE_SETTINGS
from sshpipe.core.errors import UsageError
from sshpipe.core.quirks import (
    PROFILES,
    STANDARD,
    Quirks,
    appendable,
    capped_block,
    combined_open,
    detected,
    idle_close_after,
    quirks_for,
    read_once_verify,
    split_opens,
)
from sshpipe.core.readplan import Range
from sshpipe.core.servercaps import ServerCaps


@pytest.mark.parametrize(
    ("software", "name"),
    [
        ("AWS_SFTP_1.1", "aws-transfer"),
        ("AzureSSH_1.0.0", "azure-blob"),
        ("OpenSSH_9.2p1", "standard"),
        ("mod_sftp", "standard"),
        ("", "standard"),
    ],
)
def test_the_banner_names_the_profile(software: str, name: str) -> None:
    assert detected(software).name == name


def test_a_forced_profile_wins_over_the_banner() -> None:
    assert quirks_for("mailbox", "OpenSSH_9.2p1").read_once
    assert quirks_for("standard", "AzureSSH_1.0.0") is STANDARD
    assert quirks_for("auto", "AzureSSH_1.0.0").sequential_writes


def test_every_profile_but_standard_says_what_it_changes() -> None:
    assert STANDARD.changes() == []
    for name, quirks in PROFILES.items():
        assert quirks.name == name
        assert (name == "standard") == (not quirks.changes())


def test_the_settings_named_for_help_are_auto_and_the_profiles() -> None:
    """--help lists them from ``defaults`` (no dataclasses loaded): the same names."""
    assert ("auto", *PROFILES) == PROFILE_SETTINGS


def test_the_setting_refuses_an_unknown_profile() -> None:
    with pytest.raises(UsageError, match="server_profile must be one of auto, standard"):
        TransferConfig(server_profile="s3")


def test_a_change_is_noted_once() -> None:
    caps = ServerCaps()
    assert caps.adapt("times and modes are not set (no SETSTAT)")
    assert not caps.adapt("times and modes are not set (no SETSTAT)")
    assert caps.adapted == ["times and modes are not set (no SETSTAT)"]


def test_a_profile_object_forces_itself() -> None:
    mine = Quirks(name="azure-blob", idle_timeout=30.0)
    assert quirks_for(mine, "OpenSSH_9.2p1") is mine
    assert TransferConfig(server_profile=mine).server_profile is mine


@pytest.mark.parametrize(
    ("timeout", "closed_after"),
    [
        (240.0, 210.0),  # Azure's 4 minutes: 30 s before
        (60.0, 45.0),  # a quarter of a short one
        (1.0, 0.75),
    ],
)
def test_idle_connections_close_a_margin_before_the_server_drops_them(
    timeout: float, closed_after: float
) -> None:
    assert idle_close_after(timeout) == closed_after


@pytest.mark.parametrize(
    ("asked", "allowed"),
    [
        ("none", "none"),
        ("size", "size"),
        ("best", "size"),  # as where a server cannot hash
        ("hash", None),  # a second read: refused before the file is opened
        ("read-back", None),
    ],
)
def test_a_read_once_file_is_verified_by_its_size_at_most(asked: str, allowed: str | None) -> None:
    assert read_once_verify(asked) == allowed


# -- the rules each quirk follows ----------------------------------------------------

W, C, T, E, R = FXF_WRITE, FXF_CREAT, FXF_TRUNC, FXF_EXCL, FXF_READ


@pytest.mark.parametrize(
    ("pflags", "combined", "split"),
    [
        (W | C | T | E, True, (W | C | E,)),  # a fresh temporary name: nothing to truncate
        (W | C | T, True, (W | T, W | C | E)),  # truncate what is there, else create it
        (R | W | C | T, True, (R | W | T, R | W | C | E)),
        (W | C | E, False, (W | C | E,)),
        (W | C, False, (W | C,)),
        (W, False, (W,)),
        (C | T, False, (C | T,)),  # neither READ nor WRITE: not what is refused
        (R, False, (R,)),
    ],
)
def test_split_opens(pflags: int, combined: bool, split: tuple[int, ...]) -> None:
    assert combined_open(pflags) is combined
    assert split_opens(pflags) == split
    assert not any(combined_open(flags) for flags in split_opens(pflags))


KiB = 1024


@pytest.mark.parametrize(
    ("size", "block", "largest", "most", "chosen"),
    [
        (100 * KiB, 32 * KiB, 256 * KiB, 8, 32 * KiB),  # fits as it is
        (256 * KiB, 32 * KiB, 256 * KiB, 8, 32 * KiB),  # exactly
        (256 * KiB + 1, 32 * KiB, 256 * KiB, 8, 36 * KiB),  # up to the next 4 KiB
        (3 * 1024 * KiB, 255 * KiB, 4096 * KiB, 8, 384 * KiB),
        (2048 * KiB, 255 * KiB, 256 * KiB, 8, 256 * KiB),  # the largest fits exactly
        (2048 * KiB + 1, 255 * KiB, 256 * KiB, 8, None),  # not even the largest
        (0, 32 * KiB, 256 * KiB, 1, 32 * KiB),
        (50_000 * 255 * KiB + 1, 255 * KiB, 4096 * KiB, 50_000, 256 * KiB),
    ],
)
def test_the_block_a_block_cap_needs(
    size: int, block: int, largest: int, most: int, chosen: int | None
) -> None:
    got = capped_block(size, block, largest, most)
    assert got == chosen
    if got is not None:
        assert -(-size // got) <= most and got <= max(block, largest)


@pytest.mark.parametrize(
    ("kept", "size", "appended"),
    [
        ([(0, 10), (10, 10)], 20, [(0, 20)]),
        ([(10, 10), (0, 10)], 20, [(0, 20)]),  # in any order
        ([(0, 10), (20, 10)], 30, []),  # a gap: the file's end is past the prefix
        ([(0, 10), (20, 10)], 10, [(0, 10)]),  # the partial ends where the prefix does
        ([(0, 10)], 15, []),  # more on the server than journaled: not at its end
        ([(5, 10)], 15, []),  # nothing from 0
        ([], 0, []),
        ([(0, 10), (5, 10)], 15, [(0, 15)]),  # overlapping
        ([(0, 10)], None, []),
    ],
)
def test_a_resume_in_order_keeps_only_what_it_appends_to(
    kept: list[tuple[int, int]], size: int | None, appended: list[tuple[int, int]]
) -> None:
    assert appendable([Range(*rng) for rng in kept], size) == [Range(*rng) for rng in appended]


@pytest.mark.parametrize(
    ("status", "learned"),
    [
        (FX_OP_UNSUPPORTED, True),
        (FX_PERMISSION_DENIED, True),
        (FX_FAILURE, True),
        (FX_NO_SUCH_FILE, False),  # the file is gone: its own error
        (None, False),
    ],
)
def test_which_setstat_refusals_are_learned(status: int | None, learned: bool) -> None:
    caps = ServerCaps()
    assert not caps.setstat_off
    assert caps.refused_setstat(status) is learned
    assert caps.setstat_off is learned
    assert ("no_setstat" in caps.learned()) is learned


def test_only_an_unsupported_symlink_is_learned() -> None:
    caps = ServerCaps()
    assert not caps.refused_symlink(FX_FAILURE)  # also what a name taken answers
    assert not caps.symlinks_off
    assert caps.refused_symlink(FX_OP_UNSUPPORTED)
    assert caps.symlinks_off and caps.learned()["no_symlinks"] is True


def test_a_profile_turns_the_caps_on_without_learning() -> None:
    caps = ServerCaps(quirks=PROFILES["azure-blob"])
    assert caps.setstat_off and caps.symlinks_off and caps.in_order and not caps.opens_split
    assert caps.learned() == {}  # nothing was met
    caps = ServerCaps(quirks=PROFILES["aws-transfer"])
    assert caps.setstat_off and caps.opens_split and not caps.in_order
