"""The benchmark suite (``bash scripts/bench.sh``): every client a user might pick
instead of sshpipe, against one sshd through one emulated link, whole processes.

- ``clients/``: one small module per client family; each client says why it cannot
  run (a skip reason) or builds the argv of one whole process for a job;
- ``children/``: the Python libraries' transfer programs (stdlib + that library only,
  run as files, so their start-up is in the measured time);
- ``scenarios``: loopback, emulated links, sizes, trees and the presets;
- ``runner``: sshd, emulator, sources, the round-robin loop, sha256 checks;
- ``report`` / ``plots``: results.json, results.md and the PNGs.

Run from the repo root through ``benchmarks/bench_suite.py`` (so ``benchmarks/`` is on
sys.path for the shared ``_*.py`` helpers).
"""
