"""What survives a crash: journals and resume.

- ``journal``: the download journal next to a ``.partial`` and ``DownloadResume``;
- ``putresume``: upload resume (the local journal in the state directory, the
  read-back of kept bytes);
- ``treejournal``: which files of a tree are already done.

May import: ``core``, ``transport``, ``local``, ``_config``, ``_errors``.
"""
