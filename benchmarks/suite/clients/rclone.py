"""rclone's sftp backend, configured by flags alone (an on-the-fly ``:sftp:`` remote,
no config file read from $HOME)."""

from __future__ import annotations

import shutil

from .base import Job, SuiteClient, exe_version

# rclone's defaults are 64 requests a file, 4 streams only above 250 MiB, 4 files at
# once; tuned is what its docs suggest for a fast, far link.
TUNED = (
    "--sftp-concurrency", "128", "--multi-thread-streams", "8",
    "--multi-thread-cutoff", "8Mi", "--transfers", "16", "--checkers", "16",
)  # fmt: skip


def _argv(job: Job, tuned: bool) -> list[str]:
    srv = job.srv
    remote = ":sftp:"
    src, dst = str(job.src), str(job.dst)
    operands = [remote + src, dst] if job.direction == "get" else [src, remote + dst]
    return [
        shutil.which("rclone") or "rclone", "copy" if job.tree else "copyto",
        # /dev/null: no config file, and none written.
        "--config", "/dev/null", "-q",
        "--sftp-host", srv.host, "--sftp-port", str(srv.port), "--sftp-user", srv.user,
        "--sftp-key-file", str(srv.client_key), "--sftp-known-hosts-file", str(srv.known_hosts),
        *(TUNED if tuned else ()), *operands,
    ]  # fmt: skip


CLIENTS = [
    SuiteClient(
        name="rclone", family="rclone", describe="rclone sftp backend, defaults",
        argv=lambda job: _argv(job, False), executables=("rclone",),
        version=exe_version(["rclone", "version"]),
    ),
    SuiteClient(
        name="rclone-tuned", family="rclone", describe="rclone " + " ".join(TUNED),
        argv=lambda job: _argv(job, True), executables=("rclone",),
        version=exe_version(["rclone", "version"]),
    ),
]  # fmt: skip
