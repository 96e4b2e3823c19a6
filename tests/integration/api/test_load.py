"""Load: 64 transfers at once over one client, plus 8 clients of their own, all verified.

In a child process, so its peak RSS is its own: memory must stay bounded by
what the transfers may hold (each file here is smaller than one transfer's
budget, so that is what they hold at most), not grow with the count.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.peers import Peer

SCRIPT = textwrap.dedent(
    """
    import asyncio, hashlib, json, os, resource, sys
    import sshpipe

    host, port, user, key, known, root, local = sys.argv[1:8]
    SIZE = 4 * 1024 * 1024
    files = {}
    for i in range(72):
        data = os.urandom(SIZE)
        files[i] = hashlib.sha256(data).hexdigest()
        with open(os.path.join(root, f"src-{i}.bin"), "wb") as out:
            out.write(data)

    def client():
        return sshpipe.connect(f"{user}@{host}", port=int(port), identity_files=[key],
                               known_hosts=[known], ssh_config=[])

    async def one(sp, i, direction):
        got = os.path.join(local, f"got-{i}.bin")
        if direction == "get":
            await sp.get(os.path.join(root, f"src-{i}.bin"), got)
            path = got
        else:
            await sp.put(os.path.join(root, f"src-{i}.bin"), os.path.join(root, f"up-{i}.bin"))
            path = os.path.join(root, f"up-{i}.bin")
        with open(path, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == files[i], (i, direction)

    async def separate(i):
        async with client() as sp:
            await one(sp, i, "get" if i % 2 else "put")

    async def main():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        async with client() as shared:
            await asyncio.gather(
                *(one(shared, i, "get" if i % 2 else "put") for i in range(64)),
                *(separate(i) for i in range(64, 72)),
            )
            connections = shared.connections
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"before_kib": before, "peak_kib": peak, "connections": connections}))

    asyncio.run(main())
    """
)


def test_64_concurrent_transfers_and_8_clients_are_all_verified(
    openssh_peer: Peer, tmp_path: Path
) -> None:
    local = tmp_path / "local"
    local.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            openssh_peer.host,
            str(openssh_peer.port),
            openssh_peer.user,
            str(openssh_peer.client_key),
            str(openssh_peer.known_hosts),
            str(openssh_peer.root),
            str(local),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # 72 files of 4 MiB went through; what the process held at its peak stays
    # far below their sum (288 MiB) plus the 72 MiB of source data made first.
    grew_mib = (result["peak_kib"] - result["before_kib"]) / 1024
    assert grew_mib < 200, result
    assert 1 <= result["connections"] <= 4, result  # the shared client's pool, capped
    assert sorted(p.name for p in local.iterdir()) == sorted(
        f"got-{i}.bin" for i in range(72) if i % 2
    )
