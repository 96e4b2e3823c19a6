"""The asyncio driver: keep requests in flight, feed replies to the pure core.

- ``_lanes.py``: the channels of one transfer (lanes), the shared pump state,
  the flow controller's grower that adds channels while data flows;
- ``_download.py``: ``download`` and ``stream`` (READs, reassembly by offset);
- ``_upload.py``: ``upload`` and ``upload_stream`` (temp name, rename), driving
  ``_writepump.py`` (WRITEs in flight) and, with resume, ``_putresume.py``.
"""

from __future__ import annotations

from ._download import download, stream
from ._upload import upload, upload_stream

__all__ = ["download", "stream", "upload", "upload_stream"]
