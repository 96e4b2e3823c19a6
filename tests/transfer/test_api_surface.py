"""The public surface, pinned: a change here is a change for every user."""

from __future__ import annotations

import dataclasses

import pytest

import sshpipe

PUBLIC = [
    "DEFAULT_REQUESTS",
    "AuthenticationError",
    "ChannelRefused",
    "Client",
    "ClosedError",
    "ConnectConfig",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionBroken",
    "HostKeyError",
    "HostKeyMismatch",
    "IncompleteTransfer",
    "IntegrityError",
    "LocalError",
    "LocalNoSpace",
    "PoolExhausted",
    "ProtocolError",
    "RemoteError",
    "RemoteIsADirectory",
    "RemoteNotFound",
    "RemotePermissionDenied",
    "SSHPipeError",
    "SetupPhase",
    "Stalled",
    "TimedOut",
    "TransferConfig",
    "TransferError",
    "TransferStats",
    "TreeFailure",
    "TreeProgress",
    "TreeStats",
    "UnknownHostKey",
    "UnsafePath",
    "UsageError",
    "__version__",
    "connect",
]


def test_all_is_the_public_surface() -> None:
    assert sorted(sshpipe.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(sshpipe, name) is not None


def test_errors_say_whether_to_retry_and_how_to_exit() -> None:
    assert sshpipe.ConnectionBroken.retryable and sshpipe.ConnectError.retryable
    assert not sshpipe.AuthenticationError.retryable
    assert not sshpipe.HostKeyMismatch.retryable
    assert not sshpipe.RemoteNotFound("p", "r").retryable
    codes = {
        cls.exit_code
        for cls in (
            sshpipe.UsageError,
            sshpipe.LocalError,
            sshpipe.RemoteError,
            sshpipe.ConnectError,
            sshpipe.AuthenticationError,
            sshpipe.HostKeyError,
            sshpipe.ProtocolError,
        )
    }
    assert len(codes) == 7  # one distinct exit code per cause


def test_every_deadline_is_one_catchable_class_with_its_own_exit_code() -> None:
    for timeout, parent in (
        (sshpipe.ConnectTimeout, sshpipe.ConnectError),
        (sshpipe.Stalled, sshpipe.ConnectionBroken),
    ):
        assert issubclass(timeout, sshpipe.TimedOut) and issubclass(timeout, parent)
        assert timeout.retryable and timeout.exit_code == parent.exit_code == 5
        # Not the builtin: sshpipe catches TimeoutError around asyncio.timeout.
        assert not issubclass(timeout, TimeoutError)
    assert issubclass(sshpipe.ChannelRefused, sshpipe.ConnectionBroken)
    assert not issubclass(sshpipe.ChannelRefused, sshpipe.TimedOut)
    # The client's own queue, not the network: a code of its own, worth a retry later.
    assert issubclass(sshpipe.PoolExhausted, sshpipe.TimedOut)
    assert not issubclass(sshpipe.PoolExhausted, sshpipe.ConnectionBroken | sshpipe.ConnectError)
    assert sshpipe.PoolExhausted.retryable and sshpipe.PoolExhausted.exit_code == 11


def test_configs_are_frozen_and_validated() -> None:
    config = sshpipe.TransferConfig()
    assert config.requests == sshpipe.DEFAULT_REQUESTS == 128
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.requests = 1  # type: ignore[misc]
    for bad in (
        {"requests": 0},
        {"block_size": -1},
        {"channels": 0},
        {"requests": True},
        {"queue_timeout": 0},
    ):
        with pytest.raises(sshpipe.UsageError):
            sshpipe.TransferConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(sshpipe.UsageError, match="none"):
        sshpipe.ConnectConfig(host="h", ciphers=("none",))
    with pytest.raises(sshpipe.UsageError, match="StrictHostKeyChecking"):
        sshpipe.ConnectConfig(host="h", strict_host_key_checking="maybe")  # type: ignore[arg-type]
    assert "hunter2" not in repr(sshpipe.ConnectConfig(host="h", password="hunter2"))


def test_unopened_client_repr_shows_its_state() -> None:
    client = sshpipe.connect("me@example.org", port=2222)
    assert repr(client) == "<Client example.org new connections=0 idle_channels=0 busy_channels=0>"
    assert client.connect_config.username == "me"
