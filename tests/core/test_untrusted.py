"""What a server says, as tables: the name gate, link text, modes, escaping, bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import sshpipe
from sshpipe.core import treeplan, untrusted
from sshpipe.core.codec import Attrs
from sshpipe.core.errors import UnsafePath, UsageError
from sshpipe.core.text import MESSAGE_SHOWN, SHOWN, clip, printable
from sshpipe.core.treeplan import Landings, TreeAccount, elided, glob_result_matches, landings
from sshpipe.core.untrusted import (
    ListingCheck,
    NameBudget,
    NameSet,
    check_link_target,
    check_name,
    command_output_cap,
    command_timeout,
    is_temporary_name,
    others_may_write,
    safe_mode,
)

LATIN1 = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # a name that is not UTF-8


@pytest.mark.parametrize(
    "name", ["a", "résumé.txt", "with space", ".hidden", "...", "a\\b", "-x", LATIN1, "x" * 4096]
)
def test_plain_names_pass(name: str) -> None:
    assert check_name(name, "/dir") == name


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a/b", "../escape", "/tmp/x", "bad\x00name", "x/", "z/../../e", "x" * 4097],
)
def test_unsafe_names_are_refused_naming_the_directory(name: str) -> None:
    with pytest.raises(UnsafePath) as caught:
        check_name(name, "/srv/dir")
    assert caught.value.path == "/srv/dir"
    assert "unsafe name" in str(caught.value) and caught.value.exit_code == 8


def test_a_name_of_4096_bytes_is_the_longest_counted_in_bytes_not_characters() -> None:
    check_name("é" * 2048, "/d")  # 4,096 bytes
    with pytest.raises(UnsafePath):
        check_name("é" * 2049, "/d")


def test_a_listing_skips_dot_entries_once_and_refuses_them_as_files_or_twice() -> None:
    check = ListingCheck("/d")
    assert (check.accept("."), check.accept(".."), check.accept("a")) == (False, False, True)
    for again in (".", "..", "a"):  # a second "." or a repeated name: which entry to trust?
        with pytest.raises(UnsafePath):
            check.accept(again)
    with pytest.raises(UnsafePath):
        check.accept("a/b")


def test_a_listing_started_again_skips_what_it_gave_before_and_still_refuses_repeats() -> None:
    check = ListingCheck("/d")
    assert [check.accept(n) for n in (".", "..", "a", "b")] == [False, False, True, True]
    check.again()  # the connection dropped: the listing is read from the start
    assert [check.accept(n) for n in (".", "..", "a", "b", "c")] == [
        False,
        False,
        False,  # given before: not queued twice
        False,
        True,
    ]
    with pytest.raises(UnsafePath):
        check.accept("c")  # twice in this attempt


def test_an_endless_listing_is_refused_past_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(untrusted, "MAX_LISTING_ENTRIES", 5)
    check = ListingCheck("/d")
    assert [check.accept(f"f{i}") for i in range(5)] == [True] * 5
    with pytest.raises(UnsafePath) as caught:
        check.accept("f5")
    assert caught.value.listing_refused == "more than 5 entries"
    assert str(caught.value) == "remote: /d: listing refused: more than 5 entries"


def test_a_listing_of_long_names_is_refused_past_its_characters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counted in characters, not entries: 1.9 KB names reach it long before a million."""
    monkeypatch.setattr(untrusted, "MAX_LISTING_NAME_CHARS", 3 << 20)
    check = ListingCheck("/d")
    name = "x" * 1900
    accepted = 0
    with pytest.raises(UnsafePath) as caught:
        while True:
            check.accept(f"{accepted:08d}{name}")
            accepted += 1
    assert accepted == (3 << 20) // 1908
    assert caught.value.listing_refused == "more than 3 MiB of names"


def test_the_listings_open_at_once_share_one_budget_of_names() -> None:
    """Charged by the bytes their tables take: 512 for the first 32 names, 1,024 to 64."""
    budget = NameBudget(2048)
    first, second = ListingCheck("/a", budget), ListingCheck("/b", budget)
    assert budget.held == 1024
    assert all(first.accept(f"f{i}") for i in range(33))  # grew: 1,024 bytes
    assert all(second.accept(f"f{i}") for i in range(33))  # another directory's names
    assert budget.held == 2048
    assert all(first.accept(f"g{i}") for i in range(31))  # 64 names: still 1,024
    with pytest.raises(UnsafePath) as caught:
        first.accept("g31")  # the 65th would take 2,048
    assert caught.value.listing_refused == "the listings open at once hold 0 MiB of names"
    second.close()  # its listing ended: its names no longer count
    assert budget.held == 1024
    third = ListingCheck("/c", budget)
    assert all(third.accept(f"h{i}") for i in range(64))
    first.close()
    third.close()
    assert budget.held == 0


def test_a_listing_read_again_after_a_reconnect_is_charged_for_both_tables() -> None:
    budget = NameBudget(4096)
    check = ListingCheck("/d", budget)
    assert [check.accept(n) for n in ("a", "b", "c")] == [True] * 3
    check.again()  # what the first attempt gave is kept apart: a table of its own
    assert budget.held == 1024
    assert [check.accept(n) for n in ("a", "b", "c", "d")] == [False, False, False, True]
    check.close()
    assert budget.held == 0


@given(st.lists(st.text(max_size=20), max_size=300))
def test_a_name_set_remembers_as_a_set_does(names: list[str]) -> None:
    remembered = NameSet()
    seen: set[str] = set()
    for name in names:
        assert remembered.add(name) is (name not in seen)
        seen.add(name)
        assert name in remembered
    assert len(remembered) == len(seen)


def test_a_name_set_costs_the_same_few_bytes_a_name_whatever_its_length() -> None:
    short, long = NameSet(), NameSet()
    for index in range(100_000):
        short.add(str(index))
        long.add(f"{index}" + "x" * 2000)
    assert short.nbytes() == long.nbytes() <= 24 * 100_000


def test_where_the_hash_is_narrow_two_of_them_stand_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(untrusted, "_NARROW_HASH", True)
    remembered = NameSet()
    assert [remembered.add(n) for n in ("a", "b", "a", LATIN1, LATIN1)] == [
        True,
        True,
        False,
        True,
        False,
    ]


def test_a_listing_of_only_unsafe_names_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(untrusted, "MAX_REFUSED_PER_LISTING", 3)
    check = ListingCheck("/d")
    for index in range(3):
        with pytest.raises(UnsafePath) as caught:
            check.accept(f"x/{index}")
        assert caught.value.listing_refused is None  # refused alone: the listing goes on
    with pytest.raises(UnsafePath) as caught:
        check.accept("x/3")
    assert caught.value.listing_refused == "more than 3 unsafe names"


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        (".big.sshpipe.partial", True),
        (".big.sshpipe.journal", True),
        (".big.sshpipe-0a1b2c.partial", True),
        (".a b.c.sshpipe.partial", True),
        ("big.sshpipe.partial", False),  # not hidden: a user's file
        (".big.sshpipe-0a1b2.partial", False),
        (".big.sshpipe.partial.old", False),
        (".sshpipe.partial", False),
        ("big", False),
    ],
)
def test_sshpipe_temporary_names(name: str, ours: bool) -> None:
    assert is_temporary_name(name) is ours


@pytest.mark.parametrize("target", ["../x", "/etc/passwd", "a b", "x" * 4096, LATIN1])
def test_link_text_is_copied_as_it_is(target: str) -> None:
    assert check_link_target(target, "/d/l") == target


@pytest.mark.parametrize("target", ["", "a\x00b", "x" * 4097])
def test_link_text_no_symlink_can_hold_is_refused(target: str) -> None:
    with pytest.raises(UnsafePath) as caught:
        check_link_target(target, "/d/l")
    assert "unsafe link target" in str(caught.value)


@pytest.mark.parametrize(
    ("mode", "directory", "expected"),
    [
        (0o7777, False, 0o777),  # no setuid, setgid or sticky on a file
        (0o4755, False, 0o755),
        (0o2755, False, 0o755),
        (0o7777, True, 0o1777),  # a directory keeps its sticky bit (/tmp)
        (0o1777, True, 0o1777),
        (0o2775, True, 0o775),
        (0o100644, False, 0o644),  # type bits go too
        (0o040755, True, 0o755),
    ],
)
def test_safe_mode_drops_setuid_and_setgid(mode: int, directory: bool, expected: int) -> None:
    assert safe_mode(mode, directory=directory) == expected


@pytest.mark.parametrize(
    ("mode", "directory", "expected"),
    [
        (0o777, False, 0o775),
        (0o666, False, 0o664),
        (0o1777, True, 0o1775),  # sticky kept: it only ever protects
        (0o7777, True, 0o1775),
        (0o775, True, 0o775),  # the group's write is the user's own group's
        (0o644, False, 0o644),
    ],
)
def test_a_servers_write_bit_for_others_is_dropped_unless_kept(
    mode: int, directory: bool, expected: int
) -> None:
    assert safe_mode(mode, directory=directory, others_write=False) == expected


@pytest.mark.parametrize(
    ("umask", "kept"), [(0o022, False), (0o002, False), (0o077, False), (0o020, True), (0, True)]
)
def test_the_write_bit_for_others_is_kept_where_the_umask_keeps_it(umask: int, kept: bool) -> None:
    assert others_may_write(umask) is kept


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain.txt", "plain.txt"),
        ("résumé 日本", "résumé 日本"),
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # OSC: the window title
        ("\x1b[2J", "\\x1b[2J"),
        ("a\x9b31mb", "a\\x9b31mb"),  # C1 CSI: one character, no ESC
        ("line\r\nnext", "line\\x0d\\x0anext"),
        ("tab\there", "tab\\x09here"),
        ("del\x7f", "del\\x7f"),
        ("nul\x00", "nul\\x00"),
        ("bidi\u202egnp.exe", "bidi\\u202egnp.exe"),
        ("sep\u2028x", "sep\\u2028x"),
        (LATIN1, "caf\\xe9.txt"),  # the byte that was not UTF-8
        ("back\\slash", "back\\slash"),
    ],
)
def test_printable_escapes_what_would_drive_a_terminal(text: str, shown: str) -> None:
    assert printable(text) == shown


@given(st.text())
def test_printable_output_is_printable_and_escaping_twice_changes_nothing(text: str) -> None:
    once = printable(text)
    assert once.isprintable()
    assert printable(once) == once


def test_every_error_message_is_escaped_but_keeps_what_the_server_said() -> None:
    error = sshpipe.RemoteError("/d/\x1b[31mred", "no\r\nway")
    assert str(error) == "remote: /d/\\x1b[31mred: no\\x0d\\x0away"
    assert error.path == "/d/\x1b[31mred" and error.reason == "no\r\nway"
    assert "\x1b" not in str(UnsafePath("/d", "\x1b[2J"))


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("short", "short"),
        ("x" * SHOWN, "x" * SHOWN),  # at the bound: whole
        ("x" * SHOWN + "yz", "x" * SHOWN + "... (2 bytes more)"),
        ("x" * SHOWN + "é日", "x" * SHOWN + "... (5 bytes more)"),  # UTF-8 bytes, as sent
        ("x" * SHOWN + LATIN1, "x" * SHOWN + "... (8 bytes more)"),  # the byte not UTF-8: one
        ("x" * SHOWN + "\ud800", "x" * SHOWN + "... (3 bytes more)"),  # a lone surrogate
    ],
)
def test_clip_shows_the_start_of_a_text_and_counts_the_rest(text: str, shown: str) -> None:
    assert clip(text) == shown


def test_a_servers_long_text_is_shown_bounded_in_any_error() -> None:
    """A 1 MiB STATUS message: its first SHOWN characters, escaped, and a count of the rest."""
    reason = "denied \x1b[2J\r\n" * (1 << 16)
    error = sshpipe.RemoteError("/d/f", reason)
    shown = str(error)
    assert shown.startswith("remote: /d/f: denied \\x1b[2J\\x0d\\x0adenied")
    assert shown.endswith(f"... ({len(reason) - SHOWN} bytes more)")
    assert len(shown) < 4 * SHOWN + 100 and shown.isprintable()
    assert error.reason == reason  # the attribute keeps what the server said
    name = UnsafePath("/d", "n" * 100_000)
    assert len(str(name)) < SHOWN + 100
    # Text nobody clipped (an asyncssh message quoting the server) is bounded too.
    whole = str(sshpipe.ConnectError("x" * 300_000))
    assert len(whole) == MESSAGE_SHOWN + len("... (291808 bytes more)")


def test_command_bounds() -> None:
    assert command_timeout(60.0) == 60.0
    assert command_timeout(60.0, 10_000_000_000) == 60.0 + 1000.0  # 10 GB at 10 MB/s
    assert command_output_cap(0, 0) == untrusted.COMMAND_OUTPUT_SLACK
    # sha256sum of 256 files: a hash, two spaces and a name each, names escaped or not.
    names = [f"/srv/dir/file-{i}.bin" for i in range(256)]
    honest = sum(64 + 2 + 2 * len(n) + 1 for n in names)
    assert command_output_cap(256, sum(len(n) for n in names)) >= honest


# -- the tree's own rules on what a server names -----------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("logs/*.gz", "logs/a.gz", True),
        ("logs/*.gz", "logs/x/a.gz", False),  # '*' never spans a '/'
        ("logs/*.gz", "logs/../a.gz", False),
        ("logs/*.gz", "other/a.gz", False),
        ("logs/*.gz", "logs/.hidden.gz", False),
        ("glob/*", "glob/x/.bashrc", False),
        ("glob/*", "glob/z/../../escape.txt", False),
        ("*.txt", "a.txt", True),
        ("*.txt", "./a.txt", False),
        ("/srv/*/x", "/srv/a/x", True),
        ("/srv/*/x", "/srv/a/b/x", False),
        ("/*", "/etc", True),
        ("plain/path", "plain/path", True),
        ("plain/path", "plain/other", False),
    ],
)
def test_glob_results_are_matched_again_against_the_users_pattern(
    pattern: str, path: str, matches: bool
) -> None:
    assert glob_result_matches(pattern, path) is matches


def test_two_sources_never_land_in_one_place() -> None:
    assert landings(["a/x", "b/y"], "out", dest_is_dir=True) == [
        ("a/x", "out/x"),
        ("b/y", "out/y"),
    ]
    with pytest.raises(UsageError) as caught:
        landings(["a/x", "b/x"], "out", dest_is_dir=True)
    assert str(caught.value) == "a/x and b/x would both be copied to out/x"


def test_sources_that_come_one_by_one_never_land_in_one_place() -> None:
    """A glob's matches, as its listings give them: remembered as a listing's names."""
    placed = Landings("out", dest_is_dir=True)
    assert placed.place("a/x") == "out/x"
    assert placed.place("b/y") == "out/y"
    assert placed.place("a/x") is None  # named twice (two patterns): copied once
    with pytest.raises(UsageError) as caught:
        placed.place("c/x")
    assert str(caught.value) == "c/x would be copied to out/x, where another source goes"
    assert Landings("out", dest_is_dir=False).place("a/x") == "out"


def test_a_glob_matching_without_end_is_refused_past_a_listings_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(treeplan, "MAX_LISTING_ENTRIES", 3)
    placed = Landings("out", dest_is_dir=True)
    for index in range(3):
        placed.place(f"d/{index}", pattern="d/*")
    with pytest.raises(UnsafePath) as caught:
        placed.place("d/3", pattern="d/*")
    assert str(caught.value) == "remote: d/*: listing refused: more than 3 matches"
    monkeypatch.setattr(treeplan, "MAX_LISTING_NAME_CHARS", 2 << 20)
    placed = Landings("out", dest_is_dir=True)
    placed.place("x" * (1 << 20))
    placed.place("y" * (1 << 20))
    with pytest.raises(UnsafePath, match="more than 2 MiB of names matched"):
        placed.place("z")


@pytest.mark.parametrize(
    ("path", "top", "shown"),
    [
        ("/a/b/c", "/a", "/a/b/c"),
        ("/a/b/c/d/e", "/a", "/a/b/c/d/e"),
        ("/deep/" + "d/" * 62 + "d", "/deep", "/deep/d/.../d/d"),
        ("/srv/x/deep/" + "d/" * 62 + "d", "/srv/x/deep/", "/srv/x/deep/d/.../d/d"),
        ("rel/a/b/c/d/e/f", "rel", "rel/a/.../e/f"),
        ("/a/b/c/d/e/f", "", "/a/.../e/f"),
        ("/a/b/c/d/e/f", "/elsewhere", "/a/.../e/f"),
    ],
)
def test_a_deep_path_is_shown_cut_short_below_its_source(path: str, top: str, shown: str) -> None:
    assert elided(path, top) == shown


def test_a_tree_lists_its_first_failures_and_counts_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sshpipe.core.treeplan as treeplan

    monkeypatch.setattr(treeplan, "MAX_LISTED_FAILURES", 3)
    account = TreeAccount(started=0.0)
    for index in range(5):
        account.failed(f"/d/{index}", UnsafePath("/d", f"x/{index}"))
        account.skipped(f"/d/fifo{index}")
    stats = account.stats(1.0)
    assert [failure.path for failure in stats.failures] == ["/d/0", "/d/1", "/d/2"]
    assert stats.failures_unlisted == 2
    assert stats.skipped == 5 and len(stats.skipped_paths) == 3
    # Five refused names are five entries, none of them a file, directory or link.
    assert stats.entries == 5
    assert str(sshpipe.IncompleteTransfer(stats)).startswith("5 of 5 entries failed")
    account.found_file(10)
    account.failed("/d/f", UnsafePath("/d", "f"), is_file=True)  # a file: counted once
    account.directories += 1
    account.failed("/d/sub", UnsafePath("/d", "sub"), counted=True)  # made, then not listed
    assert account.stats(2.0).entries == 7


@pytest.mark.parametrize(
    ("existing", "mode", "kept"),
    [
        (None, 0o644, None),  # nothing there: the new file takes the source's mode
        (Attrs(permissions=0o100600), 0o644, 0o600),  # a secret stays a secret
        (Attrs(permissions=0o100644), 0o644, None),  # the same: no FSETSTAT needed
        (Attrs(permissions=0o104755), 0o644, 0o755),  # setuid dropped, as a write drops it
        (Attrs(permissions=0o040700), 0o644, None),  # a directory is not replaced
        (Attrs(permissions=0o120777), 0o644, None),  # nor is a symlink's own mode kept
        (Attrs(size=10), 0o644, None),  # no permissions sent: nothing known to keep
    ],
)
def test_a_replaced_file_keeps_its_permissions(
    existing: Attrs | None, mode: int, kept: int | None
) -> None:
    assert untrusted.kept_mode(existing, mode) == kept
