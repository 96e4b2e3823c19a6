#!/usr/bin/env bash
# Install sshpipe in .venv and run the demo against the embedded server, next to
# OpenSSH's own sftp (openssh-client is installed for it when root and missing).
# Usage: bash scripts/demo.sh [demo options, e.g. --size 256M]
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
if ! command -v sftp >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt_install openssh-client
fi
# Editable, as scripts/test.sh and bench.sh install it: the three share .venv, and
# a copy here would shadow the checkout for every later process started elsewhere
# (the tests run their CLI children in temp directories).
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[cli]"
exec "$VENV/bin/python" -m sshpipe demo "$@"
