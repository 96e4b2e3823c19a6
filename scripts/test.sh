#!/usr/bin/env bash
# Install everything the tests need (via apt-get when missing and root: openssh-server,
# and the foreign SFTP servers ProFTPD mod_sftp and Green End; sshpipe[cli,test] in
# .venv) and run lint, types and the whole test suite.
# Usage: bash scripts/test.sh [extra pytest arguments]
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
if ! [ -x /usr/sbin/sshd ] && ! command -v sshd >/dev/null; then
    apt_install openssh-server openssh-client
fi
command -v sftp >/dev/null || apt_install openssh-client
# The interop suite's foreign servers (sshpipe/testing/proftpd.py, greenend.py).
if ! { [ -x /usr/sbin/proftpd ] || command -v proftpd >/dev/null; } \
    || ! { [ -e /usr/lib/proftpd/mod_sftp.so ] || [ -e /usr/libexec/proftpd/mod_sftp.so ]; }; then
    apt_install proftpd-core proftpd-mod-crypto
fi
if ! [ -x /usr/libexec/gesftpserver ] && ! [ -x /usr/lib/gesftpserver ]; then
    apt_install gesftpserver
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[cli,test]"
"$VENV/bin/python" -m ruff check sshpipe tests benchmarks
"$VENV/bin/python" -m mypy
# Most tests wait on sockets, sshd and emulated latency, not the CPU: pytest-xdist
# workers overlap them (each starts its own session servers on free ports, in its
# own temporary directory). The whole suite runs in two parts: everything else on
# the workers, then the timing-sensitive tests (markers linkemu and timing: rates,
# stall budgets, Ctrl-C bounds) alone in this process, with no worker beside them
# to steal their CPU. With extra arguments it is one run on the workers, where
# --dist loadgroup still keeps those tests on one worker, one at a time
# (tests/conftest.py, SERIAL_MARKERS); "-n 0" runs everything here, serially.
WORKERS=${SSHPIPE_TEST_WORKERS:-3}
if [ $# = 0 ]; then
    "$VENV/bin/python" -m pytest -n "$WORKERS" -m "not linkemu and not timing"
    echo "== the timing-sensitive tests, alone"
    "$VENV/bin/python" -m pytest -m "linkemu or timing"
else
    "$VENV/bin/python" -m pytest -n "$WORKERS" --dist loadgroup "$@"
fi
# As root, also prove the sshd fixture and the client work for an ordinary user.
if [ "$(id -u)" = 0 ] && [ "${SSHPIPE_SKIP_USER_RUN:-0}" != 1 ] && [ $# = 0 ]; then
    echo "== the OpenSSH tests again, as an ordinary user"
    bash scripts/test-as-user.sh
fi
