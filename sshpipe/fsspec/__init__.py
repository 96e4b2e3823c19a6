"""fsspec's ``sshpipe://`` filesystem (``pip install "sshpipe[fsspec]"``).

- ``_filesystem``: ``SSHPipeFileSystem``, the fsspec ``AsyncFileSystem``;
- ``_bulk``: many files at once (fsspec's plan, the client's tree pipeline);
- ``_file``: the buffered file ``open()`` returns, over a remote file handle;
- ``_parquet``: a parquet file's column chunks read ahead by column (its
  footer parsed by pyarrow, imported only for a file that ends in ``PAR1``);
- ``_clients``: one client per event loop, made on first use;
- ``_options``: storage options and URLs; ``_oserrors``: errors as OSErrors.

The only package that imports fsspec (an optional extra). May import: the
front door (``client``: connect, Client, RemoteFile), the pure
``core``, and outside the standard library ``fsspec`` and ``pyarrow`` (the
parquet read-ahead, when pyarrow is there).
"""

from __future__ import annotations

from ._filesystem import SSHPipeFileSystem

__all__ = ["SSHPipeFileSystem"]
