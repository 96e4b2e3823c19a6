#!/usr/bin/env python3
"""The benchmark suite's entry (``bash scripts/bench.sh`` runs it): every client a user
might pick instead of sshpipe, whole-command time, every byte checked.
See benchmarks/suite/ and README.md ("The benchmark suite")."""

from __future__ import annotations

import sys

from suite.main import main

if __name__ == "__main__":
    sys.exit(main())
