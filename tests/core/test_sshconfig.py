"""ssh_config as OpenSSH reads it, for one host: tables of files in, first values out."""

from __future__ import annotations

import pytest

from sshpipe.core.errors import UsageError
from sshpipe.core.sshconfig import (
    MAX_INCLUDE_DEPTH,
    Query,
    jump_in_force,
    lookup,
    matches_patterns,
    parse_jump,
)


def _values(text: str, host: str = "web", user: str | None = None, **files: str) -> dict[str, str]:
    def include(pattern: str) -> list[tuple[str, str]]:
        return [(name, body) for name, body in sorted(files.items()) if _glob(pattern, name)]

    query = Query(host=host, user=user, local_user="me")
    return lookup([("config", text)], query, include=include)


def _glob(pattern: str, name: str) -> bool:
    return matches_patterns(pattern, name)


@pytest.mark.parametrize(
    ("patterns", "subject", "expected"),
    [
        ("web", "web", True),
        ("web", "web2", False),
        ("web*", "web2", True),
        ("w?b", "web", True),
        ("w?b", "wb", False),
        ("*.example.org", "a.example.org", True),
        ("*", "anything", True),
        ("*,!db", "db", False),
        ("!db,*", "db", False),
        ("*,!db", "web", True),
        ("!db", "web", False),  # only negations: nothing matches
        ("a.b", "axb", False),  # '.' is no wildcard
        ("[x]", "x", False),  # nor are brackets
    ],
)
def test_patterns(patterns: str, subject: str, expected: bool) -> None:
    assert matches_patterns(patterns, subject) is expected


@pytest.mark.parametrize(
    ("text", "host", "expected"),
    [
        # The first value wins, whatever block it came from.
        ("Host web\n Port 2222\nHost *\n Port 22\n", "web", {"port": "2222"}),
        ("Host *\n Port 22\nHost web\n Port 2222\n", "web", {"port": "22"}),
        ("Host web\n Port 2222\nHost *\n Port 22\n", "db", {"port": "22"}),
        # Lines before any Host apply to every host.
        ("Port 7\nHost web\n Port 8\n", "web", {"port": "7"}),
        # Several patterns, on the line or comma-separated; a negation vetoes.
        ("Host db web\n User a\n", "web", {"user": "a"}),
        ("Host db,web\n User a\n", "web", {"user": "a"}),
        ("Host * !web\n User a\n", "web", {}),
        # Keywords are case-insensitive; Key=Value and Key = Value are Key Value.
        ("HOST web\n pOrT=2222\n", "web", {"port": "2222"}),
        ("Host=web\n Port = 2222\n", "web", {"port": "2222"}),
        # Quotes hold spaces; several words are one value, joined by a space.
        ('Host web\n IdentityFile "/a b/key"\n', "web", {"identityfile": "/a b/key"}),
        ("Host web\n UserKnownHostsFile k1 k2\n", "web", {"userknownhostsfile": "k1 k2"}),
        # Comments and blank lines.
        ("# Port 1\n\n   \nHost web\n  # Port 2\n Port 3\n", "web", {"port": "3"}),
        # HostName's %h is the host as typed.
        ("Host web\n HostName %h.example.org\n", "web", {"hostname": "web.example.org"}),
        ("Host web\n HostName a%%b\n", "web", {"hostname": "a%b"}),
    ],
)
def test_host_blocks_and_first_value_wins(text: str, host: str, expected: dict[str, str]) -> None:
    assert _values(text, host) == expected


@pytest.mark.parametrize(
    ("text", "user", "expected"),
    [
        ("Match all\n Port 1\n", None, {"port": "1"}),
        ("Match !all\n Port 1\n", None, {}),
        # host: HostName as set so far, else the alias; originalhost: the alias.
        ("Host web\n HostName 10.0.0.5\nMatch host 10.0.0.*\n Port 2\n", None, "2"),
        ("Match host 10.0.0.*\n Port 2\nHost web\n HostName 10.0.0.5\n", None, None),
        ("Host web\n HostName 10.0.0.5\nMatch originalhost web\n Port 3\n", None, "3"),
        ("Host web\n HostName 10.0.0.5\nMatch originalhost 10.*\n Port 3\n", None, None),
        # user: the command line's first, then User so far, else the local user.
        ("Match user me\n Port 4\n", None, "4"),
        ("Match user me\n Port 4\n", "root", None),
        ("Match user root\n Port 4\n", "root", "4"),
        ("User root\nMatch user root\n Port 4\n", None, "4"),
        ("Match localuser me\n Port 5\n", "root", "5"),
        # Every criterion must hold; a negated one must not.
        ("Match host web user me\n Port 6\n", None, "6"),
        ("Match host web user other\n Port 6\n", None, None),
        ("Match host web !user other\n Port 6\n", None, "6"),
        # Never true here: canonical (no canonicalisation), exec (nothing is run).
        ("Match canonical\n Port 7\n", None, None),
        ("Match exec true\n Port 7\n", None, None),
        ("Match final\n Port 7\n", None, "7"),
    ],
)
def test_match(text: str, user: str | None, expected: object) -> None:
    values = _values(text, "web", user)
    if isinstance(expected, dict):
        assert values == expected
    else:
        assert values.get("port") == expected


def test_the_command_lines_user_comes_first() -> None:
    assert _values("User other\n", user="root")["user"] == "root"
    assert _values("User other\n")["user"] == "other"


def test_include_applies_where_it_stands() -> None:
    files = {"extra.conf": "Port 2222\nHost db\n User dbuser\n", "other.conf": "Port 1\n"}
    text = "Host web\n Include extra.conf\n User webuser\nHost db\n Include other.conf\n"
    # In web's block the included file applies (its own Host blocks as usual),
    # and the lines after the Include still belong to web's block.
    assert _values(text, "web", **files) == {"port": "2222", "user": "webuser"}
    # Only db's Include is read for db; extra.conf's Host db is never seen.
    assert _values(text, "db", **files) == {"port": "1"}


def test_include_patterns_read_every_match_in_order() -> None:
    files = {"b.conf": "Port 2\n", "a.conf": "Port 1\n User a\n", "c.txt": "User c\n"}
    assert _values("Include *.conf\n", **files) == {"port": "1", "user": "a"}


def test_an_include_loop_ends_in_one_error() -> None:
    with pytest.raises(UsageError, match=f"nested more than {MAX_INCLUDE_DEPTH}"):
        _values("Include self.conf\n", **{"self.conf": "Include self.conf\n"})


def test_the_o_options_come_first() -> None:
    query = Query(host="web", user=None, local_user="me")
    sources = [
        ("-o", "StrictHostKeyChecking accept-new\n"),
        ("file", "StrictHostKeyChecking yes\n"),
    ]
    assert lookup(sources, query)["stricthostkeychecking"] == "accept-new"


@pytest.mark.parametrize(
    ("text", "given", "expected"),
    [
        # The first of ProxyJump and ProxyCommand obtained wins (ssh_config(5)).
        ("Host web\n ProxyCommand nc %h %p\n ProxyJump hop\n", None, None),
        ("Host web\n ProxyJump hop\n ProxyCommand nc %h %p\n", None, "hop"),
        # First obtained, not first written in a block: a Host * before wins.
        ("Host *\n ProxyCommand nc %h %p\nHost web\n ProxyJump hop\n", None, None),
        ("Host db\n ProxyCommand nc %h %p\nHost web\n ProxyJump hop\n", None, "hop"),
        # "none" is a value obtained: it shuts the other out as well.
        ("Host web\n ProxyCommand none\n ProxyJump hop\n", None, None),
        ("Host web\n ProxyJump none\n ProxyCommand nc %h %p\n", None, "none"),
        # -J (the API's proxy_jump) comes before every line.
        ("Host web\n ProxyCommand nc %h %p\n", "hop2", "hop2"),
        ("Host web\n ProxyCommand nc %h %p\n", "none", "none"),
        ("Host web\n User me\n", None, "none"),
    ],
)
def test_proxy_jump_and_proxy_command_first_obtained_wins(
    text: str, given: str | None, expected: str | None
) -> None:
    assert jump_in_force(_values(text), given) == expected


def test_an_o_proxy_command_beats_the_files_proxy_jump() -> None:
    query = Query(host="web", user=None, local_user="me")
    sources = [("-o", "ProxyCommand nc %h %p\n"), ("file", "Host web\n ProxyJump hop\n")]
    assert jump_in_force(lookup(sources, query), None) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('Host web\n User "unclosed\n', "config line 2: No closing quotation"),
        ("Host web\n Port\n", "config line 2: missing port value"),
        ("Host\n", "config line 1: missing Host pattern"),
        ("Match\n", "config line 1: Match needs a condition"),
        ("Match host\n", "config line 1: missing Match host pattern"),
        ("Match color blue\n", "config line 1: unsupported Match condition 'color'"),
    ],
)
def test_bad_lines_name_the_file_and_line(text: str, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        _values(text)
    assert message in str(caught.value)


def test_lines_of_a_block_that_does_not_apply_are_not_checked() -> None:
    """As ssh: a bad value in another host's block is that host's problem."""
    assert _values("Host db\n Port\nHost *\n Port 1\n") == {"port": "1"}


@pytest.mark.parametrize(
    ("text", "hops"),
    [
        ("bastion", [(None, "bastion", None)]),
        ("me@bastion:2222", [("me", "bastion", 2222)]),
        ("a,me@b:22", [(None, "a", None), ("me", "b", 22)]),
        ("[::1]:2222", [(None, "::1", 2222)]),
        ("me@[::1]", [("me", "::1", None)]),
        ("::1", [(None, "::1", None)]),
        ("ssh://me@bastion:2222", [("me", "bastion", 2222)]),
        ("user@mail@bastion", [("user@mail", "bastion", None)]),
        ("none", []),
        ("NONE", []),
    ],
)
def test_jump_hosts(text: str, hops: list[tuple[str | None, str, int | None]]) -> None:
    assert parse_jump(text) == hops


@pytest.mark.parametrize("text", ["", "a,,b", "@host", "host:0", "host:99999", "host:x", "[::1]x"])
def test_bad_jump_hosts(text: str) -> None:
    with pytest.raises(UsageError, match="jump host"):
        parse_jump(text)
