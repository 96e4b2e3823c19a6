"""One file: keep requests in flight over a lease's channels, feed replies to the core.

"Ask the core -> await I/O -> feed the core". The pipeline, top to bottom:

- ``download`` / ``upload`` / ``stream``: one file end to end (temp name,
  verify, commit, or bytes yielded in order), each attempt run inside the
  reconnect loop of ``retrying``;
- ``readpump`` / ``writepump``: READs or WRITEs in flight, replies fed to the
  read plan or the acknowledgement count;
- ``pump``: what both share (lanes, flight budget, flow controller, error,
  wake-ups; a stall is the sessions' watchdog's to find, see ``transport.sftp``);
- ``grower``: more channels while the flow controller wants them;
- ``lanes``: the file's handle on each channel;
- ``verify``: the end-to-end SHA-256 check before the final rename.

May import: ``core``, ``transport``, ``local``, ``durability``, ``_config``,
``_errors``, ``_stats``.
"""
