#!/usr/bin/env bash
# The benchmark suite, one command: installs what it needs (as root via apt-get, only
# when missing: openssh, rclone, lftp, rsync; pip into .venv: sshpipe[bench-suite]),
# starts its own sshd and the link emulator, runs every client, writes
# DIR/results.json, DIR/results.md and PNG plots.
# Usage: bash scripts/bench.sh [--quick|--standard|--full] [--out DIR] [--clients a,b]
#                              [--scenarios x,y] [--reps N] [--list]
# A client whose package cannot be installed is skipped, its reason in the JSON.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
want_apt() {  # apt-get install PACKAGE if COMMAND is missing; never fatal
    local cmd=$1 pkg=$2
    command -v "$cmd" >/dev/null && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        ( apt_install "$pkg" ) || echo "bench: could not install $pkg (its client is skipped)" >&2
    else
        echo "bench: $cmd missing and not root: its client is skipped" >&2
    fi
}
if ! [ -x /usr/sbin/sshd ] && ! command -v sshd >/dev/null; then
    apt_install openssh-server openssh-client
fi
want_apt rclone rclone
want_apt lftp lftp
want_apt rsync rsync
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[cli]"
# One package at a time, so one that cannot be installed skips only its client.
for pkg in paramiko sshfs ssh2-python ssh-python matplotlib; do
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$pkg" \
        || echo "bench: pip could not install $pkg (its client is skipped)" >&2
done
exec "$VENV/bin/python" benchmarks/bench_suite.py "$@"
