"""The command line's words: the parser, and the configs they make.

Every default a help text states is taken from the constant the library uses
(``_config``), so the two cannot drift apart. A bad word is a ``UsageError``
(exit 2) in one line, never argparse's own exit; an unknown option or verb names
the nearest real one. Options may come before the verb or after it (``words``);
what a remote word means is ``targets``' business.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Collection, Sequence

from ..core.argtypes import number_at_least, positive_int, size_at_least
from ..core.defaults import (
    DEFAULT_CHANNELS_PER_CONNECTION,
    DEFAULT_MAX_BYTES_IN_FLIGHT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_HOST,
    DEFAULT_MAX_DEPTH,
    DEFAULT_REQUESTS,
    DEFAULT_RETRIES,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_WINDOW,
    PROFILE_SETTINGS,
)
from ..core.errors import UsageError
from .version import version_line
from .words import TOP_LEVEL, arrange

# Not typing's: --help loads no typing for annotations alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

__all__ = ["VERIFY_LEVELS", "build_parser", "parse_args", "version_line"]

DESCRIPTION = """\
get / put with OpenSSH's spellings: scp's [user@]host:path, sftp:// and scp://
URLs, -P -i -F -o; plus clean, demo and serve. Options go before or after the command."""

# The demo's file when --size is not given: big enough to leave slow start behind.
DEMO_SIZE = 64 * 1024 * 1024
# The demo's WAN (cli/demo.py says why; kept here so --help loads no asyncssh).
DEMO_RTT_MS = 50.0
DEMO_RATE_MBIT = 1000.0

# --verify[=LEVEL]; a plain --verify is "best": the strongest check the server allows.
VERIFY_LEVELS = ("size", "best", "hash", "read-back")
# scp's and sftp's upper bound for -l (scp.c: strtonum(optarg, 1, 100 * 1024 * 1024)).
MAX_LIMIT_KBIT = 100 * 1024 * 1024


def _prog() -> str:
    """What the user typed: the ``sshpipe`` script, else ``python -m sshpipe``."""
    return "sshpipe" if os.path.basename(sys.argv[0]) == "sshpipe" else "python -m sshpipe"


_size = size_at_least(1)


def _columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else stdout's terminal's, else 80."""
    with contextlib.suppress(KeyError, ValueError):
        columns = int(os.environ["COLUMNS"])
        if columns > 0:
            return columns
    stdout = sys.__stdout__
    try:
        return (os.get_terminal_size(stdout.fileno()).columns or 80) if stdout else 80
    except (AttributeError, ValueError, OSError):
        return 80


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, the terminal's width found as shutil finds it without importing shutil.

    argparse imports shutil for it (and with it bz2, lzma and fnmatch): a
    fifth of what ``--help`` loaded beyond argparse.
    """

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = _columns() - 2 if width is None else width  # argparse's own margin
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but its errors are UsageErrors, and it lists its option strings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options: dict[str, argparse.Action] = {}  # before __init__ adds -h
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        self.options.update(dict.fromkeys(action.option_strings, action))
        return action

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see: {self.prog} --help)")


class _Version(argparse.Action):
    """``--version``: the line is made only when asked (asking the package metadata costs)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="print the versions of sshpipe, Python and asyncssh, and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(version_line())
        parser.exit()


def _add_ssh_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-P", dest="port", type=positive_int, help="port (as sftp/scp -P)")
    parser.add_argument(
        "-i",
        dest="identity",
        action="append",
        default=[],
        help="identity (private key) file; may be repeated",
    )
    parser.add_argument("-F", dest="ssh_config", help="ssh_config file (default ~/.ssh/config)")
    parser.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="Option=value",
        help="OpenSSH option, before ssh_config's: StrictHostKeyChecking, "
        "UserKnownHostsFile, Port, User, HostName, IdentityFile, IdentitiesOnly, "
        "IdentityAgent, ProxyJump, ConnectTimeout, Compression, Ciphers, BatchMode, "
        "NumberOfPasswordPrompts, ControlMaster, ControlPath, ControlPersist (connection "
        "reuse), and the others ssh_config takes (see the README)",
    )
    parser.add_argument(
        "-J",
        dest="jump",
        metavar="[user@]host[:port][,...]",
        help="connect through these jump hosts, as ssh -J (beats ProxyJump; none: directly)",
    )
    parser.add_argument(
        "-C",
        dest="compression",
        action="store_true",
        help="compress every connection (default: -o Compression=auto, chosen per file; "
        "-o Compression=no for none)",
    )
    parser.add_argument("-c", dest="cipher", help="cipher(s), comma separated")


def _add_tree_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-r", dest="recursive", action="store_true", help="copy directories recursively"
    )
    parser.add_argument(
        "-p",
        dest="preserve",
        action="store_true",
        help="preserve modes and access/modification times (as scp -p)",
    )
    parser.add_argument(
        "-L",
        "--follow-symlinks",
        dest="follow_symlinks",
        action="store_true",
        help="copy what symlinks point to (default: recreate the links)",
    )
    parser.add_argument(
        "--fail-fast",
        dest="fail_fast",
        action="store_true",
        help="stop at the first file that fails (default: copy the rest, then report)",
    )
    parser.add_argument(
        "--max-depth",
        dest="max_depth",
        type=positive_int,
        metavar="N",
        help=f"directories a tree may go down (default {DEFAULT_MAX_DEPTH}, as sftp; "
        "deeper stops it with exit 8)",
    )


def _kbits(text: str) -> int:
    """scp's -l: whole Kbit/s from 1 to 100 x 2^20 (scp.c's own bounds)."""
    value = positive_int(text)
    if value > MAX_LIMIT_KBIT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_LIMIT_KBIT}")
    return value


def _add_transfer_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-R",
        dest="requests",
        type=positive_int,
        default=DEFAULT_REQUESTS,
        help=f"requests in flight per channel (as sftp -R; default {DEFAULT_REQUESTS})",
    )
    parser.add_argument(
        "-B",
        dest="block_size",
        type=_size,
        help="bytes per request (as sftp -B; default: the server's limit)",
    )
    parser.add_argument(
        "-l",
        dest="limit",
        type=_kbits,
        metavar="KBIT",
        help="limit the bandwidth to KBIT Kbit/s, as scp/sftp -l (1 Kbit = 1024 bits: "
        "-l 8000 is 1,024,000 bytes/s), over the whole transfer, all its channels",
    )
    parser.add_argument(
        "--channels",
        type=positive_int,
        help="use exactly this many SFTP channels (default: the flow controller decides)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="share one file's get or put between N processes, each with its own "
        "connection and stripe of the file (default auto: 1 until measured to win; "
        "README, Worker processes)",
    )
    parser.add_argument(
        "--connections",
        type=positive_int,
        help=f"most SSH connections to open (default {DEFAULT_MAX_CONNECTIONS})",
    )
    parser.add_argument(
        "--channels-per-connection",
        dest="channels_per_connection",
        type=positive_int,
        help=f"most channels per connection (default {DEFAULT_CHANNELS_PER_CONNECTION}: "
        "sshd's MaxSessions less one, kept for a command)",
    )
    parser.add_argument(
        "--in-flight",
        dest="in_flight",
        type=_size,
        help="memory budget: payload bytes in flight at most "
        f"(default {DEFAULT_MAX_BYTES_IN_FLIGHT >> 20}M)",
    )
    parser.add_argument(
        "--window",
        type=_size,
        help=f"SSH receive window per channel (default {DEFAULT_WINDOW >> 20}M)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        metavar="N",
        help="reconnects in a row that move nothing before a copy gives up: downloads, "
        f"uploads from a file, and trees reconnect (default {DEFAULT_RETRIES})",
    )
    parser.add_argument(
        "--stall-timeout",
        dest="stall_timeout",
        type=number_at_least(0.001, "stall-timeout"),
        metavar="SECONDS",
        help="no reply for this long counts as a dropped connection "
        f"(default {DEFAULT_STALL_TIMEOUT:g})",
    )
    parser.add_argument(
        "--verify",
        nargs="?",
        const="best",
        choices=VERIFY_LEVELS,
        help="check the copy before it takes its name: its SHA-256 against sha256sum on "
        "the server, else against the server's check-file hash, else (best, the default) "
        "its size; hash: fail where the server cannot hash; read-back: else read it back "
        "over SFTP",
    )
    parser.add_argument(
        "--fsync",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="make each file durable (fsync, fsync@openssh.com) before it takes its name "
        "(the default); --no-fsync: only rename it into place",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep an interrupted copy's partial file and continue it next time, checking "
        "what it kept (as sftp reget/reput, rsync --partial); with -r, skip the files "
        "an earlier run finished",
    )
    parser.add_argument(
        "--inplace",
        action="store_true",
        help="write the destination itself, not a temporary name renamed over it "
        "(a failure then leaves a partial file)",
    )
    parser.add_argument(
        "--sequential-writes",
        action="store_true",
        help="upload in file order on one channel, for servers that refuse other writes "
        "(detected without it, at the cost of one attempt)",
    )
    parser.add_argument(
        "--max-connections-per-host",
        type=positive_int,
        metavar="N",
        help="most connections all of this process's clients hold to one server before "
        f"they stop growing (default {DEFAULT_MAX_CONNECTIONS_PER_HOST}, or --connections if more)",
    )
    parser.add_argument(
        "--server-profile",
        choices=PROFILE_SETTINGS,
        help="a cloud SFTP server's quirks to expect: aws-transfer, azure-blob, mailbox "
        "(read-once files), standard (none); auto, the default, reads the banner",
    )
    parser.add_argument(
        "-q", dest="quiet", action="store_true", help="print nothing but errors (no progress)"
    )
    parser.add_argument(
        "-v",
        dest="verbose",
        action="count",
        default=0,
        help="say what was negotiated and how long set-up took, on stderr; -vv adds "
        "sshpipe's debug log (the flow controller's decisions), -vvv asyncssh's",
    )
    parser.add_argument("--json", action="store_true", help="print the transfer stats as JSON")


def _examples(prog: str, *lines: str) -> str:
    return "examples:\n" + "\n".join(f"  {prog} {line}" for line in lines)


def _get_words(parser: _Parser) -> None:
    parser.add_argument(
        "sources",
        nargs="+",
        metavar="[user@]host:REMOTE",
        help="remote files or (with -r) directories, as scp writes them or as "
        "sftp://[user@]host[:port]/path URLs; wildcards are expanded on the server "
        "(quote them: host:'logs/*.gz')",
    )
    parser.add_argument("target", metavar="LOCAL")
    _add_tree_options(parser)
    _add_ssh_options(parser)
    _add_transfer_options(parser)


def _put_words(parser: _Parser) -> None:
    parser.add_argument("sources", nargs="+", metavar="LOCAL")
    parser.add_argument(
        "target",
        metavar="[user@]host:REMOTE",
        help="a remote path as scp writes it, or an sftp://[user@]host[:port]/path URL",
    )
    _add_tree_options(parser)
    _add_ssh_options(parser)
    _add_transfer_options(parser)


def _demo_words(parser: _Parser) -> None:
    parser.add_argument(
        "--size",
        type=_size,
        default=DEMO_SIZE,
        help=f"test file size (default {DEMO_SIZE >> 20}M)",
    )
    parser.add_argument(
        "--rtt",
        type=number_at_least(0, "rtt"),
        default=DEMO_RTT_MS,
        metavar="MS",
        help="emulate this round-trip time between client and server (link emulator; "
        f"default {DEMO_RTT_MS:g}; 0: loopback's own, sshpipe's settings compared in-process)",
    )
    parser.add_argument(
        "--rate",
        type=number_at_least(0, "rate"),
        default=None,
        metavar="MBIT",
        help="emulate a link of this many Mbit/s per direction "
        f"(default {DEMO_RATE_MBIT:g} with an RTT, else no limit)",
    )


def _serve_words(parser: _Parser) -> None:
    parser.add_argument("--root", help="directory to serve (default: a new temp dir)")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free one)")


def _clean_words(parser: _Parser) -> None:
    parser.add_argument("hosts", nargs="*", metavar="[user@]host")
    parser.add_argument(
        "--dry-run", action="store_true", help="list what would be removed, remove nothing"
    )
    parser.add_argument("-q", dest="quiet", action="store_true", help="print nothing but errors")
    parser.add_argument(
        "-v", dest="verbose", action="count", default=0, help="say more on stderr (-vv, -vvv)"
    )
    _add_ssh_options(parser)


# Each verb's own words, added to its parser only when the command may use them.
_WORDS: dict[str, Callable[[_Parser], None]] = {
    "get": _get_words,
    "put": _put_words,
    "clean": _clean_words,
    "demo": _demo_words,
    "serve": _serve_words,
}


def _verbs(prog: str, filled: Collection[str] | None = None) -> tuple[_Parser, dict[str, _Parser]]:
    """The command line's parser and each verb's, the words of those in ``filled`` (None: all).

    With verbs to fill, only theirs are made. With none (the top-level
    ``--help``) each verb has its name, help and examples, and no options:
    adding every verb's options cost more than the rest of ``sshpipe get
    --help`` together, and each parser made asks gettext for its headings.
    """
    parser = _Parser(
        prog=prog,
        description=DESCRIPTION,
        epilog=_examples(
            prog,
            "get user@host:logs/app.log .",
            "put -r site/ host:/srv/www/",
            "get sftp://user@host:2222/data.bin .    # ~/data.bin, port 2222",
            "get sftp://host//var/log/syslog .       # // : an absolute path",
            "get 'user@[::1]:notes.txt' .            # IPv6 in brackets",
            "-P 2222 -i ~/.ssh/id_ed25519 get host:f .",
            "demo --size 256M --rtt 40",
            "get -o ControlMaster=auto -o ControlPersist=10m host:f .  # later: no log-in",
            "-O check host                           # that master running? (-O exit ends it)",
        )
        + "\n\nEach command's options: "
        + f"{prog} get --help (put, clean, demo, serve likewise).",
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    made: dict[str, _Parser] = {}

    def shell(name: str, *, help: str, description: str, epilog: str) -> None:
        if not filled or name in filled:
            made[name] = commands.add_parser(
                name, help=help, description=description, epilog=epilog
            )

    shell(
        "get",
        help="download: [user@]host:REMOTE... LOCAL",
        description="Download remote files (or, with -r, directories) to LOCAL.",
        epilog=_examples(
            prog,
            "get host:file.bin .                     # into the current directory",
            "get -r user@host:photos ~/backup/       # a directory",
            "get host:'logs/*.gz' logs/              # a wildcard, expanded on the server",
            "get --verify --resume sftp://host:2222/big.iso .",
            "get 'sftp://me@[::1]//srv/My%20File' .  # percent-escapes in a URL",
        ),
    )
    shell(
        "put",
        help="upload: LOCAL... [user@]host:REMOTE",
        description="Upload local files (or, with -r, directories) to REMOTE.",
        epilog=_examples(
            prog,
            "put report.pdf host:                    # into the home directory",
            "put -r -p site/ user@host:/srv/www/     # a directory, modes and times kept",
            "put -P 2222 big.iso 'user@[2001:db8::1]:isos/'",
            "put --verify=hash *.tar scp://host:2222/backups/",
        ),
    )
    shell(
        "demo",
        help="run get/put against an embedded server and compare",
        description="Get and put one test file through an embedded SFTP server behind an\n"
        f"emulated WAN ({DEMO_RTT_MS:g} ms, {DEMO_RATE_MBIT:g} Mbit/s): sshpipe's command "
        "against OpenSSH's\nsftp (where installed), each a fresh process, timed whole and "
        "net of set-up;\nevery byte checked. --rtt 0: loopback, sshpipe's settings "
        "compared in-process.",
        epilog=_examples(
            prog, "demo", "demo --size 256M", "demo --rtt 100 --rate 400", "demo --rtt 0"
        ),
    )
    shell(
        "serve",
        help="run the embedded SFTP server until Ctrl-C",
        description="Serve a directory over SFTP with the embedded server, and print\n"
        "get/put commands that reach it.",
        epilog=_examples(prog, "serve", "serve --root ~/shared --port 2222"),
    )
    shell(
        "clean",
        help="remove the temporary files killed or failed runs left",
        description="Remove the temporary files (.NAME.sshpipe-XXXXXX.partial) that runs which\n"
        "are gone (killed, crashed, their server unreachable) left behind, as recorded\n"
        "in $XDG_STATE_HOME/sshpipe/ledger/. With hosts: connect to each and remove\n"
        "those on it. Without: remove those on this machine, and list the servers\n"
        "that still have some. The next get (here) or put (there) does it too.",
        epilog=_examples(
            prog,
            "clean                                   # this machine; servers listed",
            "clean user@host                         # what runs left on host",
            "clean --dry-run -P 2222 host            # list them, remove nothing",
        ),
    )
    verbs = {name: made[name] for name in _WORDS if name in made}
    for name, sub in verbs.items():
        if filled is None or name in filled:
            _WORDS[name](sub)
            sub.add_argument("--version", action=_Version)
    return parser, verbs


def build_parser() -> argparse.ArgumentParser:
    """The whole command line's parser (its help is the top-level ``--help``)."""
    return _verbs(_prog())[0]


def _verify_level_attached(argv: Sequence[str] | None) -> list[str]:
    """``--verify`` followed by a path means ``--verify=best``, not a level named like a path.

    argparse gives an optional value the next word whatever it is, so
    ``get --verify host:f local`` would be refused as "invalid choice".
    """
    words = list(sys.argv[1:] if argv is None else argv)
    for index, word in enumerate(words):
        if word == "--":
            break
        following = words[index + 1] if index + 1 < len(words) else None
        if word == "--verify" and following not in VERIFY_LEVELS:
            words[index] = "--verify=best"
    return words


def _verbs_used(words: Sequence[str]) -> Collection[str] | None:
    """The verbs whose words ``words`` may use (None: all of them).

    A verb first: its own. Nothing, a word that is no verb (a typo) or a
    top-level ``--help``/``--version`` first: none. An option first: all, for
    ``words.arrange`` reads the options before the verb with every verb's table.
    """
    first = words[0] if words else ""
    if first in _WORDS:
        return (first,)
    if first.startswith("-") and first not in TOP_LEVEL:
        return None
    return ()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` by default), parsed.

    Raises:
        UsageError: a word that is wrong, in one line (an unknown option or verb
            with the nearest real one).
        SystemExit: 0, after ``--help`` or ``--version`` printed their answer.
    """
    words = _verify_level_attached(argv)
    prog = _prog()
    parser, verbs = _verbs(prog, _verbs_used(words))
    tables = {name: verbs[name].options if name in verbs else {} for name in _WORDS}
    words = arrange(words, tables, prog=prog)
    return parser.parse_args(words)
