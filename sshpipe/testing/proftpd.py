"""Launch a throwaway ProFTPD ``mod_sftp`` server, a foreign SFTP implementation, for tests.

ProFTPD runs in the foreground (``proftpd -n``) with a config of its own (the
system's ``/etc/proftpd`` is never read), on a free 127.0.0.1 port, with a
fresh ed25519 host key and one fresh client key for the current user. What a
reviewer of the config should know:

- As root it chroots the session into the served root (``DefaultRoot``), as
  most real deployments do: paths are then ``/name`` and ``chrooted`` is True.
  An ordinary user cannot chroot, nor switch users: ``User``/``Group`` name
  the user it runs as, which is the one user it can log in, and paths are
  the real absolute ones.
- No PAM (``AuthOrder mod_auth_unix.c``), no ``/etc/ftpusers`` (which lists
  root), no valid-shell check, no ident or reverse DNS, no wtmp, no delay
  table, no controls socket (its default path is shared with any other
  ProFTPD on the machine).
- ``AllowOverwrite on`` and ``AllowStoreRestart on``: ProFTPD's defaults
  refuse to replace a file and to write into an existing one at an offset,
  which Debian's stock config (and every SFTP server that runs uploads)
  turns on.
- ``SFTPAuthorizedUserKeys`` wants RFC 4716 keys (``ssh-keygen -e``).
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ._launch import (
    HOST,
    SSHServerError,
    WorkFiles,
    keygen,
    log_tail,
    public_key,
    quote,
    run_checked,
    start_on_free_port,
    stop,
    wait_until_ready,
)

__all__ = ["ProFTPDError", "ProFTPDInfo", "proftpd_path", "proftpd_server"]

_PROFTPD_FALLBACKS = (Path("/usr/sbin/proftpd"), Path("/usr/local/sbin/proftpd"))
# Where distributions put the DSO modules (Debian: /usr/lib/proftpd).
_MODULE_DIRS = (
    Path("/usr/lib/proftpd"),
    Path("/usr/libexec/proftpd"),
    Path("/usr/local/libexec/proftpd"),
    Path("/usr/lib64/proftpd"),
)
_START_TIMEOUT = 15.0
# Only mod_sftp speaks this, so a banner from some other SSH server never passes.
_BANNER = b"SSH-2.0-mod_sftp"


class ProFTPDError(SSHServerError):
    """The test ProFTPD could not be set up, started, or reached."""


@dataclass(frozen=True, kw_only=True)
class ProFTPDInfo:
    """Everything a client needs to reach the test ProFTPD.

    ``root`` is the local directory the server serves; when ``chrooted``, the
    client sees it as ``/`` (``remote`` spells a path under it either way).
    """

    host: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path
    root: Path
    chrooted: bool
    config: Path
    log_file: Path
    sftp_log: Path

    def remote(self, local: Path) -> str:
        """How the client must name ``local``, a path under ``root``."""
        if not self.chrooted:
            return str(local)
        return "/" + local.relative_to(self.root).as_posix().removeprefix(".")

    def log_tail(self) -> str:
        return log_tail(self.log_file, self.sftp_log)


@dataclass(frozen=True, kw_only=True)
class _Files(WorkFiles):
    """ProFTPD's own paths inside its work directory."""

    @property
    def authorized_keys(self) -> Path:
        return self.workdir / "authorized_keys.rfc4716"

    @property
    def config(self) -> Path:
        return self.workdir / "proftpd.conf"

    @property
    def log_file(self) -> Path:
        return self.workdir / "proftpd.log"

    @property
    def sftp_log(self) -> Path:
        return self.workdir / "sftp.log"


def proftpd_path() -> Path | None:
    """Absolute path of ``proftpd``, or None when it is not installed."""
    found = shutil.which("proftpd")
    if found is not None:
        return Path(found).absolute()
    for candidate in _PROFTPD_FALLBACKS:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def mod_sftp_directive(proftpd: Path) -> list[str]:
    """The lines that give this ProFTPD ``mod_sftp``: none if built in, else a LoadModule.

    Raises:
        ProFTPDError: it is neither built in nor installed as a module
            (Debian: proftpd-mod-crypto).
    """
    built_in = run_checked([str(proftpd), "-l"])
    if "mod_sftp.c" in built_in.split():
        return []
    for directory in _MODULE_DIRS:
        if (directory / "mod_sftp.so").is_file():
            return [f"ModulePath {quote(directory)}", "LoadModule mod_sftp.c"]
    raise ProFTPDError(
        "ProFTPD has no mod_sftp (install proftpd-mod-crypto, e.g. apt-get install "
        "proftpd-core proftpd-mod-crypto)"
    )


@contextlib.contextmanager
def proftpd_server(workdir: Path) -> Iterator[ProFTPDInfo]:
    """Run ProFTPD with mod_sftp for the duration of the ``with`` block.

    Raises:
        ProFTPDError: proftpd or mod_sftp is missing, or the server did not
            start (the message carries the tail of its logs).
    """
    proftpd = proftpd_path()
    if proftpd is None:
        raise ProFTPDError("proftpd not found (install proftpd-core proftpd-mod-crypto)")
    files = _Files(workdir=workdir.resolve())
    _prepare_files(files)
    module = mod_sftp_directive(proftpd)
    chrooted = os.geteuid() == 0
    proc, port = start_on_free_port(
        "proftpd",
        lambda port: _write_port_dependent_files(files, port, module, chrooted),
        lambda: _spawn(proftpd, files),
        lambda proc, port: _wait_until_ready(proc, port, files),
        files.log_file,
    )
    try:
        yield ProFTPDInfo(
            host=HOST,
            port=port,
            user=pwd.getpwuid(os.geteuid()).pw_name,
            client_key=files.client_key,
            known_hosts=files.known_hosts,
            root=files.root,
            chrooted=chrooted,
            config=files.config,
            log_file=files.log_file,
            sftp_log=files.sftp_log,
        )
    finally:
        _stop(proc)


def _prepare_files(files: _Files) -> None:
    files.workdir.mkdir(parents=True, exist_ok=True)
    files.root.mkdir(exist_ok=True)
    keygen(files.host_key, comment="sshpipe-test-host")
    keygen(files.client_key, comment="sshpipe-test-client")
    # mod_sftp reads RFC 4716 ("---- BEGIN SSH2 PUBLIC KEY ----"), not OpenSSH's one-liners.
    rfc4716 = run_checked(
        ["ssh-keygen", "-e", "-f", str(files.client_key.with_name(files.client_key.name + ".pub"))]
    )
    files.authorized_keys.write_text(rfc4716)


def _config_lines(files: _Files, port: int, module: list[str], chrooted: bool) -> list[str]:
    user = pwd.getpwuid(os.geteuid())
    group = grp.getgrgid(os.getegid()).gr_name
    return [
        *module,
        "ServerType standalone",
        'ServerName "sshpipe-test"',
        f"DefaultAddress {HOST}",
        "SocketBindTight on",
        "UseIPv6 off",
        f"Port {port}",
        # Whom the daemon runs as: switching to anyone else needs root, and a
        # non-root daemon that tries fails every login ("unable to set UID").
        f"User {user.pw_name}",
        f"Group {group}",
        f"PidFile {quote(files.workdir / 'proftpd.pid')}",
        f"ScoreboardFile {quote(files.workdir / 'proftpd.scoreboard')}",
        "DelayTable none",
        "WtmpLog off",
        "TransferLog none",
        "<IfModule mod_ctrls.c>",
        "  ControlsEngine off",
        "</IfModule>",
        # Unix accounts only: PAM needs root and tends to break in containers.
        "AuthOrder mod_auth_unix.c",
        "RootLogin on",
        "UseFtpUsers off",
        "RequireValidShell off",
        "UseReverseDNS off",
        "AllowOverwrite on",
        "AllowStoreRestart on",
        "Umask 022",
        # Sessions start in the served root: a chroot there, else a chdir (which
        # also spares a login the home directory, absent for users like nobody).
        f"{'DefaultRoot' if chrooted else 'DefaultChdir'} {quote(files.root)}",
        "SFTPEngine on",
        f"SFTPLog {quote(files.sftp_log)}",
        f"SFTPHostKey {quote(files.host_key)}",
        "SFTPAuthMethods publickey",
        f"SFTPAuthorizedUserKeys file:{files.authorized_keys}",
    ]


def _write_port_dependent_files(
    files: _Files, port: int, module: list[str], chrooted: bool
) -> None:
    lines = _config_lines(files, port, module, chrooted)
    files.config.write_text("\n".join(lines) + "\n")
    files.known_hosts.write_text(f"[{HOST}]:{port} {public_key(files.host_key)}\n")


def _spawn(proftpd: Path, files: _Files) -> subprocess.Popen[bytes]:
    # -n: foreground, and the system log goes to stderr (no SystemLog set).
    # A session of its own, so that stopping it also ends the per-connection children.
    argv = [str(proftpd), "-n", "-c", str(files.config)]
    with files.log_file.open("wb") as log:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )


def _wait_until_ready(proc: subprocess.Popen[bytes], port: int, files: _Files) -> None:
    try:
        wait_until_ready(
            "proftpd",
            proc,
            port,
            files.log_file,
            timeout=_START_TIMEOUT,
            listening=lambda log: "standalone mode STARTUP" in log,
            port_taken=lambda log: f"port {port}: Address already in use" in log,
            banner=_BANNER,
        )
    except SSHServerError as exc:
        if type(exc) is not SSHServerError:
            raise  # the port race: the launcher retries
        raise ProFTPDError(f"{exc}\n{log_tail(files.sftp_log)}") from None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    stop(proc)
    # Sessions still open when the daemon stopped (a test that killed its
    # client mid-way) would otherwise outlive the fixture.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
