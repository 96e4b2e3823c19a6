"""Prompts of a log-in, answered by the application: ``connect(prompt=...)``.

The library never prompts on its own. Given a callback, it asks it for what
OpenSSH would ask the user on its terminal: an encrypted key's passphrase,
the password, a keyboard-interactive (2FA) challenge's answers::

    async def answer(prompt: sshpipe.Prompt) -> str | None:
        if prompt.kind == "challenge":
            return await my_ui.ask(prompt.text, secret=not prompt.echo)
        return vault.get(prompt.host)  # None: give up on this one

    async with sshpipe.connect("me@example.org", prompt=answer) as sp:
        ...

Answers that worked are kept in memory for the client's lifetime (never on
disk), so its reconnects and extra connections ask again only when the server
refuses them. The text of a challenge is the server's: it is escaped before it
reaches a :class:`Prompt`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

from .text import printable

PromptKind: TypeAlias = Literal["passphrase", "password", "challenge"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Prompt:
    """One question of a log-in, for a ``prompt`` callback to answer.

    Attributes:
        kind: "passphrase" (an encrypted private key), "password", or
            "challenge" (one prompt of a keyboard-interactive round: 2FA codes,
            PAM's password).
        text: what to show, OpenSSH's wording: "Enter passphrase for key
            '/path': ", "me@host's password: ", or the server's own prompt
            (escaped: control characters shown as ``\\xHH``).
        echo: whether the answer may be shown as it is typed (False for secrets).
        host: the host as the connection names it.
        key_path: the key file, for a passphrase.
        name, instructions: a challenge's title and instructions from the
            server (escaped; lines kept), shown before its first prompt.
        first: this prompt is the first of its challenge round (show
            ``name`` and ``instructions`` before it).
        attempt: 1 for the first try, 2 after one answer was refused, ...
    """

    kind: PromptKind
    text: str
    echo: bool
    host: str
    key_path: str | None = None
    name: str = ""
    instructions: str = ""
    first: bool = True
    attempt: int = 1


# The callback: a Prompt in, the answer out (None gives up on that key or
# method). A coroutine function runs on the loop; a plain function runs in a
# worker thread, so it may block (on a terminal, a dialog).
PromptCallback: TypeAlias = Callable[[Prompt], "str | Awaitable[str | None] | None"]


def shown(text: str) -> str:
    """A server's text escaped for a terminal, its line breaks kept."""
    return "\n".join(printable(line) for line in text.replace("\r\n", "\n").split("\n"))
