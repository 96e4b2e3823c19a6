"""Keys as objects: a private key to log in with, a server's host key to judge.

Both are small public values that name no asyncssh type, so they load with
``import sshpipe`` at no cost; ``sshpipe.load_key`` (``transport/keys.py``)
makes a :class:`PrivateKey`, and a ``known_hosts`` callable is handed a
:class:`HostKey`::

    key = sshpipe.load_key("~/.ssh/id_ed25519", passphrase=secret)

    def trusted(host: str, port: int, key: sshpipe.HostKey) -> bool:
        return key.fingerprint == "SHA256:..."

    async with sshpipe.connect("me@example.org", keys=[key], known_hosts=trusted) as sp:
        ...
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class HostKey:
    """A server's host key, as OpenSSH shows it.

    Attributes:
        type: its algorithm, e.g. "ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa".
        fingerprint: its SHA-256 as ``ssh-keygen -l`` prints it ("SHA256:...").
        openssh: the public key line a known_hosts entry holds after the host
            ("ssh-ed25519 AAAA...").
    """

    type: str
    fingerprint: str
    openssh: str


# known_hosts as a callable: (host, port, key) -> True trusts the key for this
# connection, False refuses it (HostKeyError). It is called for every connection.
HostKeyCheck = Callable[[str, int, HostKey], bool]


@dataclass(frozen=True, slots=True)
class PrivateKey:
    """A private key loaded in memory (:func:`sshpipe.load_key`), to log in with.

    Its ``repr`` shows what it is, never the secret; two are equal when they
    are the same key (same type and fingerprint), wherever they came from.

    Attributes:
        type: its algorithm, e.g. "ssh-ed25519".
        fingerprint: its public half's SHA-256 ("SHA256:...").
        source: the file it came from, or "(bytes)".
    """

    type: str
    fingerprint: str
    source: str = field(compare=False)
    # The transport's own key object, opaque here (asyncssh is imported only
    # under transport/): never compared, never shown.
    _key: object = field(repr=False, compare=False)
