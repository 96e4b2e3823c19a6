# Sourced by scripts/demo.sh and scripts/test.sh: make .venv with Python >= 3.11.
# A fresh Debian has python3 but may lack python3-venv (ensurepip); as root we
# install it with apt-get, otherwise we say what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
VENV=${SSHPIPE_VENV:-.venv}

apt_install() {
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        if [ -z "${SSHPIPE_APT_UPDATED:-}" ]; then
            apt-get update -qq
            export SSHPIPE_APT_UPDATED=1
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
    else
        echo "missing: $* (install it, e.g. sudo apt-get install $*)" >&2
        exit 1
    fi
}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "sshpipe needs Python >= 3.11 (set PYTHON=/path/to/python3.11)" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        rm -rf "$VENV"
        apt_install python3-venv
        "$PYTHON" -m venv "$VENV"
    fi
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
