"""Many files through one pipeline: ``get -r`` / ``put -r`` and several sources.

- ``run``: ``TreeRun``, the scan / small-file / big-file workers, failures and progress;
- ``channels``: the pipeline's channels, their handle caps, and its ``Credits``;
- ``item``: one entry of a tree (``Item``);
- ``scan``: finding the work, the same for both directions, through a ``Side``;
- ``get`` / ``put``: the two directions (``TreeGet``, ``TreePut``): where bytes land;
- ``preserving``: ``put -p`` of one file (the single-file engine, then ``-p``'s attributes);
- ``smallread``: a small remote file read in one round trip after the OPEN;
- ``tasks``: the task groups every task of a tree runs in;
- ``rmtree``: removing a remote tree, many REMOVEs and RMDIRs in flight at once;
- ``progress``: a big file's bytes in the tree's progress as they move;
- ``recovery``: a tree going on after a dropped connection;
- ``verify``, ``groupcommit``, ``remotesync``, ``batch``: steps that cost the
  same for one file as for many, so they run for every file ready at once.

May import: ``core``, ``local``, ``transport``, ``durability``, ``transfer``.
"""
