"""Test peers that are part of the package, so tests and benchmarks share one copy.

- ``embedded``: asyncssh's SFTP server in process, on loopback, with throwaway keys.
- ``attacks``: a malicious SFTP server (asyncssh's ``SFTPServer``, chrooted),
  with each attack of the hostile-server threat model under a directory of
  its own.
- ``faults``: servers that misbehave on purpose (short, reordered or slow
  replies, files changing under the reader, failing requests, dropped
  connections), counting what they served.
- ``hostile``: servers for the tree tests (hostile listings, refused opens,
  link text served as stored).
- ``checkfile``: asyncssh's SFTP server with the ``check-file`` extension
  (ProFTPD's dialect or paramiko's, truthful or lying) and no exec, for
  ``--verify`` where no ``sha256sum`` can run.
- ``rawsftp``: an SFTP server written from the wire up, for what asyncssh's
  server will not send (oversized handles, tiny or missing limits).
- ``badtext``: asyncssh's server sending bytes SSH does not allow as text at
  the SSH level: a version line past ASCII, a banner, a debug message or a
  disconnect reason that is not UTF-8.
- ``restrictive``: servers that each impose one cap seen in the field (open
  handles, channels per connection, reads outstanding, writes in order only,
  cloud servers' refusals (SETSTAT, combined OPEN flags, WRITEs past a block
  cap, SYMLINK), no extensions, a channel closed or the whole server gone
  mid-run); ``tap``
  puts some of them on the session channel, in front of asyncssh's server.
- ``sshd``: a throwaway OpenSSH sshd on loopback; ``plugin`` makes it a
  pytest fixture.
- ``throttle``: a TCP proxy that turns chosen connections away before the
  log-in, as sshd past its MaxStartups does.
- ``fakes``: an in-memory SFTP server and lease for the engine tests
  (``tests/transfer``): replies delayed, reordered, shortened, failed, or never
  sent; a channel cut; check-file answered or lied about; no sockets.

The servers import asyncssh's server side and ``sshpipe.testing.embedded``,
never the client's modules; ``fakes`` drives the client's ``SFTPSession`` over a
pipe of its own. Nothing here is imported by sshpipe itself, except by
the command line's demo, which runs the embedded server.

- ``linkemu``: the user-space link emulator (delay, rate, queue, loss, cuts)
  put in front of a server for WAN tests and benchmarks:
  ``python -m sshpipe.testing.linkemu --target HOST:PORT --rtt 100 --rate 1000``.

May import: ``core``, ``transport`` (the fakes drive the client's
SFTP session), and outside the standard library ``asyncssh`` (its server
side), ``pytest`` (the fixture plugin) and ``uvloop``.
"""
