"""What survives a crash: journals and resume.

- ``journal``: the download journal next to a ``.partial`` and ``DownloadResume``;
- ``putresume``: upload resume (the local journal in the state directory,
  which of its ranges are worth reading back; ``transfer.readback`` reads them);
- ``treejournal``: which files of a tree are already done;
- ``ledger``: every temporary file, recorded before it is created and until
  it is gone, one record per run (flock'ed while it lives); what runs that are
  gone left is swept by the next upload (server) or download (here), or ``clean``.

May import: ``core``, ``local``, ``transport``.
"""
