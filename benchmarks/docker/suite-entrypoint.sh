#!/bin/sh
# The benchmark suite's container (docker compose run --rm suite): the same command as
# on a workstation, `bash scripts/bench.sh`, with real kernel netem instead of the
# user-space emulator. Its sshd and clients share this container's loopback, so netem
# goes on lo: every packet crosses lo's egress once each way, so half the RTT per pass
# makes a round trip of RTT_MS. Only the suite's loopback scenario runs (the emulated
# ones would add their delay on top). Arguments are passed on (e.g. --clients, --reps).
set -eu
sh /repo/benchmarks/docker/netem.sh "$RTT_MS" "$RATE_MBIT" lo
cd /repo
exec bash scripts/bench.sh --standard --scenarios loopback \
    --out "benchmarks/results/suite-netem-${RTT_MS}ms-${RATE_MBIT}mbit" \
    --workdir /scratch "$@"
