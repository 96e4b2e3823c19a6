"""A server that takes the TCP connection and never speaks SSH: a ConnectTimeout, by class."""

from __future__ import annotations

import asyncio
import time

import pytest

import sshpipe


async def test_a_silent_server_times_the_connect_out_as_connect_timeout() -> None:
    held: list[asyncio.StreamWriter] = []

    async def accept_and_say_nothing(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept_and_say_nothing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    started = time.monotonic()
    try:
        client = sshpipe.connect(
            "nobody@127.0.0.1", port=port, ssh_config=[], known_hosts=[], connect_timeout=0.5
        )
        with pytest.raises(sshpipe.ConnectTimeout) as raised:
            await client.open()
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()
    assert time.monotonic() - started < 10  # the deadline, not some later failure
    assert isinstance(raised.value, sshpipe.TimedOut) and raised.value.retryable
    assert raised.value.exit_code == sshpipe.ConnectError.exit_code
