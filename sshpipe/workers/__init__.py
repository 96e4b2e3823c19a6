"""One file's get or put shared by worker processes, for when one core is not enough.

- ``get`` / ``put``: the parent's side of one file: the plan (size, stripes
  of what is owed), the one ``.partial`` (get) or remote temporary file (put),
  the journal (a resumed get), then the existing verify and commit once every
  worker succeeded; the first failure stops the others and is raised as the
  worker raised it;
- ``crew``: the processes (``python -m``: no ``__main__`` of the caller's is
  re-imported), their jobs and reports;
- ``child``: a worker: its own connection (the parent's options, never
  weaker), the engine's read loop or write pump over its stripe;
- ``wire``: the frames between them; ``common``: what get and put share.

Which bytes a worker copies is ``core.stripes``'s; how many workers, too.

May import: ``core``, ``local``, ``transport``, ``durability``, ``transfer``,
``uvloop`` (a worker's own loop), and ``client.client``: the one arrow up, a
worker process's own entry (the child module) connects as the parent's client did.
"""
