"""The pure core: protocol and policy with no I/O.

No ``asyncio``, no ``asyncssh``, no file or socket I/O, no ``async def``:
bytes and results go in, decisions come out, and every module here is tested
with tables and hypothesis (``tests/core/``). A fresh interpreter proves it
(``tests/core/test_core_purity.py`` imports everything in this directory).

- ``codec``: SFTP v3 packets (filexfer-02), attributes, the messages, requests encoded;
- ``replyparser``: the server's messages decoded from the bytes as they arrive;
- ``readplan``: which READ next (frontier, holes at ``offset+received``, EOF);
- ``reorder``: reassembly by offset for in-order consumers;
- ``flight``: the in-flight budget (requests and bytes) of one transfer;
- ``flowcontrol``: channels and bytes in flight from RTT and delivery rate;
- ``sizing``: READ/WRITE length, reply cap, what one channel carries;
- ``retry``: reconnect backoff;
- ``untrusted``: the gate every name, link and size from a server passes;
- ``text``: ``printable``, a server's text as it may reach a terminal or a log;
- ``treeplan``: tree landing names, globs, small/big split, accounting;
- ``readback``: checking an upload's kept bytes on resume;
- ``identity``: whether a file is still the one it was (a local source's stat,
  a remote file's attributes), and the verdict on a RENAME said done;
- ``stripes``: which bytes each worker process of one file copies (``--workers``);
- ``checkfile``: the ``check-file`` extension's bytes, and which hashes --verify takes;
- ``status``: the ``RemoteError`` a failure STATUS stands for;
- ``serverprofile``: which server this is (banner, VERSION extensions): SYMLINK
  order, what it offers;
- ``quirks``: cloud SFTP servers' quirks as named profiles (AWS Transfer, Azure Blob,
  read-once mailboxes), from the banner or forced, and the rules they follow
  (OPEN flags split, the block a cap on WRITEs needs, what a resume in order keeps);
- ``servercaps``: what a server was found to refuse (handles, block, requests
  in flight, out-of-order writes, SETSTAT, combined OPEN flags, SYMLINK), and
  the rules that learn it;
- ``sshconfig``: ssh_config read as OpenSSH reads it (Host, Match, Include,
  first value wins) for one host, and ``-J``'s hops;
- ``timeline``: a transfer's set-up phases, in seconds and round trips;
- ``progress``: the progress reports' rate, ETA, and when one is due;
- ``parquetplan``: which parquet column chunks to read ahead, learned from the
  reader's reads, within a byte cap;
- ``cipherorder``: the cipher order from the CPU's flags (AES-GCM first with
  AES instructions, chacha20-poly1305 first without);
- ``argtypes``: the command lines' argument types (sizes, numbers), each
  refusal one line.

The shared vocabulary lives here too, pure as the rest: ``errors`` (the
exception tree and its exit codes), ``stats`` (what a transfer reports),
``config`` (``TransferConfig``, ``ConnectConfig``; their numbers, each with its
reason, in ``defaults``, which imports nothing), ``keys`` (``HostKey``,
``PrivateKey``), ``prompt`` (the log-in's questions), ``paths`` (the paths the
API takes), ``remotestat`` (``RemoteStat``).

May import: the standard library only.
"""
