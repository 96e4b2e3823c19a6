"""Private keys loaded before a log-in, host keys described (``sshpipe.load_key``, ``HostKey``).

A key named on purpose (``identity_files``, ``keys``, ``load_key``) that
cannot be used is a :class:`KeyLoadError` before anything is sent: missing,
unreadable, malformed, or encrypted without the right passphrase, unless a
prompt may ask for it (``auth.py``): then it is *locked*, asked about when
the log-in reaches it, as OpenSSH asks on its terminal. The keys asyncssh
finds by itself (ssh_config's IdentityFile, ``~/.ssh/id_*``) stay its own: an
encrypted one there is skipped by asyncssh, and locked here when a prompt may
open it (``locked_keys``).
"""

from __future__ import annotations

import binascii
import os
from pathlib import Path
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


def client_keys(
    cfg: ConnectConfig, locked: list[str] | None = None
) -> list[asyncssh.SSHKeyPair] | None:
    """The keys to offer: ``cfg.keys``, then each identity file (with its
    ``-cert.pub``); None leaves asyncssh to find the default ones.

    Args:
        locked: if given, an encrypted identity file without a passphrase
            is appended to it (to prompt for) instead of refused.

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
        if locked is not None and cfg.passphrase is None and _encrypted_file(where):
            locked.append(where)
            continue
        try:
            pairs += asyncssh.load_keypairs(where, cfg.passphrase)
        except OSError as exc:
            raise KeyLoadError(
                where, exc.strerror or str(exc), host=cfg.host, port=cfg.port
            ) from exc
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
            raise KeyLoadError(where, _why(exc), host=cfg.host, port=cfg.port) from exc
    return pairs


# The files asyncssh loads when no key is named and ssh_config has no IdentityFile
# (asyncssh's _DEFAULT_KEY_FILES, OpenSSH's order).
DEFAULT_KEY_FILES = ("id_ed25519_sk", "id_ecdsa_sk", "id_ed448", "id_ed25519", "id_ecdsa", "id_rsa")


def locked_keys(cfg: ConnectConfig, options: asyncssh.SSHClientConnectionOptions) -> list[str]:
    """The default key files (ssh_config's IdentityFile, else ``~/.ssh/id_*``)
    asyncssh skipped as encrypted: their passphrase may be asked for."""
    if cfg.keys or cfg.identity_files or cfg.passphrase is not None:
        return []
    named = options.config.get("IdentityFile", ())
    if isinstance(named, list | tuple) and named:
        files = [os.path.expanduser(str(p)) for p in named]
    else:
        files = [str(Path("~", ".ssh", name).expanduser()) for name in DEFAULT_KEY_FILES]
    return [path for path in files if _encrypted_file(path)]


def unlock_key(path: str, passphrase: str) -> list[asyncssh.SSHKeyPair] | None:
    """The key pairs of an encrypted file (with its certificate), or None for a
    wrong passphrase (or a file that no longer loads: it is skipped)."""
    try:
        return list(asyncssh.load_keypairs(path, passphrase))
    except (OSError, asyncssh.KeyImportError, asyncssh.KeyEncryptionError):
        return None


def is_encrypted(data: bytes) -> bool:
    """Whether a private key file's bytes are encrypted (so need a passphrase).

    The OpenSSH format names its cipher in the clear ("none" when not
    encrypted); PEM says "Proc-Type: 4,ENCRYPTED", PKCS#8 "BEGIN ENCRYPTED
    PRIVATE KEY". Read without decoding the key: no RSA checks (0.3 s).
    """
    if b"ENCRYPTED" in data[:256]:
        return True
    begin, end = b"-----BEGIN OPENSSH PRIVATE KEY-----", b"-----END OPENSSH PRIVATE KEY-----"
    start = data.find(begin)
    if start < 0:
        return False
    body = data[start + len(begin) :].split(end, 1)[0]
    try:
        raw = binascii.a2b_base64(b"".join(body.split()))
    except binascii.Error:
        return False
    magic = b"openssh-key-v1\0"
    if not raw.startswith(magic) or len(raw) < len(magic) + 4:
        return False
    size = int.from_bytes(raw[len(magic) : len(magic) + 4], "big")
    return raw[len(magic) + 4 : len(magic) + 4 + size] != b"none"


def _encrypted_file(path: str) -> bool:
    try:
        with open(path, "rb") as file:
            data = file.read(64 * 1024)  # a private key is a few KiB
    except OSError:
        return False  # missing or unreadable: asyncssh's error, or skipped
    return is_encrypted(data)


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
