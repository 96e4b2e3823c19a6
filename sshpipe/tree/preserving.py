"""``put -p`` of one file: the single-file engine, then the source's mode and times.

Here, not in ``transfer``, because the source's attributes are read as a tree's
are (``scan.attrs_of``), and ``-p`` means the same for one file and a tree.
"""

from __future__ import annotations

import os

from ..core import codec
from ..core.config import TransferConfig
from ..core.stats import TransferStats
from ..core.untrusted import safe_mode
from ..local.dirfd import local_error
from ..transfer.progress import Tally
from ..transfer.upload import upload
from ..transport.pool import Lease
from ..transport.remoteplace import resolve_remote_target
from .scan import attrs_of


async def upload_preserving(
    lease: Lease,
    local: str,
    remote: str,
    config: TransferConfig,
    tally: Tally | None = None,
    *,
    overwrite: bool = True,
) -> TransferStats:
    """One file with ``-p``: the single-file engine, then the local mode (no setuid or
    setgid bit: ``safe_mode``) and times. ``overwrite``: as ``upload``'s."""
    try:
        info = os.stat(local)
    except OSError as exc:
        raise local_error(local, exc) from exc
    sftp = lease.channels[0]
    target = await resolve_remote_target(sftp, remote, os.path.basename(local))
    stats = await upload(
        lease,
        local,
        target,
        config,
        into_directory=False,
        tally=tally,
        keep_mode=False,
        overwrite=overwrite,
    )
    attrs = attrs_of(info)
    mode = safe_mode(info.st_mode, directory=False)
    # A server that takes no SETSTAT gets the file without them (said once).
    wanted = codec.Attrs(permissions=mode, atime=attrs.atime, mtime=attrs.mtime)
    await sftp.set_attrs(target, wanted)
    return stats
