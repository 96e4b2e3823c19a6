"""lftp over sftp://, its ssh the system's OpenSSH with the suite's ssh_config:
``pget -n 4`` for files, ``mirror --parallel`` for trees."""

from __future__ import annotations

import shutil

from .base import Job, SuiteClient, exe_version

PGET_STREAMS = 4
MIRROR_PARALLEL = 8


def _quote(text: str) -> str:
    if '"' in text or "'" in text or "\\" in text:
        raise SystemExit(f"unsupported character in path: {text!r}")
    return f'"{text}"'


def _argv(job: Job) -> list[str]:
    srv = job.srv
    src, dst = _quote(str(job.src)), _quote(str(job.dst))
    if job.tree:
        reverse = "" if job.direction == "get" else "-R "
        verb = f"mirror {reverse}--parallel={MIRROR_PARALLEL} {src} {dst}"
    elif job.direction == "get":
        verb = f"pget -n {PGET_STREAMS} {src} -o {dst}"
    else:
        verb = f"put {src} -o {dst}"
    script = "; ".join([
        # Fail instead of retrying for minutes; the key, not a password, logs in.
        "set cmd:fail-exit yes", "set net:max-retries 1", "set net:timeout 30",
        f"set sftp:connect-program 'ssh -a -x -F {srv.ssh_config}'",
        f"open -u {srv.user}, -p {srv.port} sftp://{srv.host}",
        verb,
    ])  # fmt: skip
    return [shutil.which("lftp") or "lftp", "-c", script]


CLIENTS = [
    SuiteClient(
        name="lftp", family="lftp",
        describe=f"lftp sftp://, pget -n {PGET_STREAMS}, mirror --parallel={MIRROR_PARALLEL}",
        argv=_argv, executables=("lftp",), version=exe_version(["lftp", "--version"]),
    ),
]  # fmt: skip
