"""Many files through one pipeline: ``get -r`` / ``put -r`` and several sources.

- ``run``: ``TreeRun``, the scan / small-file / big-file workers, failures and progress;
- ``channels``: the pipeline's channels, their handle caps, and its ``Credits``;
- ``item``: one entry of a tree (``Item``);
- ``get`` / ``put``: the two directions (``TreeGet``, ``TreePut``);
- ``recovery``: a tree going on after a dropped connection;
- ``verify``, ``groupcommit``, ``remotesync``, ``batch``: steps that cost the
  same for one file as for many, so they run for every file ready at once.

May import: ``core``, ``transport``, ``local``, ``transfer``, ``durability``,
``_config``, ``_errors``, ``_stats``.
"""
