"""sshpipe itself: the command line, and the Python API in one process."""

from __future__ import annotations

import sys

from .base import Job, SuiteClient, child_argv, package_version


def _cli(job: Job) -> list[str]:
    srv = job.srv
    # The ssh_config names the port, user, key and known_hosts, as for sftp and scp.
    remote = f"{srv.host}:"
    src, dst = str(job.src), str(job.dst)
    operands = [remote + src, dst] if job.direction == "get" else [src, remote + dst]
    return [
        sys.executable, "-m", "sshpipe", job.direction, *(["-r"] if job.tree else []), "-q",
        "-F", str(srv.ssh_config), *operands,
    ]  # fmt: skip


CLIENTS = [
    SuiteClient(
        name="sshpipe", family="sshpipe", describe="python -m sshpipe get/put (defaults)",
        argv=_cli, modules=("sshpipe",), version=package_version("sshpipe"),
    ),
    SuiteClient(
        name="sshpipe-api", family="sshpipe", describe="sshpipe.connect().get/put in-process",
        argv=lambda job: child_argv("sshpipe_api_child.py", job), modules=("sshpipe",),
        version=package_version("sshpipe"),
    ),
]  # fmt: skip
