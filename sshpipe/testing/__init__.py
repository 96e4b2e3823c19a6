"""Test peers that are part of the package, so tests and benchmarks share one copy.

- ``attacks``: a malicious SFTP server (asyncssh's ``SFTPServer``, chrooted),
  with each attack of the hostile-server threat model under a directory of
  its own.
- ``rawsftp``: an SFTP server written from the wire up, for what asyncssh's
  server will not send (oversized handles, tiny or missing limits).

These are servers: they import asyncssh's server side and ``sshpipe.testing.embedded``,
never the client's modules. Nothing here is imported by sshpipe itself.
"""
