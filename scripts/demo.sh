#!/usr/bin/env bash
# Install sshpipe in .venv and run the demo against the embedded server.
# Usage: bash scripts/demo.sh [demo options, e.g. --size 256M]
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check ".[cli]"
exec "$VENV/bin/python" -m sshpipe demo "$@"
