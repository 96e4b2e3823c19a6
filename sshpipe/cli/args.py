"""The command line's words: the parser, and the configs they make.

Every default a help text states is taken from the constant the library uses
(``_config``), so the two cannot drift apart. A bad word is a ``UsageError``
(exit 2) in one line, never argparse's own exit; an unknown option or verb names
the nearest real one. Options may come before the verb or after it (``words``);
what a remote word means is ``targets``' business.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .. import __version__
from ..core.argtypes import number_at_least, positive_int, size_at_least
from ..core.config import (
    DEFAULT_CHANNELS_PER_CONNECTION,
    DEFAULT_MAX_BYTES_IN_FLIGHT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_HOST,
    DEFAULT_MAX_DEPTH,
    DEFAULT_REQUESTS,
    DEFAULT_RETRIES,
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_WINDOW,
)
from ..core.errors import UsageError
from ..core.quirks import PROFILE_SETTINGS
from .words import arrange

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


def version_line() -> str:
    """``sshpipe 0.1.0 (Python 3.11.9, asyncssh 2.24.1)``: what a bug report needs first."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        asyncssh = version("asyncssh")
    except PackageNotFoundError:  # run from a source tree beside an unpackaged asyncssh
        asyncssh = "unknown"
    python = ".".join(str(part) for part in sys.version_info[:3])
    return f"sshpipe {__version__} (Python {python}, asyncssh {asyncssh})"


def _prog() -> str:
    """What the user typed: the ``sshpipe`` script, else ``python -m sshpipe``."""
    return "sshpipe" if os.path.basename(sys.argv[0]) == "sshpipe" else "python -m sshpipe"


_size = size_at_least(1)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but its errors are UsageErrors, and it lists its option strings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.options: dict[str, argparse.Action] = {}  # before __init__ adds -h
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
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


def _verbs(prog: str) -> tuple[_Parser, dict[str, _Parser]]:
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
    get = commands.add_parser(
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
    get.add_argument(
        "sources",
        nargs="+",
        metavar="[user@]host:REMOTE",
        help="remote files or (with -r) directories, as scp writes them or as "
        "sftp://[user@]host[:port]/path URLs; wildcards are expanded on the server "
        "(quote them: host:'logs/*.gz')",
    )
    get.add_argument("target", metavar="LOCAL")
    put = commands.add_parser(
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
    put.add_argument("sources", nargs="+", metavar="LOCAL")
    put.add_argument(
        "target",
        metavar="[user@]host:REMOTE",
        help="a remote path as scp writes it, or an sftp://[user@]host[:port]/path URL",
    )
    for sub in (get, put):
        _add_tree_options(sub)
        _add_ssh_options(sub)
        _add_transfer_options(sub)
    demo = commands.add_parser(
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
    demo.add_argument(
        "--size",
        type=_size,
        default=DEMO_SIZE,
        help=f"test file size (default {DEMO_SIZE >> 20}M)",
    )
    demo.add_argument(
        "--rtt",
        type=number_at_least(0, "rtt"),
        default=DEMO_RTT_MS,
        metavar="MS",
        help="emulate this round-trip time between client and server (link emulator; "
        f"default {DEMO_RTT_MS:g}; 0: loopback's own, sshpipe's settings compared in-process)",
    )
    demo.add_argument(
        "--rate",
        type=number_at_least(0, "rate"),
        default=None,
        metavar="MBIT",
        help="emulate a link of this many Mbit/s per direction "
        f"(default {DEMO_RATE_MBIT:g} with an RTT, else no limit)",
    )
    serve = commands.add_parser(
        "serve",
        help="run the embedded SFTP server until Ctrl-C",
        description="Serve a directory over SFTP with the embedded server, and print\n"
        "get/put commands that reach it.",
        epilog=_examples(prog, "serve", "serve --root ~/shared --port 2222"),
    )
    serve.add_argument("--root", help="directory to serve (default: a new temp dir)")
    serve.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    clean = commands.add_parser(
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
    clean.add_argument("hosts", nargs="*", metavar="[user@]host")
    clean.add_argument(
        "--dry-run", action="store_true", help="list what would be removed, remove nothing"
    )
    clean.add_argument("-q", dest="quiet", action="store_true", help="print nothing but errors")
    clean.add_argument(
        "-v", dest="verbose", action="count", default=0, help="say more on stderr (-vv, -vvv)"
    )
    _add_ssh_options(clean)
    verbs = {"get": get, "put": put, "clean": clean, "demo": demo, "serve": serve}
    for sub in verbs.values():
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (``sys.argv[1:]`` by default), parsed.

    Raises:
        UsageError: a word that is wrong, in one line (an unknown option or verb
            with the nearest real one).
        SystemExit: 0, after ``--help`` or ``--version`` printed their answer.
    """
    prog = _prog()
    parser, verbs = _verbs(prog)
    words = arrange(
        _verify_level_attached(argv),
        {name: sub.options for name, sub in verbs.items()},
        prog=prog,
    )
    return parser.parse_args(words)
