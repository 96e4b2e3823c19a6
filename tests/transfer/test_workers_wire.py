"""Errors and messages crossing from a worker process to its parent (``workers.wire``)."""

from __future__ import annotations

import pickle

import pytest

import sshpipe
from sshpipe.core.errors import IncompleteTransfer
from sshpipe.core.flight import SharedBytes
from sshpipe.core.readplan import Range
from sshpipe.workers import wire


@pytest.mark.parametrize(
    "error",
    [
        sshpipe.RemoteNotFound("/srv/a\x1bb", "no such file", offset=4096, status=2),
        sshpipe.LocalError("/home/u/f", "No space left on device"),
        sshpipe.IntegrityError("/srv/f", "changed size while it was copied"),
        sshpipe.ConnectionBroken("connection lost"),
        sshpipe.HostKeyMismatch("host key changed", host="h", port=22),
        sshpipe.UsageError("bad"),
    ],
)
def test_an_error_crosses_as_itself(error: sshpipe.SSHPipeError) -> None:
    crossed = pickle.loads(pickle.dumps(wire.failed(error)))
    again = wire.rebuilt(crossed)
    assert type(again) is type(error)
    assert str(again) == str(error)  # escaped for the terminal as the original is
    assert again.exit_code == error.exit_code and again.retryable == error.retryable
    for key in ("path", "reason", "offset", "status", "host", "port"):
        assert getattr(again, key, None) == getattr(error, key, None)


def test_a_bug_in_a_worker_is_one_line_exit_1() -> None:
    again = wire.rebuilt(wire.failed(KeyError("x")))
    assert type(again) is sshpipe.SSHPipeError
    assert str(again) == "worker process: KeyError: 'x'" and again.exit_code == 1


def test_an_unknown_class_name_is_the_base_class() -> None:
    again = wire.rebuilt(wire.Failed("NotOurs", "m", {}))
    assert type(again) is sshpipe.SSHPipeError and str(again) == "m"


def test_an_exit_code_set_per_instance_crosses() -> None:
    error = IncompleteTransfer.__new__(IncompleteTransfer)
    Exception.__init__(error, "2 of 3 entries failed")
    error.exit_code = 4
    assert wire.rebuilt(wire.failed(error)).exit_code == 4


def test_frames_round_trip_and_refuse_a_huge_length() -> None:
    job = wire.Job(
        direction="get", remote="/r", shown="/r", local="/l", size=5, ranges=(Range(0, 5),)
    )
    data = wire.frame(job)
    assert wire.length_of(data[: wire.HEADER]) == len(data) - wire.HEADER
    assert pickle.loads(data[wire.HEADER :]) == job
    with pytest.raises(ValueError):
        wire.length_of((wire.MAX_FRAME + 1).to_bytes(4, "big"))


def test_a_worker_gets_its_share_of_the_limit_and_of_the_byte_budget_and_asks_nobody() -> None:
    from sshpipe.client.engine import ChannelPool, channel_spec
    from sshpipe.workers.common import hello_for

    def ask(prompt: sshpipe.Prompt) -> str:
        return "typed"

    client = sshpipe.connect("u@h", prompt=ask, known_hosts=["/k"], strict_host_key_checking="yes")
    config = sshpipe.TransferConfig(
        workers=3, rate_limit=1000, max_bytes_in_flight=30 * 2**20, min_bytes_in_flight=16 * 2**20
    )
    pool = ChannelPool(
        client.connect_config,
        channel_spec(config),
        client_bytes=SharedBytes(config.max_bytes_in_flight),
    )
    pool.auth_memory.password = "learnt"
    hello = hello_for(client.connect_config, pool, config, 3)
    assert hello.config.rate_limit == 334 and hello.config.workers == 1
    # Their memory together is the transfer's budget, as one process's would be.
    assert hello.config.max_bytes_in_flight == hello.config.min_bytes_in_flight == 10 * 2**20
    assert hello.connect.prompt is None and hello.connect.password == "learnt"
    # The host key is checked as the parent checks it: the same files, the same policy.
    assert hello.connect.known_hosts == ("/k",)
    assert hello.connect.strict_host_key_checking == "yes"


def test_a_known_hosts_callable_cannot_cross_to_a_worker() -> None:
    from sshpipe.client.engine import ChannelPool, channel_spec
    from sshpipe.workers.common import hello_for

    client = sshpipe.connect("u@h", known_hosts=lambda host, port, key: True)
    pool = ChannelPool(
        client.connect_config,
        channel_spec(client.config),
        client_bytes=SharedBytes(client.config.max_bytes_in_flight),
    )
    with pytest.raises(sshpipe.UsageError, match="cannot be handed to a worker process"):
        hello_for(client.connect_config, pool, sshpipe.TransferConfig(workers=2), 2)


@pytest.mark.parametrize("bad", [0, -1, 17, True, "many", 2.0])
def test_workers_is_auto_or_a_count(bad: object) -> None:
    with pytest.raises(sshpipe.UsageError, match="workers"):
        sshpipe.TransferConfig(workers=bad)  # type: ignore[arg-type]
    assert sshpipe.TransferConfig().workers == "auto"
    assert sshpipe.TransferConfig(workers=16).workers == 16
