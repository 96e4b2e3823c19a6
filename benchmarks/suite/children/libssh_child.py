"""libssh through ssh-python.

``--opt inflight=1`` (default): plain ``sftp_read`` in a loop, one request in flight,
as KIO and most libssh programs read. ``--opt inflight=N``: libssh's asynchronous
reads (``sftp_async_read_begin`` / ``sftp_async_read``; ssh-python does not wrap the
newer ``sftp_aio_*``), N requests kept in flight. Writes are plain ``sftp_write``.
Host key: checked against the given known_hosts only.
"""

from __future__ import annotations

import os
import sys
from collections import deque

from _args import parse
from ssh import options
from ssh.key import import_privkey_file
from ssh.session import Session

# ssh_is_server_known()'s SSH_SERVER_KNOWN_OK (ssh-python exports no constant).
SERVER_KNOWN_OK = 1
PIECE = 32 * 1024  # libssh's own chunk (its max for one read)
MODE = 0o644


def main() -> int:
    args = parse(sys.argv[1:])
    if args.what != "file":
        print("ssh-python has no tree copy", file=sys.stderr)
        return 2
    inflight = args.opt_int("inflight", 1)
    session = Session()
    session.options_set(options.HOST, args.host)
    session.options_set_port(args.port)
    session.options_set(options.USER, args.user)
    session.options_set(options.KNOWNHOSTS, args.known_hosts)
    session.options_set(options.GLOBAL_KNOWNHOSTS, "/dev/null")
    session.connect()
    if session.is_server_known() != SERVER_KNOWN_OK:
        print("host key not in known_hosts", file=sys.stderr)
        return 3
    session.userauth_publickey(import_privkey_file(args.key))
    sftp = session.sftp_init()
    if args.direction == "get":
        remote = sftp.open(args.src, os.O_RDONLY, 0)
        with open(args.dst, "wb") as out:
            if inflight <= 1:
                while True:
                    size, data = remote.read(PIECE)
                    if size <= 0:
                        break
                    out.write(data)
            else:
                _pipelined(remote, out, inflight, remote.fstat().size)
        remote.close()
    else:
        remote = sftp.open(args.dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, MODE)
        with open(args.src, "rb") as src:
            while data := src.read(PIECE):
                remote.write(data)
        remote.close()
    session.disconnect()
    return 0


def _pipelined(remote: object, out: object, inflight: int, size: int) -> None:
    pending: deque[int] = deque()
    offset = 0
    while offset < size or pending:
        while offset < size and len(pending) < inflight:
            pending.append(remote.async_read_begin(PIECE))  # type: ignore[attr-defined]
            offset += PIECE
        got, data = remote.async_read(pending.popleft(), PIECE)  # type: ignore[attr-defined]
        if got > 0:
            out.write(data)  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
