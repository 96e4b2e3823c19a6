"""One log-in at a time: a server busy now (a pre-auth drop) fails only the attempt it dropped."""

from __future__ import annotations

import asyncio

import pytest

from sshpipe.core.errors import AuthenticationError, ConnectDropped, ConnectError, ConnectTimeout
from sshpipe.transport.linkopen import LoginTurns


async def _race(turns: LoginTurns, first_error: Exception, waiters: int) -> list[object]:
    """A log-in failing with ``first_error`` while ``waiters`` callers queue behind it."""
    started = asyncio.Event()
    tried: list[int] = []

    async def first() -> None:
        async with turns.turn():
            started.set()
            await asyncio.sleep(0.01)  # the others queue meanwhile
            raise first_error

    async def waiter(n: int) -> str:
        await started.wait()
        async with turns.turn():
            tried.append(n)  # its own log-in, which works
            return "logged in"

    got = await asyncio.gather(
        first(), *(waiter(n) for n in range(waiters)), return_exceptions=True
    )
    return [*got[1:], tried]


async def test_waiters_behind_a_dropped_connection_each_try_themselves() -> None:
    # sshd's MaxStartups dropped one pre-auth connection: not the others' fault.
    *outcomes, tried = await _race(LoginTurns(), ConnectDropped("dropped before log-in"), 3)
    assert outcomes == ["logged in"] * 3
    assert tried == [0, 1, 2]


@pytest.mark.parametrize(
    "refused",
    [
        AuthenticationError("permission denied (publickey)"),
        ConnectError("connection refused"),  # nothing listens: the same for everyone now
        ConnectTimeout("timed out after 30 s"),  # one wait, not one per waiter
    ],
    ids=["credentials", "refused-port", "timeout"],
)
async def test_waiters_behind_any_other_failure_hear_it(refused: Exception) -> None:
    *outcomes, tried = await _race(LoginTurns(), refused, 3)
    assert all(outcome is refused for outcome in outcomes)
    assert tried == []


async def test_a_caller_after_a_final_failure_tries_again_itself() -> None:
    turns = LoginTurns()
    with pytest.raises(AuthenticationError):
        async with turns.turn():
            raise AuthenticationError("permission denied (publickey)")
    async with turns.turn():
        pass  # not the old failure: this caller came after it
