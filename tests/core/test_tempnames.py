"""Our names beside a destination: their shapes, and that each fits in one directory entry."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sshpipe.core.tempnames import (
    NAME_MAX,
    beside,
    is_ours,
    is_temp_name,
    resume_name,
    temp_name,
)
from sshpipe.core.untrusted import is_temporary_name

LATIN1 = b"caf\xe9".decode("utf-8", "surrogateescape")  # a name that is not UTF-8


def _size(name: str) -> int:
    return len(name.encode("utf-8", "surrogateescape"))


@pytest.mark.parametrize(
    ("name", "made", "partial", "journal"),
    [
        (
            "a.bin",
            ".a.bin.sshpipe-0a1b2c.partial",
            ".a.bin.sshpipe.partial",
            ".a.bin.sshpipe.journal",
        ),
        (LATIN1, f".{LATIN1}.sshpipe-0a1b2c.partial", f".{LATIN1}.sshpipe.partial", None),
    ],
)
def test_a_short_name_is_kept_whole(
    name: str, made: str, partial: str, journal: str | None
) -> None:
    assert temp_name(name, "0a1b2c") == made
    assert resume_name(name, "partial") == partial
    if journal is not None:
        assert resume_name(name, "journal") == journal


@pytest.mark.parametrize("char", ["x", "é", "日", "🙂", "\udce9"])  # 1, 2, 3, 4 bytes; a raw byte
def test_a_255_byte_name_gets_names_that_fit_and_stay_ours(char: str) -> None:
    name = char * (NAME_MAX // _size(char))
    made = temp_name(name, "0a1b2c")
    partial, journal = resume_name(name, "partial"), resume_name(name, "journal")
    for ours in (made, partial, journal):
        assert _size(ours) <= NAME_MAX, ours
        assert is_ours(ours) and is_temporary_name(ours)
        assert ours.startswith("." + char)  # its head kept: a listing still tells whose it is
    assert is_temp_name(made) and not is_temp_name(partial)
    # Fixed for --resume: the same name gets the same partial, another one another.
    assert resume_name(name, "partial") == partial
    assert resume_name(name[:-1] + "z", "partial") != partial


def test_two_long_names_sharing_their_head_get_two_temporary_names() -> None:
    head = "h" * 240
    first, second = (resume_name(f"{head}-{i:02}", "partial") for i in (1, 2))
    assert first != second and first[:200] == second[:200]


@given(st.text(min_size=1, max_size=300).filter(lambda n: "/" not in n and "\x00" not in n))
def test_every_name_gets_temporary_names_within_name_max(name: str) -> None:
    for ours in (temp_name(name, "abcdef"), resume_name(name, "partial")):
        assert _size(ours) <= NAME_MAX
        assert is_ours(ours)
        assert ("/" in ours) is False


def test_a_name_that_just_fits_is_not_hashed() -> None:
    suffix = len(".sshpipe-0a1b2c.partial")
    name = "n" * (NAME_MAX - 1 - suffix)
    assert temp_name(name, "0a1b2c") == f".{name}.sshpipe-0a1b2c.partial"
    assert "~" in temp_name(name + "n", "0a1b2c")


@pytest.mark.parametrize(
    "name",
    [
        "a.bin.sshpipe-0a1b2c.partial",  # no leading dot: not a name we make
        ".a.sshpipe-XYZ123.partial",
        ".a.sshpipe-0a1b2c.partialx",
        ".a.sshpipe.partial",  # a resume partial: kept on purpose, never swept
        ".a.sshpipe.journal",
        "passwd",
    ],
)
def test_only_our_copy_in_progress_shape_is_a_temp_name(name: str) -> None:
    assert not is_temp_name(name)


def test_beside_replaces_the_last_component_of_a_remote_path() -> None:
    assert beside("/d/e/f.bin", ".x") == "/d/e/.x"
    assert beside("f.bin", ".x") == ".x"
    assert beside("/f", ".x") == "/.x"
