"""Private keys loaded before a log-in, host keys described (``sshpipe.load_key``, ``HostKey``).

The keys a log-in offers are OpenSSH's (sshconnect2.c's ``pubkey_prepare``;
``offered_keys``): ``keys`` given in memory, then the files ``-i`` names
(``identity_files``) and ssh_config's IdentityFile lines, in that order; only
where none is named, the default ``~/.ssh/id_*``. The agent's keys come before
all of them (asyncssh puts them first, as ssh does; with IdentitiesOnly only
those of the named files).

An encrypted file is offered where it stands, by its public half (its
``.pub``, or the OpenSSH format's unencrypted public part): a ``LockedKey``
whose passphrase is asked only once the server accepted that public half
(PK_OK, RFC 4252 §7), as ssh asks on its terminal. A file named on purpose
(``-i``, ``keys``, ``load_key``) that cannot be used is a :class:`KeyLoadError`
before anything is sent: missing, unreadable, malformed, or encrypted with no
passphrase and nothing to ask one with. A file that is only configured or a
default one is skipped then, as ssh skips it.
"""

from __future__ import annotations

import asyncio
import binascii
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

import asyncssh

from ..core.config import ConnectConfig
from ..core.errors import KeyLoadError, UsageError
from ..core.keys import HostKey, PrivateKey
from ..core.text import printable

logger = logging.getLogger("sshpipe.ssh")

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


# An encrypted key's pairs once its passphrase opened them (None: not opened).
Unlock = Callable[[str], Awaitable["list[asyncssh.SSHKeyPair] | None"]]


class LockedKey(asyncssh.SSHKeyPair):
    """An encrypted key file offered by its public half; it signs once unlocked.

    asyncssh offers it as it offers any key pair: by a query (the log-in
    patch's signed-first request steps aside: ``query_first``), and only on
    the server's PK_OK asks it to sign (``sign_async``, as an agent's key
    pair signs): then, and only then, ``unlock`` asks the passphrase. A
    passphrase not given (or wrong every time) makes asyncssh go on to the
    next key, as ssh does.

    Attributes:
        path: the key file.
        unlock: asks for it (``auth.LoginClient.unlock``), set once the
            log-in's client exists; None asks nothing.
    """

    query_first = True

    def __init__(
        self, path: str, public: asyncssh.SSHKey, cert: asyncssh.SSHCertificate | None = None
    ) -> None:
        super().__init__(
            public.algorithm,
            public.algorithm,
            public.sig_algorithms,
            public.sig_algorithms,
            public.public_data,
            public.get_comment_bytes(),
            cert,
            os.fsencode(path),
        )
        self.path = path
        self.unlock: Unlock | None = None

    def __repr__(self) -> str:
        return f"<LockedKey {printable(self.path)} {self.get_algorithm()}>"

    async def sign_async(self, data: bytes) -> bytes:
        """The signature, once the passphrase opened the file (asked now, at PK_OK).

        Raises:
            ValueError: not opened, or it holds another key than its public
                half said: asyncssh goes on to the next key.
        """
        pairs = await self.unlock(self.path) if self.unlock is not None else None
        for pair in pairs or ():
            if pair.public_data == self.public_data:
                pair.set_sig_algorithm(self.sig_algorithm)
                # Off the loop: an RSA signature takes milliseconds.
                return await asyncio.to_thread(pair.sign, data)
        if pairs:
            raise ValueError(f"{self.path} holds another key than its public half")
        raise ValueError(f"{self.path} was not unlocked")


@dataclass(kw_only=True)
class OfferedKeys:
    """What a log-in offers (``offered_keys``).

    Attributes:
        pairs: the key pairs in order (``LockedKey``s among them) for
            asyncssh's ``client_keys``.
        locked: encrypted files whose public half cannot be read without the
            passphrase (a PEM or PKCS#8 file with no ``.pub``): asked about
            after the others (``auth.LoginClient.public_key_auth_requested``).
        named: whether any key was named (``keys``, ``-i``, IdentityFile):
            then the default files are not offered.
    """

    pairs: list[asyncssh.SSHKeyPair] = field(default_factory=list)
    locked: list[str] = field(default_factory=list)
    named: bool = False

    @property
    def waiting(self) -> list[LockedKey]:
        """The locked keys offered by their public half, to be told how to unlock."""
        return [pair for pair in self.pairs if isinstance(pair, LockedKey)]


def offered_keys(
    cfg: ConnectConfig,
    configured: Sequence[str] = (),
    *,
    may_ask: bool,
    unlocked: dict[str, list[asyncssh.SSHKeyPair]] | None = None,
    abandoned: set[str] | frozenset[str] = frozenset(),
) -> OfferedKeys:
    """The keys a log-in offers, in OpenSSH's order (see the module).

    Args:
        configured: ssh_config's IdentityFile values (expanded), after ``-i``'s.
        may_ask: a passphrase may be asked (a prompt, or one opened earlier):
            an encrypted file is offered locked, else skipped or refused.
        unlocked: files a passphrase opened earlier on this client.
        abandoned: files given up on earlier on this client: not offered.

    Raises:
        KeyLoadError: a file named with ``-i`` (or a key in ``keys``) that
            cannot be used, or any file ``cfg.passphrase`` does not open.
    """
    unlocked = unlocked if unlocked is not None else {}
    offered = OfferedKeys()
    for key in cfg.keys:
        offered.pairs += asyncssh.load_keypairs(_inner(key))
    files = _named_files(cfg, configured)
    offered.named = bool(cfg.keys or files)
    if not offered.named:
        home = Path("~", ".ssh").expanduser()
        files = [(str(home / name), False) for name in DEFAULT_KEY_FILES]
    for path, strict in files:
        if path in abandoned:
            continue
        if path in unlocked:
            offered.pairs += unlocked[path]
            continue
        _offer_file(cfg, path, strict=strict, may_ask=may_ask, offered=offered)
    return offered


def _named_files(cfg: ConnectConfig, configured: Sequence[str]) -> list[tuple[str, bool]]:
    """The files named, each once: ``-i``'s (strict: an error if unusable), then ssh_config's."""
    seen: set[str] = set()
    files: list[tuple[str, bool]] = []
    for paths, strict in ((cfg.identity_files, True), (configured, False)):
        for name in paths:
            path = os.path.expanduser(os.fspath(name))
            if path not in seen:
                seen.add(path)
                files.append((path, strict))
    return files


def _offer_file(
    cfg: ConnectConfig, path: str, *, strict: bool, may_ask: bool, offered: OfferedKeys
) -> None:
    """One key file's pairs into ``offered``: loaded, locked, skipped, or refused (``strict``)."""
    try:
        encrypted = _is_encrypted_file(path)
        if encrypted and cfg.passphrase is None:
            if may_ask:
                public = _public_half(path)
                if public is None:
                    offered.locked.append(path)  # asked once the others are tried
                else:
                    offered.pairs += _locked_pairs(path, public)
                return
            if not strict:
                return  # a configured or default key with nothing to open it: skipped, as ssh does
        offered.pairs += asyncssh.load_keypairs(path, cfg.passphrase)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if strict:
            raise KeyLoadError(path, why, host=cfg.host, port=cfg.port) from exc
        logger.debug("key %s not offered: %s", printable(path), why)
    except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as exc:
        if strict or cfg.passphrase is not None:
            raise KeyLoadError(path, _why(exc), host=cfg.host, port=cfg.port) from exc
        logger.debug("key %s not offered: %s", printable(path), exc)


def _public_half(path: str) -> asyncssh.SSHKey | None:
    """An encrypted key file's public key, read without its passphrase; None if it cannot be.

    Its ``.pub`` beside it (ssh's first choice), else the OpenSSH format's
    own public part (asyncssh reads it there).
    """
    for candidate in (path + ".pub", path):
        try:
            return asyncssh.read_public_key(candidate)
        except (OSError, asyncssh.KeyImportError):
            continue
    return None


def _locked_pairs(path: str, public: asyncssh.SSHKey) -> list[asyncssh.SSHKeyPair]:
    """A locked file's offers: with its ``-cert.pub`` first where there is one, as asyncssh's."""
    try:
        cert = asyncssh.read_certificate(path + "-cert.pub")
    except (OSError, asyncssh.KeyImportError, ValueError):
        return [LockedKey(path, public)]
    if cert.key.public_data != public.public_data:
        return [LockedKey(path, public)]
    return [LockedKey(path, public, cert), LockedKey(path, public)]


# The files offered when none is named (asyncssh's _DEFAULT_KEY_FILES order).
DEFAULT_KEY_FILES = ("id_ed25519_sk", "id_ecdsa_sk", "id_ed448", "id_ed25519", "id_ecdsa", "id_rsa")


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


def _is_encrypted_file(path: str) -> bool:
    """Whether a key file is encrypted. Raises OSError: missing or unreadable."""
    with open(path, "rb") as file:
        return is_encrypted(file.read(64 * 1024))  # a private key is a few KiB


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
