"""libssh2 through ssh2-python, blocking mode.

``--opt read=loop`` (default) is the loop ssh2-python's documentation shows: iterate the
handle, each read asking for its default 2 MiB buffer, so libssh2 1.11 keeps about
4 x 2 MiB / 30,000 B = 280 requests in flight. ``--opt read=plain`` asks for 30,000 B a
call (one SFTP read's worth), the way a naive port of a read() loop does, and libssh2
then reads ahead only ~4 requests. Writes go in pieces of the same size.
Host key: checked against the given known_hosts only.
"""

from __future__ import annotations

import socket
import sys

from _args import parse
from ssh2 import knownhost
from ssh2.session import Session
from ssh2.sftp import LIBSSH2_FXF_CREAT, LIBSSH2_FXF_READ, LIBSSH2_FXF_TRUNC, LIBSSH2_FXF_WRITE

PLAIN = 30_000
DOCS = 2 * 1024 * 1024  # ssh2-python's default buffer (LIBSSH2_CHANNEL_WINDOW_DEFAULT)
MODE = 0o644


def main() -> int:
    args = parse(sys.argv[1:])
    if args.what != "file":
        print("ssh2-python has no tree copy", file=sys.stderr)
        return 2
    piece = PLAIN if args.opts.get("read") == "plain" else DOCS
    sock = socket.create_connection((args.host, args.port))
    session = Session()
    session.handshake(sock)
    key, _ = session.hostkey()
    hosts = session.knownhost_init()
    hosts.readfile(args.known_hosts)
    # Raises on a mismatch or an unknown key.
    hosts.checkp(
        args.host.encode(), args.port, key,
        knownhost.LIBSSH2_KNOWNHOST_TYPE_PLAIN | knownhost.LIBSSH2_KNOWNHOST_KEYENC_RAW,
    )  # fmt: skip
    session.userauth_publickey_fromfile(args.user, args.key)
    sftp = session.sftp_init()
    if args.direction == "get":
        with sftp.open(args.src, LIBSSH2_FXF_READ, 0) as remote, open(args.dst, "wb") as out:
            if piece == DOCS:
                for _size, data in remote:
                    out.write(data)
            else:
                while True:
                    size, data = remote.read(piece)
                    if size <= 0:
                        break
                    out.write(data)
    else:
        flags = LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_TRUNC
        with open(args.src, "rb") as src, sftp.open(args.dst, flags, MODE) as remote:
            while data := src.read(piece):
                remote.write(data)
    session.disconnect()
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
