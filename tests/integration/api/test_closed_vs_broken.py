"""Closed is what we did, broken is what the world did: requests in flight say which.

Against the real sshd. Closing the client on purpose fails what is in flight
with ``ClosedError`` (nothing to retry); dropping a connection, as
``Client.abort()`` and the pool's stall handling do, fails it with
``ConnectionBroken``, which transfers retry on a new connection.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import sshpipe
from sshpipe.core import codec
from sshpipe.transfer.channelspec import channel_spec
from tests.support.peers import Peer

ONE_CHANNEL = channel_spec(sshpipe.TransferConfig(channels=1))


def stat(path: str) -> Any:
    return lambda rid: codec.encode_path_request(codec.FXP_STAT, rid, codec.wire(path))


async def test_closing_the_client_fails_requests_in_flight_as_closed(openssh_peer: Peer) -> None:
    client = openssh_peer.client()
    await client.open()
    async with client._pool.lease(ONE_CHANNEL) as lease:
        in_flight = lease.channels[0].request(stat(str(openssh_peer.root)))
        await client.aclose()
        with pytest.raises(sshpipe.ClosedError) as raised:
            await in_flight
    assert not isinstance(raised.value, sshpipe.ConnectionBroken)
    assert not raised.value.retryable


async def test_aborting_the_client_fails_requests_in_flight_as_broken(openssh_peer: Peer) -> None:
    async with openssh_peer.client() as client, client._pool.lease(ONE_CHANNEL) as lease:
        in_flight = lease.channels[0].request(stat(str(openssh_peer.root)))
        client.abort()
        with pytest.raises(sshpipe.ConnectionBroken) as raised:
            await in_flight
        assert raised.value.retryable


async def test_a_stalled_connection_breaks_the_other_transfers_on_it_retryably(
    openssh_peer: Peer,
) -> None:
    """One transfer's stall drops the connection; another's requests on it are retried."""
    async with (
        openssh_peer.client() as client,
        client._pool.lease(ONE_CHANNEL) as stalled,
        client._pool.lease(ONE_CHANNEL) as other,
    ):
        assert client.connections == 1  # both channels on one connection
        in_flight = other.channels[0].request(stat(str(openssh_peer.root)))
        await stalled.recover(stalled=True)  # drops the connection, prunes it
        with pytest.raises(sshpipe.ConnectionBroken) as raised:
            async with asyncio.timeout(10):
                await in_flight
        assert raised.value.retryable
        await other.recover(stalled=False)  # and the other transfer goes on
        reply = await other.channels[0].call(stat(str(openssh_peer.root)))
        assert isinstance(reply, codec.AttrsReply)
