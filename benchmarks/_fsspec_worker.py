"""One measured read for bench_fsspec.py, in a process of its own (whole-command time).

Usage: python _fsspec_worker.py CLIENT OPERATION SPEC_JSON

CLIENT: sshpipe (``sshpipe://``), sshfs (fsspec's asyncssh-based ``ssh://``),
sftp (fsspec's paramiko ``sftp://``). OPERATION: get (a whole file to local
disk), parquet (2 columns of 10), csv (``pandas.read_csv``). What was read is
checked against SPEC's expected digest or sums; a mismatch exits 1.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from typing import Any


def filesystem(client: str, spec: dict[str, Any]) -> Any:
    if client == "sshpipe":
        from sshpipe.fsspec import SSHPipeFileSystem

        return SSHPipeFileSystem(
            spec["host"],
            port=spec["port"],
            username=spec["user"],
            identity_files=[spec["key"]],
            known_hosts=[spec["known_hosts"]],
            ssh_config=[],
        )
    if client == "sshfs":
        from sshfs import SSHFileSystem

        return SSHFileSystem(
            spec["host"],
            port=spec["port"],
            username=spec["user"],
            client_keys=[spec["key"]],
            known_hosts=spec["known_hosts"],
        )
    if client == "sftp":
        from fsspec.implementations.sftp import SFTPFileSystem

        # fsspec's sftp takes no known_hosts file: it trusts the key it is
        # shown (paramiko's AutoAddPolicy), here the loopback sshd's own.
        return SFTPFileSystem(
            spec["host"],
            port=spec["port"],
            username=spec["user"],
            key_filename=spec["key"],
            look_for_keys=False,
            allow_agent=False,
            host_key_policy="auto_add",
        )
    raise SystemExit(f"unknown client {client!r}")


def main() -> int:
    client, operation, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    fs = filesystem(client, spec)
    if operation == "get":
        out = spec["get_output"]
        fs.get(spec["get_source"], out)
        with open(out, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        os.remove(out)
        ok = digest == spec["get_sha256"]
    elif operation == "parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(spec["parquet"], columns=["c3", "c7"], filesystem=fs)
        sums = [float(table.column(c).to_numpy().sum()) for c in ("c3", "c7")]
        ok = table.num_rows == spec["parquet_rows"] and all(
            math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
            for a, b in zip(sums, spec["parquet_sums"], strict=True)
        )
    elif operation == "csv":
        import pandas as pd

        with fs.open(spec["csv"], "rb") as f:
            frame = pd.read_csv(f)
        ok = len(frame) == spec["csv_rows"] and math.isclose(
            float(frame["value"].sum()), spec["csv_sum"], rel_tol=1e-9, abs_tol=1e-6
        )
    else:
        raise SystemExit(f"unknown operation {operation!r}")
    if not ok:
        print(f"{client} {operation}: WRONG RESULT", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
