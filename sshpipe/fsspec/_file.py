"""The buffered file ``SSHPipeFileSystem.open`` returns, over a :class:`sshpipe.RemoteFile`.

fsspec's ``AbstractBufferedFile`` keeps the position and the cache: with its
"readahead" cache, small sequential reads (``read_csv``'s, a line at a time)
are served from one block fetched ahead, and a block is one ``pread``: all
its READs in flight at once. Writes are buffered a block at a time and
streamed through the remote file's pipelined writer.

The remote file is opened when this file is made, not at the first read or
write: "xb" fails with ``FileExistsError`` at ``open()``, as a local file
does, and a read knows the size from the OPEN (no STAT more).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fsspec.asyn import sync
from fsspec.spec import AbstractBufferedFile

from ._oserrors import oserrors

if TYPE_CHECKING:
    from .._remotefile import RemoteFile
    from ._filesystem import SSHPipeFileSystem


class SSHPipeFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec is untyped
    """A remote file for fsspec callers (pandas, pyarrow): ``fs.open(path, "rb")``."""

    def __init__(
        self, fs: SSHPipeFileSystem, path: str, mode: str = "rb", **kwargs: Any
    ) -> None:
        self._remote: RemoteFile | None = None
        remote = sync(fs.loop, fs._open_remote, path, mode)
        self._remote = remote
        if mode == "rb":
            kwargs.setdefault("size", remote.size)
        try:
            super().__init__(fs, path, mode, **kwargs)
        except BaseException:
            sync(fs.loop, remote.aclose)
            raise
        if mode == "ab":
            self.loc = remote.tell()

    def _fetch_range(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        return bytes(sync(self.fs.loop, self._pread, start, end - start))

    async def _pread(self, start: int, n: int) -> bytes:
        assert self._remote is not None
        with oserrors():
            return await self._remote.pread(start, n)

    def _initiate_upload(self) -> None:
        """Nothing to do: the remote file was opened for writing with this one."""

    def _upload_chunk(self, final: bool = False) -> bool:
        data = self.buffer.getvalue()
        sync(self.fs.loop, self._write, data, final)
        return True

    async def _write(self, data: bytes, final: bool) -> None:
        assert self._remote is not None
        with oserrors():
            if data:
                await self._remote.write(data)
            if final:
                await self._remote.aclose()  # every WRITE acknowledged, or raised here

    def close(self) -> None:
        try:
            super().close()  # a writer's last chunk, and its close
        finally:
            remote, self._remote = self._remote, None
            if remote is not None and not remote.closed:
                sync(self.fs.loop, remote.aclose)
