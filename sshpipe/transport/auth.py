"""The log-in's questions: passphrases, passwords, keyboard-interactive challenges.

asyncssh asks its client object (our :class:`LoginClient`, the host-key
policy's subclass) once its own credentials are spent: keys it loaded, the
agent's, a password given. We answer from what worked before on this client
(:class:`AuthMemory`), else by asking ``ConnectConfig.prompt`` (never with
``batch_mode``), as OpenSSH asks on its terminal:

- ``unlock``: an encrypted key offered by its public half (``keys.LockedKey``)
  once the server accepted it, as ssh asks (and ``public_key_auth_requested``
  for the encrypted files with no public half to offer, once the others are
  spent);
- ``password_auth_requested``: "user@host's password: ";
- ``kbdint_auth_requested`` / ``kbdint_challenge_received``: a 2FA round,
  the server's name, instructions and prompts escaped.

Each is tried ``password_prompts`` times (NumberOfPasswordPrompts). An
answer that worked is kept in memory for the client's lifetime, so the pool's
reconnects and extra connections log in without asking again; one prompt at
a time (a lock), so two connections never ask at once. An exception from the
callback ends the log-in: it is kept in ``failure`` and raised by
``open_link`` (asyncssh would only log it). Answers are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, cast

import asyncssh

from ..core.config import ConnectConfig
from ..core.errors import UsageError
from ..core.prompt import Prompt, PromptCallback, shown
from ..core.text import printable
from .authmemory import AuthMemory as AuthMemory
from .hostkeys import HostKeyPolicy
from .keys import unlock_key

logger = logging.getLogger("sshpipe.ssh")


def can_prompt(cfg: ConnectConfig) -> bool:
    """Whether anything may be asked on this connection."""
    return cfg.prompt is not None and not cfg.batch_mode


def why_no_prompt(cfg: ConnectConfig) -> str:
    """What the AuthenticationError adds when no question could be asked."""
    if cfg.batch_mode:
        return " (BatchMode: no prompts)"
    if cfg.prompt is None and cfg.password is None:
        return " (no prompts: no terminal, or no prompt callback)"
    return ""


async def ask(callback: PromptCallback, prompt: Prompt) -> str | None:
    """The callback's answer: a coroutine function awaited on the loop, a plain
    function run in a worker thread (it may block on a terminal).

    Raises:
        UsageError: it returned neither a str nor None.
    """
    call = getattr(callback, "__call__", None)  # noqa: B004 - a callable object's method
    if inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(call):
        result: Any = callback(prompt)
    else:
        result = await asyncio.to_thread(callback, prompt)
    if inspect.isawaitable(result):
        result = await result
    if result is not None and not isinstance(result, str):
        raise UsageError(f"the prompt callback returned {type(result).__name__}, not str or None")
    return result


class Deadline:
    """``connect_timeout`` for what the network does, stopped while a person answers.

    asyncssh's own connect_timeout counts the whole log-in, prompts included:
    a password typed in 31 s, or a 2FA code fetched from a phone, would time
    out. Our ``asyncio.timeout`` around the connect is moved instead: put off
    at each prompt, and given back the time it had left after it.
    """

    def __init__(self, scope: asyncio.Timeout | None = None) -> None:
        self._scope = scope
        self._left: float | None = None

    def pause(self) -> None:
        when = self._scope.when() if self._scope is not None else None
        if self._scope is not None and when is not None:
            self._left = max(0.0, when - asyncio.get_running_loop().time())
            self._scope.reschedule(None)

    def resume(self) -> None:
        if self._scope is not None and self._left is not None:
            self._scope.reschedule(asyncio.get_running_loop().time() + self._left)
            self._left = None


class LoginClient(HostKeyPolicy):
    """The host-key policy, answering the log-in's questions too (see the module).

    Args:
        strict: the StrictHostKeyChecking in force (given, else ssh_config's).
        locked: the encrypted key files with no public half, to ask passphrases
            for once the keys offered are spent, in order.
        tried_password: the password asyncssh sends first by itself (given,
            or remembered), counted as tried.
        username: the login name, for the password prompt.
    """

    def __init__(
        self,
        cfg: ConnectConfig,
        memory: AuthMemory,
        known_hosts: list[Path],
        *,
        strict: str,
        locked: list[str],
        tried_password: str | None,
        username: str = "",
    ) -> None:
        check = cfg.known_hosts if callable(cfg.known_hosts) else None
        super().__init__(strict, known_hosts, host=cfg.host, check=check)
        self.cfg = cfg
        self.memory = memory
        self.failure: BaseException | None = None  # the callback's error, raised by open_link
        self.username = username
        self.deadline = Deadline()  # open_link's, once it has one
        self._locked = list(locked)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._passwords_tried: list[str] = [] if tried_password is None else [tried_password]
        self._password_prompts = 0
        self._kbdint_rounds = 0
        self._replayed: set[tuple[str, str]] = set()
        self._given_by_kbdint = False
        # The method of the last answer sent and what it was: kept at auth_completed.
        self._last: tuple[str, Any] = ("", None)

    def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
        super().connection_made(conn)
        self._conn = conn

    def service_accepted(self, rtt: float) -> None:
        """The SERVICE_REQUEST's round trip (``asyncssh_patches``)."""
        self.memory.round_trip(rtt)

    def auth_completed(self) -> None:
        super().auth_completed()
        method, value = self._last
        if method == "password":
            self.memory.password = value
        elif method == "kbdint":
            self.memory.answers.update(value)

    async def _ask(self, prompt: Prompt) -> str | None:
        assert self.cfg.prompt is not None
        try:
            return await ask(self.cfg.prompt, prompt)
        except Exception as exc:  # the application's code: the log-in ends with its error
            self.failure = exc
            if self._conn is not None:
                self._conn.abort()
            return None

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """One prompt at a time across the client's connections, and the
        deadline stopped meanwhile: a person's time is not the network's
        (waiting for another connection's prompt included)."""
        self.deadline.pause()
        try:
            async with self.memory.lock:
                yield
        finally:
            self.deadline.resume()

    async def public_key_auth_requested(self) -> list[asyncssh.SSHKeyPair] | None:
        while self._locked:
            pairs = await self.unlock(self._locked.pop(0))
            if pairs:
                return pairs
        return None

    async def unlock(self, path: str) -> list[asyncssh.SSHKeyPair] | None:
        """The key pairs of an encrypted file: opened earlier on this client, or now
        with a passphrase asked (``password_prompts`` tries); None if not opened."""
        pairs = self.memory.unlocked.get(path)
        if pairs is None and can_prompt(self.cfg) and path not in self.memory.abandoned:
            pairs = await self._unlock(path)
        if pairs:
            self._last = ("publickey", None)
        return pairs

    async def _unlock(self, path: str) -> list[asyncssh.SSHKeyPair] | None:
        async with self._turn():
            if path in self.memory.unlocked:  # another connection asked meanwhile
                return self.memory.unlocked[path]
            for attempt in range(1, self.cfg.password_prompts + 1):
                answer = await self._ask(
                    Prompt(
                        kind="passphrase",
                        text=(
                            f"Enter passphrase for key '{printable(path)}': "
                            if attempt == 1  # then OpenSSH's retry wording
                            else f"Bad passphrase, try again for {printable(path)}: "
                        ),
                        echo=False,
                        host=self.cfg.host,
                        key_path=path,
                        attempt=attempt,
                    )
                )
                if not answer:  # none, or empty: OpenSSH skips the key
                    break
                pairs = await asyncio.to_thread(unlock_key, path, answer)
                if pairs is not None:
                    self.memory.unlocked[path] = pairs
                    return pairs
                logger.debug("%s: wrong passphrase for %s", self.cfg.host, printable(path))
            self.memory.abandoned.add(path)
            return None

    async def password_auth_requested(self) -> str | None:
        async with self._turn():
            known = self.memory.password
            if known is not None and known not in self._passwords_tried:
                # Another connection's prompt found it meanwhile.
                self._passwords_tried.append(known)
                self._last = ("password", known)
                return known
            if not can_prompt(self.cfg) or self._password_prompts >= self.cfg.password_prompts:
                return None
            self._password_prompts += 1
            answer = await self._ask(
                Prompt(
                    kind="password",
                    text=f"{printable(self.username)}@{printable(self.cfg.host)}'s password: ",
                    echo=False,
                    host=self.cfg.host,
                    attempt=len(self._passwords_tried) + 1,
                )
            )
        if answer is not None:
            self._passwords_tried.append(answer)
            self._last = ("password", answer)
        return answer

    def kbdint_auth_requested(self) -> str | None:
        if not can_prompt(self.cfg) and not self.memory.answers:
            # asyncssh's own: a given password answers a lone "Password:" challenge.
            return cast("str | None", NotImplemented)
        self._kbdint_rounds += 1
        if self._kbdint_rounds > self.cfg.password_prompts:
            return None
        return ""  # the server picks the submethods

    async def kbdint_challenge_received(
        self, name: str, instructions: str, lang: str, prompts: Sequence[tuple[str, bool]]
    ) -> list[str] | None:
        answers: list[str] = []
        worked: dict[tuple[str, str], str] = {}
        given = self.cfg.password if self.cfg.password is not None else self.memory.password
        for index, (text, echo) in enumerate(prompts):
            key = (name, text)
            answer: str | None = None
            if key in self.memory.answers and key not in self._replayed:
                self._replayed.add(key)
                answer = self.memory.answers[key]
            elif (
                given is not None
                and len(prompts) == 1
                and "password" in text.lower()
                and not self._given_by_kbdint
            ):
                # As asyncssh does with a password given: once, to a lone
                # "Password:" challenge (PAM's), before the password method.
                self._given_by_kbdint = True
                answer = given
            elif can_prompt(self.cfg):
                async with self._turn():
                    answer = await self._ask(
                        Prompt(
                            kind="challenge",
                            text=shown(text),
                            echo=echo,
                            host=self.cfg.host,
                            name=shown(name),
                            instructions=shown(instructions),
                            first=index == 0,
                            attempt=self._kbdint_rounds,
                        )
                    )
            if answer is None:
                return None
            answers.append(answer)
            worked[key] = answer
        self._last = ("kbdint", worked)
        return answers
