"""The command line's words, parsed without a server: targets, option placement, typos.

The rules for a remote word are OpenSSH's (``misc.c``: ``colon``,
``parse_user_host_path``, ``parse_uri``, ``urldecode``; ``scp.c``:
``prepare_remote_path``); the rows below are the cases those functions decide.
"""

from __future__ import annotations

import platform

import asyncssh
import pytest

import sshpipe
from sshpipe.cli.args import DEMO_SIZE, parse_args
from sshpipe.cli.settings import ssh_kwargs
from sshpipe.cli.targets import RemoteSpec, parse_remote
from sshpipe.core.config import DEFAULT_WINDOW
from sshpipe.core.errors import UsageError


def _spec(user: str | None, host: str, path: str, port: int | None = None) -> RemoteSpec:
    return RemoteSpec(user=user, host=host, path=path, port=port)


# -- [user@]host:path, as scp reads it ---------------------------------------------

SCP_FORMS = [
    ("host:x", _spec(None, "host", "x")),
    ("user@host:dir/f.bin", _spec("user", "host", "dir/f.bin")),
    ("host:/abs/path", _spec(None, "host", "/abs/path")),
    ("a@b@host:x", _spec("a@b", "host", "x")),  # the last '@' ends the user
    ("host:", _spec(None, "host", ".")),  # the home directory
    ("host:a:b", _spec(None, "host", "a:b")),  # the first ':' ends the host
    ("host:~", _spec(None, "host", ".")),  # scp strips ~: SFTP servers do not expand it
    ("host:~/notes/a.txt", _spec(None, "host", "notes/a.txt")),
    ("host:~//x", _spec(None, "host", "x")),
    ("host:~bob/x", _spec(None, "host", "~bob/x")),  # left as written
    ("host:a%20b+c", _spec(None, "host", "a%20b+c")),  # no decoding outside a URL
    ("[::1]:path", _spec(None, "::1", "path")),
    ("user@[::1]:path", _spec("user", "::1", "path")),
    ("[2001:db8::7]:/srv/x", _spec(None, "2001:db8::7", "/srv/x")),
    ("[::1]:", _spec(None, "::1", ".")),
]


@pytest.mark.parametrize(("word", "expected"), SCP_FORMS)
def test_scp_form(word: str, expected: RemoteSpec) -> None:
    assert parse_remote(word) == expected


@pytest.mark.parametrize(
    "word",
    [
        "plain.txt",
        "/tmp/a:b",  # a '/' before the ':' : local, as scp decides
        "./a:b",
        "dir/a:b",
        "dir/x[1]:y",  # brackets after a '/' are a file name's
        ":x",  # a leading colon is part of a file name
        "[::1]",  # brackets, but no ':' after them
        "-",
    ],
)
def test_local_paths_stay_local(word: str) -> None:
    assert parse_remote(word) is None


def test_a_user_with_no_host_is_refused() -> None:
    with pytest.raises(UsageError, match="no host"):
        parse_remote("user@:x")


# -- sftp:// and scp:// URLs, as OpenSSH's parse_uri reads them ---------------------

URL_FORMS = [
    # The path follows the '/' after the host: relative to the home directory...
    ("sftp://host/x", _spec(None, "host", "x")),
    ("sftp://host/dir/f.bin", _spec(None, "host", "dir/f.bin")),
    # ...unless a second '/' makes it absolute.
    ("sftp://host//etc/passwd", _spec(None, "host", "/etc/passwd")),
    ("sftp://host", _spec(None, "host", ".")),
    ("sftp://host/", _spec(None, "host", ".")),
    ("sftp://host:", _spec(None, "host", ".")),
    ("sftp://host/~/x", _spec(None, "host", "x")),
    ("scp://host/x", _spec(None, "host", "x")),
    ("SFTP://host/x", _spec(None, "host", "x")),  # a scheme's case does not matter
    ("sftp://user@host:2222/x", _spec("user", "host", "x", 2222)),
    ("scp://user@host:2222//abs/x", _spec("user", "host", "/abs/x", 2222)),
    ("sftp://host:65535", _spec(None, "host", ".", 65535)),
    # The user and the path are percent-decoded, '+' being a space; the host is not.
    ("sftp://me%40corp@host/My%20File", _spec("me@corp", "host", "My File")),
    ("sftp://host/a+b%2Bc", _spec(None, "host", "a b+c")),
    ("sftp://host/caf%C3%A9", _spec(None, "host", "café")),
    ("sftp://host/%7e", _spec(None, "host", ".")),  # decoded first: "~", the home directory
    ("sftp://host/a%2Fb", _spec(None, "host", "a/b")),
    # The user is what precedes the first '@'; ';parameters' are ignored.
    ("sftp://user;fingerprint=SHA256-abc@host/x", _spec("user", "host", "x")),
    ("sftp://user@host/a@b", _spec("user", "host", "a@b")),
    # IPv6 in brackets, with or without a port.
    ("sftp://[::1]/x", _spec(None, "::1", "x")),
    ("sftp://[::1]:2222/path", _spec(None, "::1", "path", 2222)),
    ("sftp://u@[2001:db8::1]:22//srv", _spec("u", "2001:db8::1", "/srv", 22)),
    ("sftp://host./x", _spec(None, "host", "x")),  # a trailing dot is dropped
    ("sftp://my_host-1.example.org/x", _spec(None, "my_host-1.example.org", "x")),
]


@pytest.mark.parametrize(("word", "expected"), URL_FORMS)
def test_url_form(word: str, expected: RemoteSpec) -> None:
    assert parse_remote(word) == expected


@pytest.mark.parametrize(
    ("word", "why"),
    [
        ("sftp://host:/x", "empty port"),
        ("sftp://host:0/x", "bad port"),
        ("sftp://host:65536/x", "bad port"),
        ("sftp://host:22x/x", "bad port"),
        ("sftp://@host/x", "empty user"),
        ("sftp://;p=1@host/x", "empty user"),
        ("sftp://host/a%zz", "percent-escape"),
        ("sftp://host/a%2", "percent-escape"),
        ("sftp://host/%ff", "not UTF-8"),
        ("sftp://%68ost/x", "bad host"),  # a host is not decoded
        ("sftp://ho..st/x", "bad host"),
        ("sftp://-host/x", "bad host"),
        ("sftp:///x", "no host"),
        ("sftp://[nope]/x", "not an IPv6 address"),
        ("sftp://[::1/x", "no ']'"),
        ("sftp://[::1]x", "after ']'"),
        ("ssh://host/x", "unsupported URL scheme 'ssh'"),
        ("http://host/x", "unsupported URL scheme 'http'"),
    ],
)
def test_bad_urls_are_one_line_usage_errors(word: str, why: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_remote(word)
    assert why in str(caught.value)
    assert word in str(caught.value) and "\n" not in str(caught.value)


# -- which port and user win ------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "target", "port"),
    [
        ([], "sftp://host:2222/x", 2222),
        (["-P", "7"], "sftp://host:2222/x", 2222),  # the URL's, as sftp.c and scp.c do
        (["-P", "7"], "sftp://host/x", 7),
        (["-P", "7"], "host:x", 7),
        # ssh keeps the first value it reads, and sftp/scp give it -o options first.
        (["-P", "7", "-o", "Port=8"], "host:x", 8),
        (["-o", "Port=8"], "scp://host:2222/x", 8),
        (["-o", "Port=8", "-o", "Port=9"], "host:x", 8),
        ([], "host:x", None),  # ssh_config's, or 22
    ],
)
def test_which_port_wins(options: list[str], target: str, port: int | None) -> None:
    args = parse_args(["get", *options, target, "out"])
    spec = parse_remote(args.sources[0])
    assert spec is not None
    assert ssh_kwargs(args, spec).get("port") == port


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("BatchMode=yes", {"batch_mode": True}),
        ("batchmode no", {"batch_mode": False}),
        ("NumberOfPasswordPrompts=1", {"password_prompts": 1}),
        ("IdentityAgent=none", {"agent_path": "none"}),
        ("IdentityAgent=~/agent.sock", {"agent_path": "~/agent.sock"}),
    ],
)
def test_login_options(option: str, expected: dict[str, object]) -> None:
    args = parse_args(["get", "-o", option, "host:x", "out"])
    spec = parse_remote(args.sources[0])
    assert spec is not None
    kwargs = ssh_kwargs(args, spec)
    assert {key: kwargs[key] for key in expected} == expected


@pytest.mark.parametrize("option", ["BatchMode=maybe", "NumberOfPasswordPrompts=0"])
def test_bad_login_options_are_usage_errors(option: str) -> None:
    args = parse_args(["get", "-o", option, "host:x", "out"])
    spec = parse_remote(args.sources[0])
    assert spec is not None
    with pytest.raises(UsageError, match=option.split("=")[0]):
        ssh_kwargs(args, spec)


@pytest.mark.parametrize(
    ("options", "target", "user"),
    [
        ([], "sftp://me%40corp@host/x", "me@corp"),
        ([], "a@b@host:x", "a@b"),
        (["-o", "User=other"], "me@host:x", "other"),  # -o first, as ssh reads it
        (["-o", "User=other"], "host:x", "other"),
        ([], "host:x", None),
    ],
)
def test_which_user_wins(options: list[str], target: str, user: str | None) -> None:
    args = parse_args(["get", *options, target, "out"])
    spec = parse_remote(args.sources[0])
    assert spec is not None
    assert ssh_kwargs(args, spec).get("username") == user


# -- options before or after the verb -------------------------------------------------


@pytest.mark.parametrize(
    "words",
    [
        ["-P", "2222", "-i", "key", "get", "host:x", "y"],
        ["get", "-P", "2222", "-i", "key", "host:x", "y"],
        ["-P", "2222", "get", "-i", "key", "host:x", "y"],
        ["get", "host:x", "y", "-P", "2222", "-i", "key"],
        ["-P2222", "get", "host:x", "-ikey", "y"],  # values attached
        ["--verify", "get", "-P", "2222", "-i", "key", "host:x", "y"],
    ],
)
def test_options_before_after_or_mixed_mean_the_same(words: list[str]) -> None:
    args = parse_args(words)
    assert (args.command, args.port, args.identity) == ("get", 2222, ["key"])
    assert (args.sources, args.target) == (["host:x"], "y")


def test_options_before_the_verb_keep_their_order_and_defaults() -> None:
    both = parse_args(["-i", "a", "-R", "9", "put", "-i", "b", "f", "host:"])
    assert both.identity == ["a", "b"]  # a repeated option adds up across the verb
    assert both.requests == 9
    later = parse_args(["-R", "9", "put", "-R", "3", "f", "host:"])
    assert later.requests == 3  # the last one wins, as anywhere
    before, after = parse_args(["-q", "get", "h:x", "y"]), parse_args(["get", "h:x", "y", "-q"])
    assert vars(before) == vars(after)
    assert vars(parse_args(["get", "h:x", "y"])) == {**vars(after), "quiet": False}


@pytest.mark.parametrize(
    ("words", "attribute", "value"),
    [
        (["-rp", "get", "h:x", "y"], "preserve", True),  # bundled flags
        (["-rp", "get", "h:x", "y"], "recursive", True),
        (["--channels=3", "get", "h:x", "y"], "channels", 3),
        (["--conn", "2", "get", "h:x", "y"], "connections", 2),  # an unambiguous prefix
        (["--verify", "hash", "get", "h:x", "y"], "verify", "hash"),
        (["--verify", "get", "h:x", "y"], "verify", "best"),
        (["--no-fsync", "put", "f", "h:"], "fsync", False),
        (["-o", "Port=5", "get", "h:x", "y"], "options", ["Port=5"]),
        (["--size", "2M", "demo"], "size", 2 << 20),
        (["-i", "get", "get", "h:x", "y"], "identity", ["get"]),  # a value, not the verb
    ],
)
def test_the_words_before_the_verb(words: list[str], attribute: str, value: object) -> None:
    assert getattr(parse_args(words), attribute) == value


def test_an_option_another_verb_has_is_refused_by_this_one() -> None:
    with pytest.raises(UsageError, match=r"^unknown option -P \(see: .* demo --help\)$"):
        parse_args(["-P", "22", "demo"])


# -- typos: one line, the nearest real word --------------------------------------------


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["get", "--verfy", "h:x", "y"], "unknown option --verfy (did you mean --verify?)"),
        (["get", "--verfy=hash", "h:x"], "unknown option --verfy (did you mean --verify?)"),
        (["--verfy", "get", "h:x", "y"], "unknown option --verfy (did you mean --verify?)"),
        (
            ["put", "--chanels", "3", "f", "h:"],
            "unknown option --chanels (did you mean --channels?)",
        ),
        (["get", "--no-fsnc", "h:x", "y"], "unknown option --no-fsnc (did you mean --no-fsync?)"),
        (["demo", "--sise", "2M"], "unknown option --sise (did you mean --size?)"),
        (["gte", "h:x", "y"], "unknown command 'gte' (did you mean get?)"),
        (["pt", "f", "h:"], "unknown command 'pt' (did you mean put?)"),
        (["frobnicate"], "unknown command 'frobnicate' (commands: get, put, clean, demo or serve)"),
    ],
)
def test_a_typo_names_the_nearest_word(words: list[str], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_args(words)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "words",
    [
        ["get", "-x", "h:x", "y"],
        [],
        ["-P", "22"],
        ["get", "h:x"],
        ["get", "-R", "0", "h:x", "y"],
        ["get", "--verify=sha1", "h:x", "y"],
        ["--c", "2", "get", "h:x", "y"],  # ambiguous: --channels, --connections, ...
        ["demo", "extra"],
        ["get", "-P", "seven", "h:x", "y"],
    ],
)
def test_every_bad_word_is_one_line_usage_error(words: list[str]) -> None:
    with pytest.raises(UsageError) as caught:
        parse_args(words)
    assert str(caught.value) and "\n" not in str(caught.value)


# -- --version and --help --------------------------------------------------------------


@pytest.mark.parametrize("words", [["--version"], ["get", "--version"], ["--version", "get"]])
def test_version(words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse_args(words)
    assert caught.value.code == 0
    out = capsys.readouterr().out
    python, ssh = platform.python_version(), asyncssh.__version__
    assert out == f"sshpipe {sshpipe.__version__} (Python {python}, asyncssh {ssh})\n"


def _help(words: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as caught:
        parse_args(words)
    assert caught.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("verb", ["get", "put", "demo", "serve"])
def test_each_command_has_help_with_examples(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    text = _help([verb, "--help"], capsys)
    assert f"sshpipe {verb} " in text.partition("examples:")[2]
    assert _help(["--help"], capsys).count("examples:") == 1


def test_help_states_the_librarys_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert f"(default {DEFAULT_WINDOW >> 20}M)" in _help(["get", "--help"], capsys)
    assert f"(default {DEMO_SIZE >> 20}M)" in _help(["demo", "--help"], capsys)
