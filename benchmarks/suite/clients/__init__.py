"""Every benchmarked client, in the order tables list them (sshpipe and the sftp
baseline first)."""

from __future__ import annotations

from . import lftp, openssh, pylibs, rclone, sshpipe_clients
from .base import Job, SuiteClient

ALL_CLIENTS: list[SuiteClient] = [
    *sshpipe_clients.CLIENTS,
    *openssh.CLIENTS,
    *rclone.CLIENTS,
    *lftp.CLIENTS,
    *pylibs.CLIENTS,
]
BY_NAME = {client.name: client for client in ALL_CLIENTS}

__all__ = ["ALL_CLIENTS", "BY_NAME", "Job", "SuiteClient"]
