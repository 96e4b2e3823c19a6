"""What survives a crash: journals and resume.

- ``journal``: the download journal next to a ``.partial`` and ``DownloadResume``;
- ``putresume``: upload resume (the local journal in the state directory, the
  read-back of kept bytes);
- ``treejournal``: which files of a tree are already done;
- ``lefttemps``: temp files a failed upload could not remove, kept per server
  until the next upload to it removes them.

May import: ``core``, ``transport``, ``local``, ``_config``, ``_errors``.
"""
