"""Peak memory of many concurrent API transfers, in a process of their own.

The child imports sshpipe, resets its peak RSS (``VmHWM``: writing 5 to
/proc/self/clear_refs makes it the current RSS), runs the transfers on one
client and reports the peak's growth over that baseline: what the transfers
held at their worst, and nothing the test process or the interpreter's start
did. (``ru_maxrss`` would carry pytest's own peak across the fork.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.support.peers import Peer

__all__ = ["api_peak_growth"]

_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path
    import sshpipe
    import sshpipe.client.client  # asyncssh and the engine loaded before the baseline

    job = json.loads(sys.argv[1])

    def kib(field):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])

    async def main():
        config = sshpipe.TransferConfig(max_bytes_in_flight=job["budget"], verify=job["verify"])
        async with sshpipe.connect(
            job["destination"], port=job["port"], identity_files=[job["key"]],
            known_hosts=[job["known_hosts"]], ssh_config=[], compression=False,
            config=config,
        ) as client:
            move = client.get if job["direction"] == "get" else client.put
            async with asyncio.TaskGroup() as group:
                for source, dest in job["pairs"]:
                    group.create_task(move(source, dest, recursive=job["recursive"]))

    Path("/proc/self/clear_refs").write_text("5")
    before = kib("VmRSS")
    asyncio.run(main())
    print(json.dumps({"before_kib": before, "peak_kib": kib("VmHWM")}))
    """
)


def api_peak_growth(
    peer: Peer,
    direction: str,
    pairs: list[tuple[str, str]],
    budget: int,
    *,
    recursive: bool = False,
    verify: str = "none",
) -> float:
    """MiB the peak RSS of a process running ``pairs`` (source, dest) as concurrent
    ``client.get`` or ``client.put`` calls (trees, ``recursive``) on one client grew
    over its start (``verify``: ``TransferConfig.verify``)."""
    job = {
        "destination": f"{peer.user}@{peer.host}",
        "port": peer.port,
        "key": str(peer.client_key),
        "known_hosts": str(peer.known_hosts),
        "direction": direction,
        "pairs": pairs,
        "budget": budget,
        "recursive": recursive,
        "verify": verify,
    }
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(job)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return float(result["peak_kib"] - result["before_kib"]) / 1024
