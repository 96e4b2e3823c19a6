"""asyncssh's ssh_config reader taught sshpipe's own word: ``Compression auto``.

sshpipe reads Compression itself (``sshoptions.compression_mode``) and always
hands asyncssh its ``compression_algs``, so asyncssh's reading of it is never
used; but its parser takes only yes/no, and an ssh_config saying
``Compression auto`` (which the README has users write in a Host block only
sshpipe reads) failed as "Invalid Compression boolean value: auto". The
patch lets ``auto`` through as asyncssh's "no" (the first value still wins,
as for every option) and leaves any other value to asyncssh's own check.
Gated like the others: on the releases read for it, and on the handler's shape.
"""

from __future__ import annotations

from asyncssh.config import SSHClientConfig, SSHConfig

__all__ = ["COMPRESSION_AUTO", "accept_compression_auto"]

COMPRESSION_AUTO = "compression_auto"


def _set_compression(config: SSHConfig, option: str, args: list[str]) -> None:
    if args and args[0].lower() == "auto":
        args[0] = "no"  # sshpipe's own reading decides; asyncssh's is unused
    SSHConfig._set_bool(config, option, args)


_PATCHED = ("Compression", _set_compression)


def accept_compression_auto(checked: bool) -> bool:
    """Patch the reader (once, for the process); False where it stays stock.

    ``checked``: the installed asyncssh is a release the patches were read for.
    """
    handlers = getattr(SSHClientConfig, "_handlers", None)
    if not isinstance(handlers, dict):
        return False
    entry = handlers.get("compression")
    if entry == _PATCHED:
        return True
    if not checked or entry != ("Compression", SSHConfig._set_bool):
        return False
    handlers["compression"] = _PATCHED
    return True
