"""A resumed upload's start: the journaled ranges of its remote partial read back.

``durability.putresume`` keeps the journal (which ranges were acknowledged,
with their SHA-256) and checks the source against it; reading those ranges
from the server is a transfer of its own, through the download's read loop,
so it runs here and tells the resume what stayed intact (``UploadResume.keep``).
"""

from __future__ import annotations

import logging

from ..core import codec
from ..core.config import TransferConfig
from ..core.quirks import appendable
from ..core.readback import Entry, ReadBackCheck
from ..core.readplan import Range, ReadPlan, missing
from ..core.text import printable
from ..durability.putresume import UploadResume
from ..transport.pool import Lease
from .readpump import reading

logger = logging.getLogger("sshpipe.upload")


async def prepare_resume(
    resuming: UploadResume, lease: Lease, remote: str, config: TransferConfig
) -> None:
    """Find the journal, check the partial against it; then ``resuming.kept`` says what stays.

    Raises:
        LocalError: another copy is resuming this one (``Journal.claim``).
        IntegrityError: the source changed since the partial was made.
        ConnectionBroken: while reading back (call again after reconnecting).
    """
    found = await resuming.look(lease.channels[0], remote)
    kept: list[Range] = []
    if found is not None:
        attrs, candidates = found
        if candidates:
            kept = await read_back_kept(lease, resuming.partial, config, attrs, candidates)
        if config.sequential_writes:  # nothing may be written before the end
            kept = appendable(kept, attrs.size)
        logger.info(
            "%s: resuming, %d of %d journaled ranges intact (%d bytes)",
            printable(remote),
            len(kept),
            len(candidates),
            sum(rng.length for rng in kept),
        )
    resuming.keep(kept)


async def read_back_kept(
    lease: Lease, partial: str, config: TransferConfig, attrs: codec.Attrs, entries: list[Entry]
) -> list[Range]:
    """The ``entries`` whose bytes in ``partial`` still hash as journaled.

    Only those ranges are read, through the download's read loop (READs kept
    in flight, the stall timeout). A dropped connection raises: the upload's
    reconnect loop runs ``prepare`` again.
    """
    size = attrs.size or 0
    check = ReadBackCheck(entries)
    wanted = [Range(offset, length) for offset, length, _ in entries]

    def plan_for(_: codec.Attrs, block: int) -> ReadPlan:
        # "Resuming" a download of which everything but the wanted ranges is here.
        return ReadPlan.resuming(block_size=block, size=size, have=missing(size, wanted))

    async with reading(lease, partial, config, known=attrs, plan_for=plan_for) as pump:
        async for batch in pump.arrivals():
            for offset, chunks, length in batch:
                check.add(offset, b"".join(chunks))
                pump.free(length)
    return check.kept
