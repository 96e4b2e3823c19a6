"""fsspec's own abstract test suites (``fsspec.tests.abstract``), unmodified, against sshd.

The copy, get, put, pipe and open suites run as fsspec ships them: only the
fixtures they ask an implementation for (``fs``, ``fs_join``, ``fs_path``)
are ours. fsspec's move "suite" (``fsspec/tests/abstract/mv.py``) is two
module-level tests bound to the local filesystem, with nothing to subclass;
its two cases run against ``sshpipe://`` in test_fsspec.py instead.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from pathlib import Path

import pytest
from fsspec.tests import abstract

from sshpipe.fsspec import SSHPipeFileSystem
from sshpipe.testing.sshd import SSHServerInfo
from tests.support.fsspecfs import sshpipe_fs

__all__ = ["sshpipe_fs"]  # the session's filesystem, a fixture


class SSHPipeFixtures(abstract.AbstractFixtures):  # type: ignore[misc]
    @pytest.fixture
    def fs(self, sshpipe_fs: SSHPipeFileSystem) -> SSHPipeFileSystem:
        return sshpipe_fs

    @pytest.fixture
    def fs_join(self) -> Callable[..., str]:
        return posixpath.join

    @pytest.fixture
    def fs_path(self, openssh: SSHServerInfo, tmp_path: Path) -> str:
        # A directory of its own per test, on the server (sshd is not chrooted).
        root = openssh.root / f"fsspec-{tmp_path.name}"
        root.mkdir()
        return str(root)


class TestCopy(SSHPipeFixtures, abstract.AbstractCopyTests):  # type: ignore[misc]
    pass


class TestGet(SSHPipeFixtures, abstract.AbstractGetTests):  # type: ignore[misc]
    pass


class TestPut(SSHPipeFixtures, abstract.AbstractPutTests):  # type: ignore[misc]
    pass


class TestPipe(SSHPipeFixtures, abstract.AbstractPipeTests):  # type: ignore[misc]
    pass


class TestOpen(SSHPipeFixtures, abstract.AbstractOpenTests):  # type: ignore[misc]
    pass
