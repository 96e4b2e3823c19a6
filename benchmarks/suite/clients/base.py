"""What every client family implements: a skip reason, and the argv of one whole
process for a job (a file or a tree, get or put)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sshpipe.testing.sshd import SSHServerInfo

CHILDREN = Path(__file__).resolve().parent.parent / "children"


@dataclass(frozen=True, kw_only=True)
class Job:
    """One transfer: ``src`` to the new name ``dst``; the remote one is a path on ``srv``."""

    direction: str  # "get" or "put"
    what: str  # "file" or "tree"
    src: Path
    dst: Path
    srv: SSHServerInfo  # as the client sees it (the emulator's port)
    work: Path  # for batch files and the like

    @property
    def tree(self) -> bool:
        return self.what == "tree"


@dataclass(frozen=True, kw_only=True)
class SuiteClient:
    """One benchmarked client: a family, a variant, and how to run it."""

    name: str
    family: str
    describe: str
    argv: Callable[[Job], list[str]]
    trees: tuple[str, ...] = ("get", "put")  # directions it copies trees in
    tree_note: str = ""  # why not, when a direction is missing
    executables: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()  # importable Python modules it needs
    version: Callable[[], str] = field(default=lambda: "")

    def skip_reason(self) -> str | None:
        """Why this client cannot run here, or None."""
        for exe in self.executables:
            if shutil.which(exe) is None:
                return f"{exe} not found on PATH (scripts/bench.sh installs it as root)"
        for module in self.modules:
            if importlib.util.find_spec(module) is None:
                return f"Python module {module} not importable (pip package missing)"
        return None


def exe_version(argv: list[str], line: int = 0) -> Callable[[], str]:
    def version() -> str:
        try:
            out = subprocess.run(
                argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            return f"unavailable ({exc})"
        lines = (out.stdout + out.stderr).strip().splitlines()
        return lines[line].strip() if len(lines) > line else ""

    return version


def package_version(*names: str) -> Callable[[], str]:
    def version() -> str:
        parts = []
        for name in names:
            try:
                parts.append(f"{name} {importlib.metadata.version(name)}")
            except importlib.metadata.PackageNotFoundError:
                parts.append(f"{name} not installed")
        return ", ".join(parts)

    return version


def child_argv(script: str, job: Job, *opts: str) -> list[str]:
    """A Python library's child (children/SCRIPT) for ``job``: one whole process."""
    srv = job.srv
    return [
        sys.executable, str(CHILDREN / script), *(f"--opt={o}" for o in opts),
        job.direction, job.what, srv.host, str(srv.port), srv.user, str(srv.client_key),
        str(srv.known_hosts), str(job.src), str(job.dst),
    ]  # fmt: skip
