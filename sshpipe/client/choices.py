"""What a ``Client`` call settles around its transfer: a tree's options, the local
size a put starts from, whether one file goes by worker processes, and the
Compression auto report added to its stats. Kept apart from ``_client`` for
size alone; each is one decision, used where the call is made.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from ..core.config import TransferConfig
from ..core.stats import ProgressCallback, TransferStats

if TYPE_CHECKING:
    from ..tree.item import TreeOptions


def tree_options(
    recursive: bool,
    preserve: bool,
    follow_symlinks: bool,
    fail_fast: bool,
    progress: ProgressCallback | None,
    patterns: bool = False,
) -> TreeOptions:
    # Only a tree comes here, its package loaded (``imported``): a single file never does.
    from ..tree.item import TreeOptions

    return TreeOptions(
        recursive=recursive,
        preserve=preserve,
        follow_symlinks=follow_symlinks,
        fail_fast=fail_fast,
        progress=progress,
        patterns=patterns,
    )


def by_workers(config: TransferConfig, route: object) -> bool:
    """Whether one file may go by worker processes (``transfer/workers``).

    Only when asked for: "auto" is one process until measured to win (README,
    "Worker processes"). Not with Compression auto's route, whose choice is
    made per file on the parent's connections.
    """
    return config.workers != "auto" and config.workers > 1 and route is None


def local_size(path: str) -> int | None:
    """The local file's size, to size the start (None: the upload will say what is wrong)."""
    try:
        return os.stat(path).st_size
    except (OSError, ValueError):
        return None


def reported(stats: TransferStats, lease: object) -> TransferStats:
    """``stats`` with what Compression auto did, when its lease was routed."""
    report = getattr(lease, "report", None)
    if report is None:
        return stats
    return dataclasses.replace(stats, compression=report())
