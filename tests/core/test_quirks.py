"""Cloud profiles: read from the banner, forced by the setting, each said once."""

from __future__ import annotations

import pytest

from sshpipe.core.config import TransferConfig
from sshpipe.core.defaults import PROFILE_SETTINGS
from sshpipe.core.errors import UsageError
from sshpipe.core.quirks import PROFILES, STANDARD, detected, quirks_for
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
