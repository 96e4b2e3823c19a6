#!/bin/sh
# Usage: netem.sh RTT_MS RATE_MBIT [DEV]
#
# Kernel netem on this host's egress: half the round trip and the rate cap.
# The peer runs the same with the same numbers, so a round trip sees RTT_MS in
# all and each direction is capped at RATE_MBIT where it is sent.
set -eu
rtt_ms=$1
rate_mbit=$2
dev=${3:-eth0}
half=$(awk -v r="$rtt_ms" 'BEGIN { printf "%g", r / 2 }')
# netem's limit (packets) covers its delay line (RTT/2 at full rate) and the
# queue before it. Size it for the delay line plus one bandwidth-delay product
# of 1500-byte packets, like the user-space emulator's default queue; netem's
# own default, 1000 packets, would drop above ~250 Mbit/s at 100 ms.
limit=$(awk -v r="$rate_mbit" -v d="$rtt_ms" \
    'BEGIN { printf "%d", r * 1e6 / 8 * (d / 1000) * 1.5 / 1500 + 1000 }')
tc qdisc replace dev "$dev" root netem delay "${half}ms" rate "${rate_mbit}mbit" limit "$limit"
tc qdisc show dev "$dev"
