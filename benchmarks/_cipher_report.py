"""bench_loopback.py --ciphers: one sshpipe and one OpenSSH sftp client per cipher, and their table.

The figure a cipher changes is the client's CPU, not the loopback wall time
(two cores shared with sshd and whatever else runs): **CPU-s/GiB** is the
client's user + system seconds for the file, net of its 1-byte set-up (the
interpreter, the imports, the handshake), per GiB moved. Whole-command time
and MB/s stay as a second column.

Imported by bench_loopback.py (run as a file, so this directory is on sys.path).
"""

from __future__ import annotations

import statistics

from _bench_common import Client, size_label
from _whole import SETUP_SIZE, Matrix
from _whole_report import _fmt, _table

GIB = 1 << 30
# What a stock sshd (OpenSSH 9.x) accepts of asyncssh's default list; the
# CBC, 3DES, Blowfish, CAST, SEED and RC4 ciphers asyncssh can also do are
# off in stock sshd, so no default of ours could reach them.
STOCK_CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes128-ctr",
    "aes192-ctr",
    "aes256-ctr",
)
PREFIX = {"sshpipe": "sshpipe", "sftp": "sftp"}


def cipher_list(text: str) -> tuple[str, ...]:
    """``--ciphers`` value: names separated by commas, or "all" for ``STOCK_CIPHERS``."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    return STOCK_CIPHERS if names == ("all",) else names


def short(cipher: str) -> str:
    return cipher.removesuffix("@openssh.com").replace("chacha20-poly1305", "chacha20")


def cipher_clients(ciphers: tuple[str, ...], sshpipe_common: tuple[str, ...]) -> list[Client]:
    """Per cipher, sshpipe and sftp (its defaults otherwise) with ``-c CIPHER``."""
    clients = []
    for cipher in ciphers:
        clients.append(
            Client(f"sshpipe:{short(cipher)}", "sshpipe", (*sshpipe_common, "-c", cipher, "--json"))
        )
        clients.append(Client(f"sftp:{short(cipher)}", "sftp", ("-c", cipher)))
    return clients


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def cpu_table(matrix: Matrix) -> str:
    """One row per size, direction and client: CPU-s/GiB first, then the whole command."""
    header = ["size", "dir", "client", "CPU-s/GiB", "CPU s", "set-up CPU s", "whole s", "MB/s",
              "ok/runs"]  # fmt: skip
    lines = []
    sizes = sorted({size for s in matrix.settings for size in s.sizes})
    for size in sizes:
        for direction in matrix.directions:
            for client in matrix.clients:
                mine = [
                    s for s in matrix.samples
                    if s.client == client.name and s.direction == direction
                ]  # fmt: skip
                runs = [s for s in mine if s.kind == "transfer" and s.size_bytes == size]
                good = [s for s in runs if s.ok]
                cpu = _median([s.cpu_s for s in good])
                setup = _median([s.cpu_s for s in mine if s.kind == "setup" and s.ok])
                whole = _median([s.wall_s for s in good])
                per_gib = None if cpu is None or setup is None else (cpu - setup) * GIB / size
                name = f"**{client.name}**" if client.kind == "sshpipe" else client.name
                lines.append([
                    size_label(size), direction, name, _fmt(per_gib, ".2f"), _fmt(cpu, ".2f"),
                    _fmt(setup, ".2f"), _fmt(whole, ".2f"),
                    _fmt(None if whole is None else size / 1e6 / whole, ".1f"),
                    f"{len(good)}/{len(runs)}",
                ])  # fmt: skip
    heading = (
        "### Client CPU per cipher: CPU-s/GiB = (CPU s − set-up CPU s) / size, "
        f"user + system, medians; set-up = a {SETUP_SIZE}-byte file"
    )
    return "\n".join([heading, "", *_table(header, lines)])
