#!/bin/sh
# Client container: netem on its egress (the upload direction), a known_hosts
# made from the server's public host key in the shared volume (no trust on
# first use), then bench_wan.py against the server. Arguments are passed on to
# bench_wan.py (later options win, e.g. --out or --reps).
set -eu
sh /repo/benchmarks/docker/netem.sh "$RTT_MS" "$RATE_MBIT" "${NETEM_DEV:-eth0}"
echo "server $(cut -d ' ' -f 1,2 /keys/ssh_host_ed25519_key.pub)" >/tmp/known_hosts
cd /repo
exec python benchmarks/bench_wan.py \
    --server server:22 --user bench \
    --identity /keys/id_ed25519 --known-hosts /tmp/known_hosts \
    --rtts "$RTT_MS" --rates "$RATE_MBIT" --link-label "netem ${RTT_MS}ms ${RATE_MBIT}mbit" \
    --out "benchmarks/results/wan-netem-${RTT_MS}ms-${RATE_MBIT}mbit" \
    "$@"
