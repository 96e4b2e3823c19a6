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
- ``rawsftp``: an SFTP server written from the wire up, for what asyncssh's
  server will not send (oversized handles, tiny or missing limits).
- ``sshd``: a throwaway OpenSSH sshd on loopback; ``plugin`` makes it a
  pytest fixture.

These are servers: they import asyncssh's server side and ``sshpipe.testing.embedded``,
never the client's modules. Nothing here is imported by sshpipe itself, except by
the command line's demo, which runs the embedded server.
"""
