"""The one command line every library child takes (stdlib only: it is part of the
timed process).

``CHILD.py [--opt KEY=VALUE ...] get|put file|tree HOST PORT USER KEY KNOWN_HOSTS SRC DST``
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class ChildArgs:
    direction: str
    what: str  # "file" or "tree"
    host: str
    port: int
    user: str
    key: str
    known_hosts: str
    src: str
    dst: str
    opts: dict[str, str]

    def opt_int(self, name: str, default: int) -> int:
        return int(self.opts.get(name, default))


def parse(argv: list[str]) -> ChildArgs:
    parser = argparse.ArgumentParser()
    parser.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("direction", choices=("get", "put"))
    parser.add_argument("what", choices=("file", "tree"))
    for name in ("host", "port", "user", "key", "known_hosts", "src", "dst"):
        parser.add_argument(name)
    ns = parser.parse_args(argv)
    opts = dict(item.partition("=")[::2] for item in ns.opt)
    return ChildArgs(
        direction=ns.direction, what=ns.what, host=ns.host, port=int(ns.port), user=ns.user,
        key=ns.key, known_hosts=ns.known_hosts, src=ns.src, dst=ns.dst, opts=opts,
    )  # fmt: skip
