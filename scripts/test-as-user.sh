#!/usr/bin/env bash
# Run the tests that start a real sshd once more as an ordinary user (sshd then
# runs unprivileged and can only log that user in). Called by scripts/test.sh
# when it runs as root; needs useradd and a system python3 >= 3.11 with venv.
# Selected by marker (tests/conftest.py sets them): every sshd test that does
# not need root, and the integration tests that need no server at all (usage
# errors, local errors); not those against in-process servers or the bare link
# emulator, whose outcome does not depend on the user. The foreign servers
# (ProFTPD, Green End) get only their fixture smoke tests here: their interop
# cases take ~40 s as an ordinary user, more than this run can spend; the
# smoke tests prove the unprivileged set-up (no chroot, no user switching).
# It runs them on stock asyncssh (SSHPIPE_ASYNCSSH_PATCHES=off: none of sshpipe's
# patches), so the OpenSSH tests run once as a release the patches were not
# checked against would run them; tests of a patch's own effect skip (needs_patches).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
USER_NAME=${SSHPIPE_TEST_USER:-sshpipetest}
# The root venv's Python may live under /root (pyenv), unreadable to others.
SYSTEM_PYTHON=${SSHPIPE_USER_PYTHON:-/usr/bin/python3}

id "$USER_NAME" >/dev/null 2>&1 || useradd -m -s /bin/bash "$USER_NAME"
# A locked account ("!" in /etc/shadow) cannot log in over sshd without PAM;
# "*" leaves password login impossible but key login allowed.
if [ "$(getent shadow "$USER_NAME" | cut -d: -f2)" = "!" ]; then
    usermod -p '*' "$USER_NAME"
fi
work=$(mktemp -d /tmp/sshpipe-user-run.XXXXXX)
trap 'rm -rf "$work"' EXIT
tar --exclude=.venv --exclude=.git --exclude='*.partial' -cf - . | tar -xf - -C "$work"
chown -R "$USER_NAME": "$work"
runuser -u "$USER_NAME" -- bash -c "
    set -euo pipefail
    cd '$work'
    '$SYSTEM_PYTHON' -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[cli,test]'
    # Reconnects, striping, load and memory, resume's many cases, the rate limit, the display and
    # the fault matrix (sshd killed, re-keyed, partitioned: test_ledger has the user's state dir),
    # the demo, fsspec's abstract suites and pandas/pyarrow/Dask over sshpipe:// (test_fsspec.py
    # stays: its read-only-directory case needs a user) behave the same whoever runs them
    # (the root run has them); what differs
    # for a user is permissions, the fixture, paths and state dirs (a put resume's
    # journal: test_interop's resume case; ssh_config, prompts, the mux's socket dir).
    # Two workers, the timing-sensitive tests on one of them (as in scripts/test.sh).
    SSHPIPE_ASYNCSSH_PATCHES=off \
    .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup tests/integration \
        --ignore=tests/integration/faults/test_reconnect.py \
        --ignore=tests/integration/api/test_resume.py \
        --ignore=tests/integration/tree/test_tree_reconnect.py \
        --ignore=tests/integration/tree/test_tree_resume.py \
        --ignore=tests/integration/api/test_load.py \
        --ignore=tests/integration/api/test_memory_budget.py \
        --ignore=tests/integration/faults/test_fault_matrix.py \
        --ignore=tests/integration/api/test_striping.py \
        --ignore=tests/integration/cli/test_ratelimit_cli.py \
        --ignore=tests/integration/cli/test_cli_view.py \
        --ignore=tests/integration/cli/test_demo_wan.py \
        --ignore=tests/integration/fsspec/test_fsspec_abstract.py \
        --ignore=tests/integration/fsspec/test_fsspec_dataframes.py \
        -m 'not root and not slow and not proftpd and not greenend and (openssh or not (asyncssh_server or linkemu))'
    SSHPIPE_ASYNCSSH_PATCHES=off \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/integration/peers/test_foreign_fixtures.py
"
