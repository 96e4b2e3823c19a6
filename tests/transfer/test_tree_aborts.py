"""Which failures stop a whole tree (every other entry would meet them), which are one entry's."""

from __future__ import annotations

import pytest

from sshpipe.core.errors import (
    AuthenticationError,
    ConnectError,
    ConnectionBroken,
    ConnectTimeout,
    HostKeyError,
    HostKeyMismatch,
    KeyLoadError,
    LocalError,
    LocalNoSpace,
    RemoteNotFound,
    RemotePermissionDenied,
    SSHPipeError,
    Stalled,
    UnknownHostKey,
    UnsafePath,
)
from sshpipe.tree.item import aborts_tree

EVERY_ENTRY = [
    HostKeyMismatch("host key for h has changed"),
    UnknownHostKey("host key for h is not known"),
    HostKeyError("refused by the known_hosts callable"),
    AuthenticationError("h:22: authentication failed"),
    KeyLoadError("/k", "cannot decrypt it"),
    ConnectError("h:22: connection refused"),
    ConnectTimeout("h:22: timed out after 30 s"),
    ConnectionBroken("gave up reconnecting: h:22: connection refused"),
    Stalled("no reply for 60 s"),
    LocalNoSpace("/d/f", "No space left on device"),
]
ONE_ENTRY = [
    RemoteNotFound("/r/f", "No such file"),
    RemotePermissionDenied("/r/f", "Permission denied"),
    LocalError("/d/f", "Permission denied"),
    UnsafePath("/r", "../x"),
]


@pytest.mark.parametrize("error", EVERY_ENTRY, ids=lambda e: type(e).__name__)
def test_what_every_entry_would_meet_stops_the_tree(error: SSHPipeError) -> None:
    assert aborts_tree(error)


@pytest.mark.parametrize("error", ONE_ENTRY, ids=lambda e: type(e).__name__)
def test_what_is_one_entrys_own_is_listed_and_the_rest_go_on(error: SSHPipeError) -> None:
    assert not aborts_tree(error)
