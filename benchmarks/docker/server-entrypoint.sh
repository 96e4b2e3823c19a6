#!/bin/sh
# Server container: netem on its egress (the download direction), keys in the
# shared volume (generated once), then a stock sshd in the foreground.
set -eu
sh /usr/local/lib/bench/netem.sh "$RTT_MS" "$RATE_MBIT" "${NETEM_DEV:-eth0}"
umask 077
[ -f /keys/ssh_host_ed25519_key ] ||
    ssh-keygen -q -N '' -t ed25519 -C sshpipe-bench-host -f /keys/ssh_host_ed25519_key
[ -f /keys/id_ed25519 ] ||
    ssh-keygen -q -N '' -t ed25519 -C sshpipe-bench-client -f /keys/id_ed25519
umask 022
cp /keys/id_ed25519.pub /keys/authorized_keys
mkdir -p /run/sshd
# The healthcheck waits for the pid file, which sshd writes once it listens.
rm -f /run/sshd.pid
exec /usr/sbin/sshd -D -e
