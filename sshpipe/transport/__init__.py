"""The network edge: the only client-side importer of ``asyncssh``.

- ``ssh``: connecting (``open_link``), one SSH connection (``SSHLink``), its
  channels opened with a chosen window and packet size;
- ``hostkeys``: OpenSSH's host-key semantics (known_hosts, StrictHostKeyChecking);
- ``asyncssh_patches``: the version-gated tuning of asyncssh internals;
- ``shell``: a remote shell for batched commands (``RemoteShell``);
- ``sftp``: ``SFTPSession``, one SFTP channel with requests pipelined on it;
- ``commands``: running remote commands (fsync, hashes) with caps and timeouts;
- ``pool``: the client's connections and channels, handed out as a ``Lease``;
- ``remotefs``: listings and globs; ``remoteplace``: temp name, checked rename.

asyncssh's exceptions are translated here (``raise X(...) from exc``); nothing
above this package sees them. May import: ``core``, ``_config``, ``_errors``.
"""
