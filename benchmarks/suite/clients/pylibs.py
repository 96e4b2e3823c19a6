"""The Python SSH libraries, each in its own child process (children/*.py):
paramiko, asyncssh, fsspec's sshfs, libssh2 (ssh2-python) and libssh (ssh-python)."""

from __future__ import annotations

from _bench_common import Paths, asyncssh_argv

from .base import Job, SuiteClient, child_argv, package_version


def _asyncssh(job: Job, max_requests: int | None) -> list[str]:
    argv = asyncssh_argv(job.direction, job.srv, _paths(job), recursive=job.tree)
    if max_requests is None:
        return argv
    # After the script (and -r): _asyncssh_client.py's option.
    at = 3 if job.tree else 2
    return [*argv[:at], "--max-requests", str(max_requests), *argv[at:]]


def _paths(job: Job) -> Paths:
    return Paths(source=job.src, get_output=job.dst, put_output=job.dst, logs=job.work)


CLIENTS = [
    SuiteClient(
        name="paramiko", family="paramiko", describe="paramiko SFTPClient.get (prefetch)/put",
        argv=lambda job: child_argv("paramiko_child.py", job), trees=(),
        modules=("paramiko",), version=package_version("paramiko"),
    ),
    SuiteClient(
        name="asyncssh", family="asyncssh", describe="asyncssh SFTPClient.get/put, defaults",
        argv=lambda job: _asyncssh(job, None), modules=("asyncssh",),
        version=package_version("asyncssh"),
    ),
    SuiteClient(
        name="asyncssh-128", family="asyncssh", describe="asyncssh get/put, max_requests=128",
        argv=lambda job: _asyncssh(job, 128), modules=("asyncssh",),
        version=package_version("asyncssh"),
    ),
    SuiteClient(
        name="sshfs", family="fsspec", describe="fsspec/sshfs SSHFileSystem.get/put",
        argv=lambda job: child_argv("sshfs_child.py", job), modules=("sshfs",),
        # fs.get(recursive=True) hands sub-directories to _get_file, which fails
        # ("... is a directory") with sshfs 2026.8 and fsspec 2026.9.
        trees=("put",), tree_note="sshfs's recursive get fails on sub-directories",
        version=package_version("sshfs", "fsspec"),
    ),
    SuiteClient(
        name="libssh2", family="libssh2",
        describe="ssh2-python, the documented read loop (2 MiB reads, ~280 in flight)",
        argv=lambda job: child_argv("libssh2_child.py", job, "read=loop"), trees=(),
        modules=("ssh2",), version=package_version("ssh2-python"),
    ),
    SuiteClient(
        name="libssh2-plain", family="libssh2", describe="ssh2-python, 30,000 B reads",
        argv=lambda job: child_argv("libssh2_child.py", job, "read=plain"), trees=(),
        modules=("ssh2",), version=package_version("ssh2-python"),
    ),
    SuiteClient(
        name="libssh", family="libssh", describe="ssh-python, plain sftp_read (1 in flight)",
        argv=lambda job: child_argv("libssh_child.py", job, "inflight=1"), trees=(),
        modules=("ssh",), version=package_version("ssh-python"),
    ),
    SuiteClient(
        name="libssh-async", family="libssh",
        describe="ssh-python, sftp_async_read, 128 in flight",
        argv=lambda job: child_argv("libssh_child.py", job, "inflight=128"), trees=(),
        modules=("ssh",), version=package_version("ssh-python"),
    ),
]  # fmt: skip
