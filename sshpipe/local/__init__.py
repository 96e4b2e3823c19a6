"""The disk edge: every local read and write of a transfer.

- ``dirfd``: paths reached through directory descriptors (``DirRoot``,
  ``LocalDir``, ``LocalFile``), so no name from a server leads outside the
  destination, even through a symlink swapped in mid-copy;
- ``target``: the ``.partial`` temp file, positional writes (``pwritev``) in a
  writer thread, fsync, rename into place;
- ``source``: a local file being uploaded, read positionally (a pipe, streamed);
- ``device``: a FIFO or character device written into in order, never replaced,
  and a pipe read as it fills, neither blocking the loop.

May import: ``core``. No asyncssh.
"""
