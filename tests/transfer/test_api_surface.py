"""The public surface, pinned: a change here is a change for every user."""

from __future__ import annotations

import dataclasses

import pytest

import sshpipe
from sshpipe.core import config

PUBLIC = [
    "DEFAULT_REQUESTS",
    "AuthenticationError",
    "ChannelRefused",
    "Client",
    "ClosedError",
    "CompressionReport",
    "ConnectConfig",
    "ConnectDropped",
    "ConnectError",
    "ConnectTimeout",
    "ConnectionBroken",
    "FlowPhase",
    "HashUnavailable",
    "HostKey",
    "HostKeyError",
    "HostKeyMismatch",
    "IncompleteTransfer",
    "IntegrityError",
    "KeyLoadError",
    "LocalError",
    "LocalNoSpace",
    "PoolExhausted",
    "PrivateKey",
    "Progress",
    "Prompt",
    "ProtocolError",
    "RemoteError",
    "RemoteExists",
    "RemoteFile",
    "RemoteFileStats",
    "RemoteIsADirectory",
    "RemoteNotFound",
    "RemotePermissionDenied",
    "RemoteStat",
    "SSHPipeError",
    "SetupPhase",
    "Stalled",
    "TimedOut",
    "TooDeep",
    "TransferConfig",
    "TransferError",
    "TransferStats",
    "TreeFailure",
    "TreeProgress",
    "TreeStats",
    "UnknownHostKey",
    "UnsafePath",
    "UsageError",
    "Verified",
    "VerifyLevel",
    "__version__",
    "connect",
    "load_key",
]


def test_all_is_the_public_surface() -> None:
    assert sorted(sshpipe.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(sshpipe, name) is not None


def test_every_public_name_loads_on_first_use_and_star_import_gives_them_all() -> None:
    """``import sshpipe`` loads nothing (tests/layout/test_instant_commands.py); each
    name is its module's own object, found by ``dir`` and ``from sshpipe import *``."""
    namespace: dict[str, object] = {}
    exec("from sshpipe import *", namespace)
    assert sorted(name for name in namespace if name != "__builtins__") == sorted(PUBLIC)
    assert set(PUBLIC) <= set(dir(sshpipe))
    assert sshpipe.TransferConfig is config.TransferConfig
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        sshpipe.Nothing  # type: ignore[attr-defined]  # noqa: B018


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


# Every error class: (exit code, retryable). Only what another try may fix is
# retryable; a class missing here fails the test below, so a new one is decided.
ERROR_TABLE: dict[str, tuple[int, bool]] = {
    "SSHPipeError": (1, False),
    "UsageError": (2, False),
    "TransferError": (1, False),
    "LocalError": (3, False),
    "LocalNoSpace": (3, False),
    "RemoteError": (4, False),
    "RemoteNotFound": (4, False),
    "RemotePermissionDenied": (4, False),
    "RemoteIsADirectory": (4, False),
    "RemoteExists": (4, False),
    "RemoteOpenFailed": (4, False),
    "TimedOut": (1, False),
    "ConnectError": (5, True),
    "ConnectTimeout": (5, True),
    "ConnectDropped": (5, True),  # sshd's MaxStartups: busy now, tried again
    "AuthenticationError": (6, False),
    "KeyLoadError": (6, False),
    "HostKeyError": (7, False),
    "UnknownHostKey": (7, False),
    "HostKeyMismatch": (7, False),
    "ConnectionBroken": (5, True),
    "Stalled": (5, True),
    "ChannelRefused": (5, True),
    "ProtocolError": (8, False),
    "UnsafePath": (8, False),
    "TooDeep": (8, False),  # the same tree walked again goes as deep
    "ClosedError": (9, False),
    "IntegrityError": (10, True),
    "HashUnavailable": (10, False),
    "IncompleteTransfer": (1, False),  # its instance takes its failures' common code
    "PoolExhausted": (11, True),  # the client's own queue: it drains as others finish
}


def _error_classes() -> dict[str, type[sshpipe.SSHPipeError]]:
    found: dict[str, type[sshpipe.SSHPipeError]] = {}
    todo: list[type[sshpipe.SSHPipeError]] = [sshpipe.SSHPipeError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("sshpipe"):
            found[cls.__name__] = cls
        todo += cls.__subclasses__()
    return found


def test_every_error_class_has_its_decided_exit_code_and_retryability() -> None:
    classes = _error_classes()
    assert sorted(classes) == sorted(ERROR_TABLE)
    for name, cls in classes.items():
        assert (cls.exit_code, cls.retryable) == ERROR_TABLE[name], name
    for name in sshpipe.__all__:  # every public error is one of them
        value = getattr(sshpipe, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert name in ERROR_TABLE


def test_connect_errors_carry_host_and_port() -> None:
    for cls in (sshpipe.ConnectError, sshpipe.ConnectTimeout, sshpipe.AuthenticationError):
        assert (cls("m").host, cls("m").port) == (None, None)
        error = cls("m", host="h", port=2222)
        assert (error.host, error.port, str(error)) == ("h", 2222, "m")
    mismatch = sshpipe.HostKeyMismatch(
        "m", host="h", port=22, fingerprint="SHA256:x", key_type="ssh-ed25519"
    )
    assert (mismatch.host, mismatch.port, mismatch.fingerprint, mismatch.key_type) == (
        "h",
        22,
        "SHA256:x",
        "ssh-ed25519",
    )
    loading = sshpipe.KeyLoadError("/k", "gone", host="h")
    assert (loading.key, loading.host, loading.port) == ("/k", "h", None)
    assert str(loading) == "cannot load private key /k: gone"


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


def test_progress_is_frozen_and_tree_progress_is_its_old_name() -> None:
    assert sshpipe.TreeProgress is sshpipe.Progress
    report = sshpipe.Progress(
        files_done=0, files_total=1, bytes_done=0, bytes_total=10, scan_done=True, rate=0.0
    )
    assert (report.eta, report.current, report.finished) == (None, (), False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.bytes_done = 1  # type: ignore[misc]


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
    assert "hunter2" not in repr(sshpipe.ConnectConfig(host="h", passphrase="hunter2"))
    with pytest.raises(sshpipe.UsageError, match="callable"):
        sshpipe.ConnectConfig(
            host="h", known_hosts=lambda h, p, k: True, strict_host_key_checking="no"
        )
    with pytest.raises(sshpipe.UsageError, match="PrivateKey"):
        sshpipe.ConnectConfig(host="h", keys=("/a/path",))  # type: ignore[arg-type]
    with pytest.raises(sshpipe.UsageError, match="best"):
        sshpipe.TransferConfig(verify="sha256")


def test_unopened_client_repr_shows_its_state() -> None:
    client = sshpipe.connect("me@example.org", port=2222)
    assert repr(client) == "<Client example.org new connections=0 idle_channels=0 busy_channels=0>"
    assert client.connect_config.username == "me"
