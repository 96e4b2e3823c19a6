"""One file: keep requests in flight over a lease's channels, feed replies to the core.

"Ask the core -> await I/O -> feed the core". The pipeline, top to bottom:

- ``download`` / ``upload`` / ``stream``: one file end to end (temp name, verify,
  commit), each attempt run inside the one reconnect loop;
- ``lanes``: the file's handle on each channel (``Lane``), the shared ``Pump``,
  and the ``Grower`` that adds channels while the flow controller wants them;
- ``writepump``: WRITEs in flight (upload); the read pump lives in ``download``;
- ``verify``: the end-to-end SHA-256 check before the final rename.

May import: ``core``, ``transport``, ``local``, ``durability``, ``_config``,
``_errors``, ``_stats``.
"""
