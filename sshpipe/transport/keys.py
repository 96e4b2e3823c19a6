"""Private keys loaded before a log-in, host keys described (``sshpipe.load_key``, ``HostKey``).

A key named on purpose (``identity_files``, ``keys``, ``load_key``) that
cannot be used is a :class:`KeyLoadError` before anything is sent: missing,
unreadable, malformed, or encrypted without the right passphrase. The keys
asyncssh finds by itself (ssh_config's IdentityFile, ``~/.ssh/id_*``) stay
its own: an encrypted one there is skipped, as OpenSSH does without a terminal.
"""

from __future__ import annotations

import os
from typing import TypeAlias

import asyncssh

from .._config import ConnectConfig
from .._errors import KeyLoadError, UsageError
from .._keys import HostKey, PrivateKey

# What load_key reads: a file, the key's bytes, or a key asyncssh already holds.
KeySource: TypeAlias = "str | os.PathLike[str] | bytes | asyncssh.SSHKey | PrivateKey"


def load_key(source: KeySource, passphrase: str | bytes | None = None) -> PrivateKey:
    """A private key to log in with (``connect(keys=[...])``).

    Args:
        source: a private key file (OpenSSH, PEM or PKCS#8; ``~`` expanded),
            the file's bytes, or an asyncssh ``SSHKey`` (wrapped as it is).
        passphrase: for an encrypted key; never logged or shown.

    Returns:
        The key, which shows its type and fingerprint, never the secret.

    Raises:
        KeyLoadError: missing or unreadable, malformed, encrypted without (or
            with a wrong) passphrase.
        UsageError: ``source`` is none of these.
    """
    if isinstance(source, PrivateKey):
        return source
    if isinstance(source, asyncssh.SSHKey):
        named = source.get_filename()
        return _wrapped(source, os.fsdecode(named) if named else "(key object)")
    if isinstance(source, bytes):
        where = "(bytes)"
        try:
            key = asyncssh.import_private_key(source, passphrase)
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
            raise KeyLoadError(where, _why(exc)) from exc
        return _wrapped(key, where)
    if not isinstance(source, str | os.PathLike):
        raise UsageError(f"a key is a path, bytes or a key object, not {type(source).__name__}")
    where = os.path.expanduser(os.fspath(source))
    try:
        key = asyncssh.read_private_key(where, passphrase)
    except OSError as exc:
        raise KeyLoadError(where, exc.strerror or str(exc)) from exc
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
        raise KeyLoadError(where, _why(exc)) from exc
    return _wrapped(key, where)


def client_keys(cfg: ConnectConfig) -> list[asyncssh.SSHKeyPair] | None:
    """The keys to offer: ``cfg.keys``, then each identity file (with its
    ``-cert.pub``); None leaves asyncssh to find the default ones.

    Raises:
        KeyLoadError: an identity file cannot be used (see the module).
    """
    if not cfg.keys and not cfg.identity_files:
        return None
    pairs: list[asyncssh.SSHKeyPair] = []
    for key in cfg.keys:
        pairs += asyncssh.load_keypairs(_inner(key))
    for path in cfg.identity_files:
        where = os.path.expanduser(os.fspath(path))
        try:
            pairs += asyncssh.load_keypairs(where, cfg.passphrase)
        except OSError as exc:
            raise KeyLoadError(
                where, exc.strerror or str(exc), host=cfg.host, port=cfg.port
            ) from exc
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
            raise KeyLoadError(where, _why(exc), host=cfg.host, port=cfg.port) from exc
    return pairs


def host_key_of(key: asyncssh.SSHKey) -> HostKey:
    """The public description of a server's key (no comment: a server sends none)."""
    line = key.export_public_key("openssh").decode("ascii", "replace").split()
    return HostKey(
        type=key.get_algorithm(), fingerprint=key.get_fingerprint(), openssh=" ".join(line[:2])
    )


def _wrapped(key: asyncssh.SSHKey, where: str) -> PrivateKey:
    return PrivateKey(
        type=key.get_algorithm(), fingerprint=key.get_fingerprint(), source=where, _key=key
    )


def _inner(key: PrivateKey) -> asyncssh.SSHKey:
    inner = key._key  # the transport is the one reader of its own object
    assert isinstance(inner, asyncssh.SSHKey)
    return inner


def _why(exc: Exception) -> str:
    if isinstance(exc, asyncssh.KeyEncryptionError):
        # asyncssh says "Incorrect passphrase" for a wrong one.
        return f"cannot decrypt it: {exc}"
    # "Passphrase must be specified to import encrypted private keys", or the format's complaint.
    return str(exc)
