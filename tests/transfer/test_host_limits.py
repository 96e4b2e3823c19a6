"""One server's connections counted over every client of the process (``transport.hostlimits``)."""

from __future__ import annotations

import gc

from sshpipe.core.config import ConnectConfig, TransferConfig
from sshpipe.transfer.channelspec import channel_spec
from sshpipe.transport.hostlimits import ConnectionBudget, HostLimits, host_limits


def test_a_client_grows_only_while_the_process_is_under_the_servers_budget() -> None:
    server = HostLimits()
    first = ConnectionBudget(server, cap=4, per_host=5)
    second = ConnectionBudget(server, cap=4, per_host=5)
    assert first.take(4) == 4
    assert second.take(4) == 1  # its first connection, whatever the budget says
    assert second.take(1) == 0  # then no growth: 5 held to the server
    first.give_back(2)
    assert second.take(4) == 2
    assert server.connections == 5
    assert repr(second) == "<ConnectionBudget held=3/4 server=5/5>"


def test_a_clients_first_connection_is_its_own_even_past_the_budget() -> None:
    server = HostLimits()
    budgets = [ConnectionBudget(server, cap=4, per_host=2) for _ in range(5)]
    assert [budget.take(3) for budget in budgets] == [2, 1, 1, 1, 1]


def test_the_clients_cap_counts_every_pool_of_it() -> None:
    # Compression auto's second pool shares the first's budget: with
    # max_connections=1 it gets nothing.
    budget = ConnectionBudget(HostLimits(), cap=1, per_host=8)
    assert budget.take(1) == 1
    assert budget.take(1) == 0


def test_a_client_dropped_unclosed_takes_its_count_with_it() -> None:
    server = HostLimits()
    leaked = ConnectionBudget(server, cap=4, per_host=4)
    leaked.take(4)
    del leaked
    gc.collect()
    assert server.connections == 0
    assert ConnectionBudget(server, cap=4, per_host=4).take(4) == 4


def test_a_refusal_teaches_every_client_the_channels_one_connection_carries() -> None:
    server = HostLimits()
    server.refused_channel(0)  # the first channel refused: says nothing of the cap
    assert server.channels is None
    for carried in (8, 5, 2, 3):  # concurrent opens refused one by one
        server.refused_channel(carried)
    assert server.channels == 2


def test_one_server_is_one_entry_per_host_port_and_user() -> None:
    one = host_limits(ConnectConfig(host="h.example", port=2222, username="u"))
    assert one is host_limits(ConnectConfig(host="h.example", port=2222, username="u"))
    assert one is not host_limits(ConnectConfig(host="h.example", port=2222, username="v"))


def test_one_client_alone_is_never_held_below_its_own_cap() -> None:
    assert channel_spec(TransferConfig()).max_connections_per_host == 8
    assert channel_spec(TransferConfig(max_connections=16)).max_connections_per_host == 16
    told = TransferConfig(max_connections=16, max_connections_per_host=2)
    assert channel_spec(told).max_connections_per_host == 2
