"""sshpipe's Python API in one process: connect, get/put, close."""

from __future__ import annotations

import asyncio
import sys

from _args import parse

import sshpipe


async def _run() -> None:
    args = parse(sys.argv[1:])
    recursive = args.what == "tree"
    async with sshpipe.connect(
        f"{args.user}@{args.host}", port=args.port, identity_files=[args.key],
        known_hosts=[args.known_hosts], ssh_config=[], agent_path="none",
    ) as sp:  # fmt: skip
        if args.direction == "get":
            await sp.get(args.src, args.dst, recursive=recursive)
        else:
            await sp.put(args.src, args.dst, recursive=recursive)


if __name__ == "__main__":
    asyncio.run(_run())
