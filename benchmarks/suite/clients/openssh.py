"""OpenSSH's own clients: sftp (defaults, and tuned), scp, and rsync over ssh."""

from __future__ import annotations

import shutil

from _bench_common import Client, Paths, scp_argv, sftp_argv
from _wan_link import SFTP_TUNED_ARGS

from .base import Job, SuiteClient, exe_version

# The tuned sftp: bench_wan's more requests and bigger blocks, and the
# cipher that costs least CPU on AES-NI machines.
SFTP_TUNED = (*SFTP_TUNED_ARGS, "-c", "aes128-gcm@openssh.com")
_SFTP_DEFAULT = Client("sftp-default", "sftp")
_SFTP_TUNED = Client("sftp-tuned", "sftp", SFTP_TUNED)
_SCP = Client("scp", "scp")


def _paths(job: Job) -> Paths:
    return Paths(source=job.src, get_output=job.dst, put_output=job.dst, logs=job.work)


def _sftp(client: Client) -> SuiteClient:
    return SuiteClient(
        name=client.name, family="openssh",
        describe=f"OpenSSH sftp {' '.join(client.extra_args) or '(defaults)'}",
        argv=lambda job: sftp_argv(client, job.direction, job.srv, _paths(job), recursive=job.tree),
        executables=("sftp",), version=exe_version(["ssh", "-V"]),
    )  # fmt: skip


def _rsync_argv(job: Job) -> list[str]:
    srv = job.srv
    # The trailing slash copies the tree's contents into the new name dst.
    slash = "/" if job.tree else ""
    remote = f"{srv.destination()}:"
    src, dst = f"{job.src}{slash}", f"{job.dst}{slash}"
    operands = [remote + src, dst] if job.direction == "get" else [src, remote + dst]
    ssh = f"ssh -F {srv.ssh_config} -p {srv.port}"
    rsync = shutil.which("rsync") or "rsync"
    return [rsync, "-a" if job.tree else "-t", "-e", ssh, *operands]


CLIENTS = [
    _sftp(_SFTP_DEFAULT),
    _sftp(_SFTP_TUNED),
    SuiteClient(
        name="scp", family="openssh", describe="OpenSSH scp (SFTP protocol, its default)",
        argv=lambda job: scp_argv(_SCP, job.direction, job.srv, job.src, job.dst,
                                  recursive=job.tree),
        executables=("scp",), version=exe_version(["ssh", "-V"]),
    ),
    SuiteClient(
        name="rsync", family="rsync", describe="rsync -e ssh (rsync at both ends)",
        argv=_rsync_argv, executables=("rsync",), version=exe_version(["rsync", "--version"]),
    ),
]  # fmt: skip
