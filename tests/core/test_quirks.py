"""Cloud profiles: read from the banner, forced by the setting, each said once."""

from __future__ import annotations

import pytest

from sshpipe.core.config import TransferConfig
from sshpipe.core.defaults import PROFILE_SETTINGS
from sshpipe.core.errors import UsageError
from sshpipe.core.quirks import (
    PROFILES,
    STANDARD,
    Quirks,
    detected,
    idle_close_after,
    quirks_for,
    read_once_verify,
)
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
