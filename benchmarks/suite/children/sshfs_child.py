"""fsspec's SFTP through the sshfs package (asyncssh underneath): fs.get / fs.put."""

from __future__ import annotations

import sys

from _args import parse
from sshfs import SSHFileSystem


def main() -> int:
    args = parse(sys.argv[1:])
    fs = SSHFileSystem(
        args.host, port=args.port, username=args.user, client_keys=[args.key],
        known_hosts=args.known_hosts, config=None,
    )  # fmt: skip
    recursive = args.what == "tree"
    if args.direction == "get":
        fs.get(args.src, args.dst, recursive=recursive)
    else:
        fs.put(args.src, args.dst, recursive=recursive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
