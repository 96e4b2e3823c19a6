"""What a client's transfers run on, in one module: imported on a client's first use.

``Client._ready`` imports it in a worker thread: asyncssh and cryptography
with it take 0.3 s and more, which on the caller's event loop would stall
every other task for as long. The command line imports it before its loop
starts (one transfer per process: no thread needed).
"""

from __future__ import annotations

from ..durability import ledger
from ..local.source import is_pipe
from ..transfer.channelspec import channel_spec
from ..transfer.download import download
from ..transfer.inorder import in_order, refused_out_of_order
from ..transfer.lanes import channels_at_start
from ..transfer.progress import stream_reporting, tracked
from ..transfer.stream import stream
from ..transfer.upload import upload, upload_stream
from ..transport import remoteops
from ..transport.compressroute import CompressRoute, RoutedPool
from ..transport.pool import ChannelPool
from ..transport.remotefs import glob as remote_glob

__all__ = [
    "ChannelPool",
    "CompressRoute",
    "RoutedPool",
    "channel_spec",
    "channels_at_start",
    "download",
    "in_order",
    "is_pipe",
    "ledger",
    "refused_out_of_order",
    "remote_glob",
    "remoteops",
    "stream",
    "stream_reporting",
    "tracked",
    "upload",
    "upload_stream",
]
