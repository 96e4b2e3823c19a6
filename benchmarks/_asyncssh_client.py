"""Plain asyncssh SFTP transfer, run as a child process by the benchmarks.

Usage: python _asyncssh_client.py [-r] get|put HOST PORT USER KEY KNOWN_HOSTS SRC DST

``-r`` copies a directory tree (``recurse=True``, as bench_tree.py needs).
Deliberately uses asyncssh's defaults (default event loop, block size and
request count) so it shows what a user gets without tuning.
"""

from __future__ import annotations

import asyncio
import sys

import asyncssh

_USAGE = "usage: _asyncssh_client.py [-r] get|put HOST PORT USER KEY KNOWN_HOSTS SRC DST"


async def _transfer(argv: list[str], recurse: bool) -> None:
    direction, host, port, user, key, known_hosts, src, dst = argv
    async with (
        asyncssh.connect(
            host,
            port=int(port),
            username=user,
            client_keys=[key],
            known_hosts=known_hosts,
            # None, not the default (), so ~/.ssh/config cannot change the setup.
            config=None,
        ) as conn,
        conn.start_sftp_client() as sftp,
    ):
        if direction == "get":
            await sftp.get(src, dst, recurse=recurse)
        else:
            await sftp.put(src, dst, recurse=recurse)


def main() -> int:
    argv = sys.argv[1:]
    recurse = bool(argv) and argv[0] == "-r"
    if recurse:
        argv = argv[1:]
    if len(argv) != 8 or argv[0] not in ("get", "put"):
        print(_USAGE, file=sys.stderr)
        return 2
    asyncio.run(_transfer(argv, recurse))
    return 0


if __name__ == "__main__":
    sys.exit(main())
