"""``python -m sshpipe clean``: remove by hand what killed or failed runs left behind.

Every temporary file is entered in the ledger before it is created
(``durability.ledger``); the next download sweeps what runs that are gone
left on this machine, the next upload to a server what they left there.
``clean`` does it now: with hosts, it connects to each and removes what the
ledger holds for that ``user@host:port``; without, it removes the local ones
and lists the servers that still have some. ``--dry-run`` lists them and
removes nothing. Only sshpipe's temporary names are ever removed, and never
those of a run still going.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ..client.connect import connect
from ..core.config import TransferConfig, parse_destination
from ..core.errors import UsageError
from ..core.text import printable
from .targets import RemoteSpec, parse_remote

__all__ = ["clean"]

ConnectKwargs = Callable[[argparse.Namespace, RemoteSpec], dict[str, Any]]


async def clean(args: argparse.Namespace, connect_kwargs: ConnectKwargs, interrupts: Any) -> int:
    """Sweep the hosts named (or, with none, this machine); exit code 0.

    ``connect_kwargs``: the keyword arguments of ``connect`` for a spec (the
    options' and a terminal prompt), as get and put connect.

    Raises:
        UsageError: a word that is not ``[user@]host``. As get and put do, for
        a server that cannot be reached (ConnectError, HostKeyError...).
    """
    specs = [(word, _spec(word)) for word in args.hosts]
    if not specs:
        return _clean_here(args)
    for word, spec in specs:
        # Nothing is copied: one connection, one channel, the library's defaults.
        kwargs = connect_kwargs(args, spec)
        async with connect(spec.host, config=TransferConfig(), **kwargs) as client:
            interrupts.client = client  # dropped at a second Ctrl-C
            found = await client.clean_temps(dry_run=args.dry_run)
        _tell(args, found, word)
    return 0


def _spec(word: str) -> RemoteSpec:
    """``[user@]host``, ``[user@]host:`` or an ``sftp://`` URL (its path is not used)."""
    spec = parse_remote(word)
    if spec is not None:
        return spec
    if "/" in word:
        raise UsageError(f"clean takes [user@]host or sftp://[user@]host[:port], not {word!r}")
    user, host = parse_destination(word)
    return RemoteSpec(user=user, host=host, path=".")


def _clean_here(args: argparse.Namespace) -> int:
    from ..durability import ledger

    swept = ledger.sweep_local(dry_run=args.dry_run)
    _tell(args, sorted(swept.removed), "this machine")
    for place, count in sorted(ledger.pending_places().items()):
        if not args.quiet:
            print(
                f"{printable(place)}: {count} temporary file(s) recorded "
                f"(clean {_spelled(place)} removes them)"
            )
    return 0


def _tell(args: argparse.Namespace, paths: list[str], where: str) -> None:
    if args.quiet:
        return
    if args.dry_run:
        for path in paths:
            print(printable(path))
        print(f"{len(paths)} temporary file(s) to remove on {printable(where)}")
    else:
        print(f"removed {len(paths)} temporary file(s) on {printable(where)}")
    sys.stdout.flush()


def _spelled(place: str) -> str:
    """ "user@host:port" as ``clean`` takes it: ``-P port user@host``."""
    who, _, port = place.rpartition(":")
    if ":" in who.rpartition("@")[2]:  # an IPv6 address: in brackets
        user, _, host = who.rpartition("@")
        who = f"{user}@[{host}]" if user else f"[{host}]"
    return f"-P {port} {who}" if port.isdigit() else place
