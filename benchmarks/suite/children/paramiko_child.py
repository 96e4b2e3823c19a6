"""paramiko's SFTPClient.get/put, as its documentation shows (get prefetches by default).

Host keys: only the given known_hosts, unknown keys rejected.
"""

from __future__ import annotations

import sys

import paramiko
from _args import parse


def main() -> int:
    args = parse(sys.argv[1:])
    if args.what != "file":
        print("paramiko has no tree copy", file=sys.stderr)
        return 2
    client = paramiko.SSHClient()
    client.load_host_keys(args.known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        args.host, port=args.port, username=args.user, key_filename=args.key,
        look_for_keys=False, allow_agent=False,
    )  # fmt: skip
    try:
        sftp = client.open_sftp()
        if args.direction == "get":
            # prefetch=True is the default; said here because it is what is measured.
            sftp.get(args.src, args.dst, prefetch=args.opts.get("prefetch", "1") == "1")
        else:
            sftp.put(args.src, args.dst)
        sftp.close()
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
