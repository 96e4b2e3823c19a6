"""The network edge: the only client-side importer of ``asyncssh``.

- ``ssh``: connecting (``open_link``, through ProxyJump's hops), asyncssh's
  connect errors translated; ``sshlink``: one SSH connection (``SSHLink``),
  its channels opened with a chosen window and packet size, its commands;
  ``negotiation``: what ``-v`` logs of a new connection (algorithms agreed
  on, set-up times);
- ``sshoptions``: one connection's options settled before it opens (the
  API's fields, ``-o``, ssh_config, our defaults, in OpenSSH's order), and
  ``sshconfig``: the ssh_config keywords sshpipe reads itself
  (``own_options``: StrictHostKeyChecking, ProxyJump, BatchMode, Control*);
- ``cpuflags``: /proc/cpuinfo read once per process, and the default cipher
  order it chooses (``core.cipherorder``);
- ``hostkeys``: OpenSSH's host-key semantics (known_hosts, StrictHostKeyChecking),
  or a user's known_hosts callable;
- ``keys``: private keys loaded before a log-in (``sshpipe.load_key``,
  ``KeyLoadError``), the keys a log-in offers in OpenSSH's order (an encrypted
  one by its public half: ``LockedKey``), host keys described as ``HostKey``;
- ``auth``: the log-in's questions (passphrases, passwords, 2FA) put to
  ``ConnectConfig.prompt``, and the answers that worked kept for the pool;
- ``asyncssh_patches``: the tuning of asyncssh internals, and the round trips
  cut from its log-in, gated by release and by shape: the one module that
  touches asyncssh's private attributes;
- ``shell``: a remote shell for batched commands (``RemoteShell``);
- ``sftp``: ``SFTPSession``, one SFTP channel with requests pipelined on it
  (it never sees asyncssh), on ``requests.RequestChannel`` (request ids,
  replies owed, the stall watchdog); ``replies``: the reply callback, ``quiet``
  for replies nobody reads, the connection's reply clock;
  ``wiring``: the protocols of what a session is wired to (pipe, shell);
- ``remotehash``: the server's ``sha256sum`` run and read, one file's or a
  batch's (the one runner: ``--verify``, trees, ``checksum``);
- ``commands``: a tree's remote commands (``sync -f``, ``sha256sum``) with caps
  and timeouts;
- ``settling``: channels a cancelled transfer left owing replies, kept from
  reuse until those are in (the pool's);
- ``pool``: the client's connections and channels, handed out as a ``Lease``
  (``PoolLease``, the pool's own half, in the same room); ``lease``: what a
  lease is asked with (``ChannelSpec``: the pool never sees a
  ``TransferConfig``) and the protocols a transfer and a tree see it
  through; ``poolshare`` counts busy channels and shares them past the ceiling;
  ``hostlimits``: what one server allows the whole process (connections under
  ``max_connections_per_host``, channels per connection learned from refusals);
- ``linkopen``: where the pool's links come from: a mux master's socket
  (``muxclient.MuxLink``), else a connection of our own (``ssh.open_link``);
  ``muxshell``: a remote shell through the master; ``muxmaster`` and
  ``muxconn``: the master that keeps connections for later
  commands (``-o ControlMaster=auto``) and its socket; ``muxsplice``: its
  connections and the channels it splices to a client;
- ``remotefs``: listings and globs; ``remoteplace``: temp name, checked rename;
- ``checkfile``: the ``check-file`` extension's request (``--verify`` without exec).
- ``compressroute``: ``Compression auto``'s second, compressed pool and the
  leases that move to it; ``zlibprobe``: zlib's speed here, probed once;
- ``alongside``: a background task (a grower, a switch, a warm-up) that lives
  exactly as long as a block, its error raised unwrapped.

asyncssh's exceptions are translated here (``raise X(...) from exc``); nothing
above this package sees them.

``loading``: asyncssh's import made quick and quiet for sshpipe's own
processes (the command line, its workers), never for a library user's:
importing this package changes nothing in its host process. A command run
over a mux master (``linkopen``, ``muxclient``) imports asyncssh not at all.

May import: ``core``, and outside the standard library ``asyncssh`` and
``cryptography`` (what asyncssh's keys are made of).
"""
