"""What a shared get and put have in common: the workers' hello, their stats together."""

from __future__ import annotations

import dataclasses
import pickle
import time

from ..core.config import ConnectConfig, TransferConfig
from ..core.errors import UsageError
from ..core.readplan import Range
from ..core.stats import TransferStats, Verified
from ..core.stripes import stripes, worker_count
from ..transport.pool import ChannelPool
from . import wire


def count_for(config: TransferConfig, size: int | None) -> int:
    """Workers for a file of ``size`` bytes (1: the caller copies it in one process)."""
    requested = None if config.workers == "auto" else config.workers
    return worker_count(requested, size=size)


def hello_for(
    connect: ConnectConfig, pool: ChannelPool, config: TransferConfig, count: int
) -> wire.Hello:
    """How each of ``count`` workers connects: the parent's options, what its log-in learnt.

    A worker asks nobody anything (the parent's log-in already did: the
    password the server took goes with it); it checks the host key exactly as
    the parent did, against the same files and policy.

    Raises:
        UsageError: an option that cannot cross to another process (a
            ``known_hosts`` callable, a key object that does not pickle).
    """
    if callable(connect.known_hosts):  # it decides in this process: no worker can ask it
        raise UsageError(
            "workers: a known_hosts callable cannot be handed to a worker process; "
            "copy with workers=1"
        )
    # Compression as the parent's connection has it: auto (the default, or
    # ssh_config's) goes plain by workers, each copying stripes of one file.
    compressed = connect.compression
    if compressed is None or compressed == "auto":
        compressed = pool.compression_mode == "yes"
    child = dataclasses.replace(
        connect,
        prompt=None,
        password=pool.auth_memory.password or connect.password,
        compression=compressed,
    )
    # One transfer per worker process: local I/O on its loop (as the CLI's).
    # A rate limit is the whole transfer's (``-l``): each worker takes its share.
    # So is the byte budget (its memory): N workers each with the whole held N times it.
    rate = -(-config.rate_limit // count) if config.rate_limit is not None else None
    budget = max(1, config.max_bytes_in_flight // count)
    single = dataclasses.replace(
        config,
        workers=1,
        local_io_in_thread=False,
        rate_limit=rate,
        max_bytes_in_flight=budget,
        min_bytes_in_flight=min(config.min_bytes_in_flight, budget),
    )
    hello = wire.Hello(connect=child, config=single)
    try:
        pickle.dumps(hello)
    except Exception as exc:
        raise UsageError(
            f"workers: these connection options cannot be handed to a worker process "
            f"({type(exc).__name__}); copy with workers=1"
        ) from None
    return hello


def split(owed: list[Range], count: int) -> list[tuple[Range, ...]]:
    return [tuple(part) for part in stripes(owed, count)]


def merged(
    dones: list[wire.Done],
    *,
    size: int,
    started: float,
    verified: Verified,
    resumed: int = 0,
) -> TransferStats:
    """The workers' stats as one transfer's: counts summed, the first worker's timings."""
    every = [done.stats for done in dones]
    return dataclasses.replace(
        every[0],
        bytes=size,
        seconds=time.perf_counter() - started,
        requests=sum(stats.requests for stats in every),
        short_reads_reissued=sum(stats.short_reads_reissued for stats in every),
        peak_requests_in_flight=sum(stats.peak_requests_in_flight for stats in every),
        peak_bytes_in_flight=sum(stats.peak_bytes_in_flight for stats in every),
        channels=sum(stats.channels for stats in every),
        connections=sum(stats.connections for stats in every),
        reconnects=sum(stats.reconnects for stats in every),
        size_changed=any(stats.size_changed for stats in every),
        verified=verified,
        resumed_bytes=resumed,
        workers=len(every),
    )
