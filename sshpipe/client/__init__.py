"""The async API, sshpipe's front door: ``connect``, ``Client``, its remote operations and files.

- ``connect``: a connection's arguments checked and frozen into a ``Client``;
- ``client``: ``Client``, its transfers (get, put, trees, streams, globs);
  ``base``: a client's life (opened once, bound to one loop, closed once);
  ``choices``: what a call settles before its transfer (tree options, workers);
- ``remoteops``: ls, stat, remove, mkdir, rename, copy, checksum on the server;
- ``remotefile``: ``RemoteFile``, a remote file held open for random access;
- ``engine``: everything the transfers run on, imported on a client's first use
  (in a worker thread: asyncssh's import would stall the caller's loop).

May import: ``core``, ``local``, ``transport``, ``durability``, ``transfer``,
``tree``, ``workers``: every floor below the faces.
"""
