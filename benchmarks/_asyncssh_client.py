"""Plain asyncssh SFTP transfer, run as a child process by the benchmarks.

Usage: python _asyncssh_client.py [-r] [--max-requests N] get|put HOST PORT USER KEY
       KNOWN_HOSTS SRC DST

``-r`` copies a directory tree (``recurse=True``, as bench_tree.py needs).
Deliberately uses asyncssh's defaults (default event loop, block size and
request count) so it shows what a user gets without tuning; ``--max-requests N``
(the benchmark suite's tuned variant) is the one knob a user would turn.
"""

from __future__ import annotations

import asyncio
import sys
import warnings

# cryptography 51 warns on asyncssh's import that DSA is deprecated: two lines
# in every sample's log, about a key type nobody here uses (sshpipe hides it too).
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh\.")

import asyncssh  # noqa: E402

_USAGE = (
    "usage: _asyncssh_client.py [-r] [--max-requests N] get|put HOST PORT USER KEY"
    " KNOWN_HOSTS SRC DST"
)


async def _transfer(argv: list[str], recurse: bool, max_requests: int | None) -> None:
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
        # Only when asked: asyncssh's own default is what the plain client measures.
        tuned = {} if max_requests is None else {"max_requests": max_requests}
        if direction == "get":
            await sftp.get(src, dst, recurse=recurse, **tuned)
        else:
            await sftp.put(src, dst, recurse=recurse, **tuned)


def main() -> int:
    argv = sys.argv[1:]
    recurse = bool(argv) and argv[0] == "-r"
    if recurse:
        argv = argv[1:]
    max_requests = None
    if len(argv) > 1 and argv[0] == "--max-requests" and argv[1].isdigit():
        max_requests, argv = int(argv[1]), argv[2:]
    if len(argv) != 8 or argv[0] not in ("get", "put"):
        print(_USAGE, file=sys.stderr)
        return 2
    asyncio.run(_transfer(argv, recurse, max_requests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
